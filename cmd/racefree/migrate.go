package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"text/tabwriter"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/dsn"
	"github.com/spf13/cobra"
)

func migrateCmd() *cobra.Command {
	var db string
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply, list or print the schema migrations",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return fmt.Errorf("migrate needs a subcommand: up, status or sql")
		},
	}
	cmd.PersistentFlags().StringVar(&db, "db", envOr("RACEFREE_DB", dsn.Default), "database: sqlite:PATH or postgres://… (env RACEFREE_DB)")

	up := &cobra.Command{
		Use:   "up",
		Short: "Apply the pending migrations (safe to run from many processes at once)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Minute)
			defer cancel()
			h, err := dsn.Open(ctx, db, &racefree.Config{Schema: racefree.SchemaMigrate})
			if err != nil {
				return err
			}
			defer h.Close()
			v, err := h.SchemaVersion(ctx)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "schema at version %d\n", v)
			return nil
		},
	}
	status := &cobra.Command{
		Use:   "status",
		Short: "List the migrations and whether each is applied",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := mustExist(db); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), time.Minute)
			defer cancel()
			h, err := dsn.Open(ctx, db, &racefree.Config{Schema: racefree.SchemaAllowOutdated})
			if err != nil {
				return err
			}
			defer h.Close()
			st, err := h.MigrationStatus(ctx)
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "VERSION\tNAME\tAPPLIED AT")
			for _, s := range st {
				at := "pending"
				if s.Applied {
					at = racefree.FromMillis(s.AppliedAt).Format(time.RFC3339)
				}
				fmt.Fprintf(w, "%03d\t%s\t%s\n", s.Version, s.Name, at)
			}
			return w.Flush()
		},
	}
	sqlCmd := &cobra.Command{
		Use:   "sql",
		Short: "Print the schema as plain SQL for your own migration tool; connects to nothing",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			engine, err := dsn.Engine(db)
			if err != nil {
				return err
			}
			defer engine.SQL().Close()
			script, err := racefree.MigrationScript(engine)
			if err != nil {
				return err
			}
			_, err = fmt.Fprint(cmd.OutOrStdout(), script)
			return err
		},
	}
	cmd.AddCommand(up, status, sqlCmd)
	return cmd
}

// mustExist refuses a SQLite database file that does not exist, so that a
// command that only reads never creates one (opening SQLite would).
func mustExist(d string) error {
	engine, path, err := dsn.Parse(d)
	if err != nil || engine != racefree.SQLite {
		return err
	}
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("sqlite %s: no such database file (this command only reads; `racefree migrate up` creates it)", path)
	}
	return nil
}
