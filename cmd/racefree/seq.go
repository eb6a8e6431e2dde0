package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/dsn"
	"github.com/racefree/racefree/seq"
	"github.com/racefree/racefree/tenant"
	"github.com/spf13/cobra"
)

// exitExhausted is seq next's exit status when the counter is at its end.
const exitExhausted = 3

// seqCmd hands out numbers of a gapless counter, in the database (--db)
// or on a running server (--server).
func seqCmd() *cobra.Command {
	var (
		db, ten string
		format  string
		n       int64
		srv     serverFlags
	)
	cmd := &cobra.Command{
		Use:   "seq",
		Short: "Hand out numbers of a gapless per-tenant counter (--db or --server)",
	}
	next := &cobra.Command{
		Use:   "next SCOPE NAME [--n N]",
		Short: "Take the next N numbers of counter SCOPE/NAME: prints them (--format json: {scope, name, first, last})",
		Long: `next takes n consecutive numbers of the counter in the database (--db), or,
with --server URL (or RACEFREE_SERVER), on a running racefree server with
the key in RACEFREE_KEY, whose tenant's counter it is (--tenant is for --db
only). Over HTTP a retry after a lost reply gets the same numbers back.
Exit status: 0 numbers taken, 1 the database or server failed, 2 bad input
or usage (nothing taken), 3 the counter is exhausted.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			scope, name := args[0], args[1]
			asJSON, err := jsonOutput(format)
			if err != nil {
				return err
			}
			if n < 1 {
				return clientExit(racefree.Invalid("n", "must be at least 1, got %d", n))
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), clientTimeout)
			defer cancel()
			var first int64
			if srv.url != "" {
				if cmd.Flags().Changed("tenant") || cmd.Flags().Changed("db") {
					return clientExit(racefree.Invalid("tenant", "--tenant and --db are for the database; with --server the key names the tenant"))
				}
				c, cerr := srv.client()
				if cerr != nil {
					return clientExit(cerr)
				}
				first, err = c.Next(ctx, scope, name, n)
			} else {
				first, err = seqNext(ctx, db, ten, scope, name, n)
			}
			if errors.Is(err, seq.ErrExhausted) {
				return &exitError{exitExhausted, err}
			}
			if err != nil {
				return clientExit(err)
			}
			last := first + n - 1
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(map[string]any{"scope": scope, "name": name, "first": first, "last": last})
			}
			if n == 1 {
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s/%s: %d\n", scope, name, first)
			} else {
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s/%s: %d..%d\n", scope, name, first, last)
			}
			return err
		},
	}
	next.Flags().Int64Var(&n, "n", 1, "how many numbers to take")
	next.Flags().StringVar(&db, "db", envOr("RACEFREE_DB", dsn.Default), "database: sqlite:PATH or postgres://… (env RACEFREE_DB)")
	next.Flags().StringVar(&ten, "tenant", tenant.Default, "the tenant whose counter it is")
	formatFlag(next, &format, "output: text (SCOPE/NAME: FIRST..LAST) or json ({scope, name, first, last}, as the API)")
	srv.add(next)
	cmd.AddCommand(next)
	return cmd
}

// seqNext takes n numbers of scope/name of tenant ten in the database db.
func seqNext(ctx context.Context, db, ten, scope, name string, n int64) (int64, error) {
	ctx, err := tenant.With(ctx, ten)
	if err != nil {
		return 0, err
	}
	h, err := openExisting(ctx, db, nil)
	if err != nil {
		return 0, err
	}
	defer h.Close()
	return seq.New(h).NextN(ctx, h, scope, name, n)
}
