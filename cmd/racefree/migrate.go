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
	"github.com/racefree/racefree/internal/ident"
	"github.com/racefree/racefree/tenant"
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

	var (
		to      int64
		appRole string
	)
	up := &cobra.Command{
		Use:   "up [--to N] [--app-role NAME]",
		Short: "Apply the pending migrations (safe to run from many processes at once)",
		Long: `up applies the pending migrations, all of them or those up to version --to.
With --app-role NAME (PostgreSQL) it then grants role NAME exactly what
"racefree serve" needs on racefree's tables (tenant.Grant), so that serve can
log in as NAME: a role that row-level security binds. NAME is judged by
every role it can become, before anything is migrated or granted: it is
refused (exit 1, one line naming the path) when it is, or can SET ROLE
through any chain of memberships (INHERIT or not) to, a superuser or a
BYPASSRLS role, or when it is, can SET ROLE to or inherits the privileges
of the tables' owner or the role running this command. Run it as the
tables' owner.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkUpFlags(cmd, db, to, appRole); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Minute)
			defer cancel()
			// Open without migrating: a role that would bypass row-level
			// security is refused before anything changes.
			h, err := dsn.Open(ctx, db, &racefree.Config{Schema: racefree.SchemaAllowOutdated})
			if err != nil {
				return err
			}
			defer h.Close()
			if appRole != "" {
				if err := tenant.CheckAppRole(ctx, h, appRole); err != nil {
					return fmt.Errorf("--app-role %s refused, nothing migrated or granted: %w", appRole, err)
				}
			}
			target := int64(-1)
			if cmd.Flags().Changed("to") {
				target = to
			}
			if _, err := h.MigrateUpTo(ctx, target); err != nil {
				return err
			}
			v, err := h.SchemaVersion(ctx)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "schema at version %d\n", v)
			if appRole == "" {
				return nil
			}
			if err := tenant.Grant(ctx, h, appRole); err != nil {
				return fmt.Errorf("grant to %s: %w", appRole, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "granted %s what racefree serve needs; it is bound by row-level security\n", appRole)
			return nil
		},
	}
	up.Flags().Int64Var(&to, "to", 0, "apply the migrations up to this version only (a staged rollout: --to 11 while the previous release runs)")
	up.Flags().StringVar(&appRole, "app-role", "", "PostgreSQL: grant this role what racefree serve needs, once migrated; refused first, changing nothing, if it is or can become (SET ROLE through its memberships) a superuser, a BYPASSRLS role or the tables' owner")
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

// checkUpFlags refuses --to and --app-role values before anything is
// opened.
func checkUpFlags(cmd *cobra.Command, db string, to int64, appRole string) error {
	engine, err := dsn.Engine(db)
	if err != nil {
		return err
	}
	defer engine.SQL().Close()
	ms, err := racefree.LoadMigrations(engine.Migrations())
	if err != nil {
		return err
	}
	last := ms[len(ms)-1].Version
	if cmd.Flags().Changed("to") && (to < 1 || to > last) {
		return racefree.Invalid("--to", "must be a migration version between 1 and %d", last)
	}
	if appRole == "" {
		return nil
	}
	if engine.Name() != racefree.Postgres {
		return racefree.Invalid("app-role", "roles and row-level security exist on PostgreSQL only; on SQLite every racefree statement filters by the tenant")
	}
	if _, err := ident.Quote(appRole); err != nil {
		return racefree.Invalid("app-role", "%v", err)
	}
	if cmd.Flags().Changed("to") && to < tenant.KeysVersion {
		return racefree.Invalid("app-role", "needs migration %03d (row-level security), past --to %d", tenant.KeysVersion, to)
	}
	return nil
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
