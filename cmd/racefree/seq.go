package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/client"
	"github.com/racefree/racefree/dsn"
	"github.com/racefree/racefree/seq"
	"github.com/racefree/racefree/tenant"
	"github.com/spf13/cobra"
)

// exitExhausted is seq next's exit status when the counter is at its end.
const exitExhausted = 3

// seqCmd hands out and reads numbers of a gapless counter, in the
// database (--db) or on a running server (--server).
func seqCmd() *cobra.Command {
	var (
		db, ten string
		format  string
		n       int64
		srv     serverFlags
	)
	cmd := &cobra.Command{
		Use:   "seq",
		Short: "Hand out and read numbers of a gapless per-tenant counter (--db or --server)",
	}
	// counter runs one call on counter SCOPE/NAME: over HTTP with
	// --server, else in the database as --tenant.
	counter := func(cmd *cobra.Command, remote func(context.Context, *client.Client) (int64, error),
		local func(context.Context, *seq.Counters, *racefree.DB) (int64, error)) (int64, error) {
		ctx, cancel := context.WithTimeout(cmd.Context(), clientTimeout)
		defer cancel()
		if srv.url != "" {
			if cmd.Flags().Changed("tenant") || cmd.Flags().Changed("db") {
				return 0, racefree.Invalid("tenant", "--tenant and --db are for the database; with --server the key names the tenant")
			}
			c, err := srv.client()
			if err != nil {
				return 0, err
			}
			return remote(ctx, c)
		}
		ctx, err := tenant.With(ctx, ten)
		if err != nil {
			return 0, err
		}
		h, err := openExisting(ctx, db, nil)
		if err != nil {
			return 0, err
		}
		defer h.Close()
		return local(ctx, seq.New(h), h)
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
			first, err := counter(cmd, func(ctx context.Context, c *client.Client) (int64, error) { return c.Next(ctx, scope, name, n) },
				func(ctx context.Context, cs *seq.Counters, h *racefree.DB) (int64, error) {
					return cs.NextN(ctx, h, scope, name, n)
				})
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
	current := &cobra.Command{
		Use:   "current SCOPE NAME",
		Short: "Print the last number counter SCOPE/NAME handed out, 0 when none (--format json: {scope, name, current})",
		Long: `current prints the last number the counter handed out, in the database (--db)
or, with --server URL (or RACEFREE_SERVER), on a running racefree server
with the key in RACEFREE_KEY. A counter that handed nothing out prints 0;
reading creates nothing. It takes no lock: current + 1 is not the next
number once another caller takes one (use next).
Exit status: 0 printed, 1 the database or server failed, 2 bad input or usage.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			scope, name := args[0], args[1]
			asJSON, err := jsonOutput(format)
			if err != nil {
				return err
			}
			cur, err := counter(cmd, func(ctx context.Context, c *client.Client) (int64, error) { return c.Current(ctx, scope, name) },
				func(ctx context.Context, cs *seq.Counters, h *racefree.DB) (int64, error) {
					return cs.Current(ctx, h, scope, name)
				})
			if err != nil {
				return clientExit(err)
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(map[string]any{"scope": scope, "name": name, "current": cur})
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s/%s: %d\n", scope, name, cur)
			return err
		},
	}
	for _, sub := range []*cobra.Command{next, current} {
		sub.Flags().StringVar(&db, "db", envOr("RACEFREE_DB", dsn.Default), "database: sqlite:PATH or postgres://… (env RACEFREE_DB)")
		sub.Flags().StringVar(&ten, "tenant", tenant.Default, "the tenant whose counter it is")
		srv.add(sub)
		cmd.AddCommand(sub)
	}
	formatFlag(next, &format, "output: text (SCOPE/NAME: FIRST..LAST) or json ({scope, name, first, last}, as the API)")
	formatFlag(current, &format, "output: text (SCOPE/NAME: CURRENT) or json ({scope, name, current}, as the API)")
	return cmd
}
