package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/dsn"
	"github.com/racefree/racefree/quota"
	"github.com/racefree/racefree/tenant"
	"github.com/spf13/cobra"
)

// quotaCmd charges a quota from the command line, for scripts and for
// trying a policy out, on the database (--db) or on a running server
// (--server): it prints the decision as JSON, exits 0 when the charge is
// allowed, 3 when it is refused and 2 on bad input.
func quotaCmd() *cobra.Command {
	var (
		db     string
		kind   string
		rate   int64
		per    time.Duration
		burst  int64
		n      int64
		ten    string
		format string
		srv    serverFlags
	)
	cmd := &cobra.Command{
		Use:   "quota",
		Short: "Charge a quota or rate limit",
	}
	consume := &cobra.Command{
		Use:   "consume KEY",
		Short: "Charge n units of KEY: prints the decision, exits 0 when allowed, 3 when refused, 2 on bad input",
		Long: `consume charges the counter in the database (--db), or, with --server URL
(or RACEFREE_SERVER), on a running racefree server with the key in
RACEFREE_KEY, whose tenant is charged (--tenant is for --db only).
Exit status: 0 allowed, 1 the database or server failed, 2 bad input or
usage (nothing charged), 3 refused (retry_after_ms says when to retry).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			asJSON, err := jsonOutput(format)
			if err != nil {
				return err
			}
			p := quota.Policy{Kind: quota.Kind(kind), Rate: rate, Per: per, Burst: burst, Wait: quota.NoWait}
			d, err := consumeQuota(cmd, args[0], n, p, db, ten, &srv)
			if err != nil {
				return clientExit(err)
			}
			out := map[string]any{"allowed": d.Allowed, "remaining": d.Remaining}
			if !d.ResetAt.IsZero() { // a server older than this client sends none with a refusal
				out["reset_at"] = d.ResetAt.UTC().Format(time.RFC3339Nano)
			}
			if !d.Allowed {
				out["retry_after_ms"] = d.RetryAfter.Milliseconds()
			}
			if err := printDecision(cmd.OutOrStdout(), d, out, asJSON); err != nil {
				return err
			}
			if !d.Allowed {
				return &exitError{code: exitHeld, err: &quota.ExceededError{Decision: d}}
			}
			return nil
		},
	}
	srv.add(consume)
	usageExit(consume)
	cmd.PersistentFlags().StringVar(&db, "db", envOr("RACEFREE_DB", dsn.Default), "database: sqlite:PATH or postgres://… (env RACEFREE_DB)")
	consume.Flags().StringVar(&kind, "kind", string(quota.GCRA), "policy: gcra, window or sliding_window")
	consume.Flags().Int64Var(&rate, "rate", 0, "units per --per (required)")
	consume.Flags().DurationVar(&per, "per", time.Second, "the period of --rate (whole milliseconds)")
	consume.Flags().Int64Var(&burst, "burst", 0, "gcra: the bucket's size (required for gcra)")
	consume.Flags().Int64Var(&n, "n", 1, "units to charge")
	consume.Flags().StringVar(&ten, "tenant", tenant.Default, "the tenant whose counter is charged")
	formatFlag(consume, &format, "output: text (one line) or json (one object: allowed, remaining, reset_at and, when refused, retry_after_ms, as the API)")
	cmd.AddCommand(consume)
	return cmd
}

// printDecision prints a quota decision as one line of text, or with
// asJSON the object out (the API's members).
func printDecision(w io.Writer, d quota.Decision, out map[string]any, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(w).Encode(out)
	}
	var err error
	if d.Allowed {
		_, err = fmt.Fprintf(w, "allowed: %d remaining", d.Remaining)
	} else {
		_, err = fmt.Fprintf(w, "refused: retry after %s (%d remaining)", d.RetryAfter, d.Remaining)
	}
	if err == nil && !d.ResetAt.IsZero() {
		_, err = fmt.Fprintf(w, ", full again at %s", fmtTime(d.ResetAt))
	}
	if err == nil {
		_, err = fmt.Fprintln(w)
	}
	return err
}

// consumeQuota charges n units of key under p on --server when it is set,
// else in the database db for tenant ten.
func consumeQuota(cmd *cobra.Command, key string, n int64, p quota.Policy, db, ten string, srv *serverFlags) (quota.Decision, error) {
	if err := p.Validate(); err != nil {
		return quota.Decision{}, err
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), clientTimeout)
	defer cancel()
	if srv.url != "" {
		if cmd.Flags().Changed("tenant") || cmd.Flags().Changed("db") {
			return quota.Decision{}, racefree.Invalid("tenant", "--tenant and --db are for the database; with --server the key names the tenant")
		}
		c, err := srv.client()
		if err != nil {
			return quota.Decision{}, err
		}
		return c.Consume(ctx, key, n, p)
	}
	ctx, err := tenant.With(ctx, ten)
	if err != nil {
		return quota.Decision{}, err
	}
	h, err := openExisting(ctx, db, nil)
	if err != nil {
		return quota.Decision{}, err
	}
	defer h.Close()
	l, err := quota.New(h, nil)
	if err != nil {
		return quota.Decision{}, err
	}
	return l.Consume(ctx, h, key, n, p)
}
