package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/racefree/racefree/dsn"
	"github.com/racefree/racefree/quota"
	"github.com/racefree/racefree/tenant"
	"github.com/spf13/cobra"
)

// quotaCmd charges a quota from the command line, for scripts and for
// trying a policy out: it prints the decision as JSON, exits 0 when the
// charge is allowed and 2 when it is refused.
func quotaCmd() *cobra.Command {
	var (
		db    string
		kind  string
		rate  int64
		per   time.Duration
		burst int64
		n     int64
		ten   string
	)
	cmd := &cobra.Command{
		Use:   "quota",
		Short: "Charge a quota or rate limit",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return fmt.Errorf("quota needs a subcommand: consume")
		},
	}
	consume := &cobra.Command{
		Use:   "consume KEY",
		Short: "Charge n units of KEY: prints the decision, exits 0 when allowed and 2 when refused",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p := quota.Policy{Kind: quota.Kind(kind), Rate: rate, Per: per, Burst: burst, Wait: quota.NoWait}
			if err := p.Validate(); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			ctx, err := tenant.With(ctx, ten)
			if err != nil {
				return err
			}
			h, err := dsn.Open(ctx, db, nil)
			if err != nil {
				return err
			}
			defer h.Close()
			l, err := quota.New(h, nil)
			if err != nil {
				return err
			}
			d, err := l.Consume(ctx, h, args[0], n, p)
			if err != nil {
				return err
			}
			out := map[string]any{"allowed": d.Allowed, "remaining": d.Remaining, "reset_at": d.ResetAt.Format(time.RFC3339Nano)}
			if !d.Allowed {
				out["retry_after_ms"] = d.RetryAfter.Milliseconds()
			}
			if err := json.NewEncoder(cmd.OutOrStdout()).Encode(out); err != nil {
				return err
			}
			if !d.Allowed {
				return &exitError{code: 2, err: &quota.ExceededError{Decision: d}}
			}
			return nil
		},
	}
	cmd.PersistentFlags().StringVar(&db, "db", envOr("RACEFREE_DB", dsn.Default), "database: sqlite:PATH or postgres://… (env RACEFREE_DB)")
	consume.Flags().StringVar(&kind, "kind", string(quota.GCRA), "policy: gcra, window or sliding_window")
	consume.Flags().Int64Var(&rate, "rate", 0, "units per --per (required)")
	consume.Flags().DurationVar(&per, "per", time.Second, "the period of --rate (whole milliseconds)")
	consume.Flags().Int64Var(&burst, "burst", 0, "gcra: the bucket's size (required for gcra)")
	consume.Flags().Int64Var(&n, "n", 1, "units to charge")
	consume.Flags().StringVar(&ten, "tenant", tenant.Default, "the tenant whose counter is charged")
	cmd.AddCommand(consume)
	return cmd
}
