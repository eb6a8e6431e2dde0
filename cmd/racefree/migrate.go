package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/dsn"
	"github.com/racefree/racefree/internal/ident"
	"github.com/racefree/racefree/sqlite"
	"github.com/racefree/racefree/tenant"
	"github.com/spf13/cobra"
)

func migrateCmd() *cobra.Command {
	var db string
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply, list or print the schema migrations",
	}
	cmd.PersistentFlags().StringVar(&db, "db", envOr("RACEFREE_DB", dsn.Default), "database: sqlite:PATH or postgres://… (env RACEFREE_DB)")

	var (
		to      int64
		appRole string
		format  string
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
of the tables' owner or the role running this command; and when it has,
or can SET ROLE to a role with, CREATEROLE, or has the rights of
pg_read_server_files, pg_write_server_files or pg_execute_server_program
(row-level security is not proven to bind it). Run it as the tables'
owner.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := jsonOutput(format)
			if err != nil {
				return err
			}
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
			if appRole != "" {
				if err := tenant.Grant(ctx, h, appRole); err != nil {
					return fmt.Errorf("grant to %s: %w", appRole, err)
				}
			}
			if asJSON {
				out := map[string]any{"version": v}
				if appRole != "" {
					out["granted"] = appRole
				}
				return json.NewEncoder(cmd.OutOrStdout()).Encode(out)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "schema at version %d\n", v)
			if appRole != "" {
				fmt.Fprintf(cmd.OutOrStdout(), "granted %s what racefree serve needs; it is bound by row-level security\n", appRole)
			}
			return nil
		},
	}
	up.Flags().Int64Var(&to, "to", 0, "apply the migrations up to this version only (a staged rollout: --to 11 while the previous release runs)")
	up.Flags().StringVar(&appRole, "app-role", "", "PostgreSQL: grant this role what racefree serve needs, once migrated; refused first, changing nothing, if it is or can become (SET ROLE through its memberships) a superuser, a BYPASSRLS role, the tables' owner or a CREATEROLE role, or has the rights of a predefined role of the server's files or programs")
	formatFlag(up, &format, "output: text or json ({version, granted})")
	status := &cobra.Command{
		Use:   "status",
		Short: "List the migrations and whether each is applied",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := jsonOutput(format)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), time.Minute)
			defer cancel()
			h, err := openExisting(ctx, db, &racefree.Config{Schema: racefree.SchemaAllowOutdated})
			if err != nil {
				return err
			}
			defer h.Close()
			st, err := h.MigrationStatus(ctx)
			if err != nil {
				return err
			}
			if asJSON {
				type migration struct {
					Version   int64  `json:"version"`
					Name      string `json:"name"`
					Applied   bool   `json:"applied"`
					AppliedAt string `json:"applied_at,omitempty"`
				}
				out := struct {
					Migrations []migration `json:"migrations"`
				}{Migrations: []migration{}}
				for _, s := range st {
					m := migration{Version: int64(s.Version), Name: s.Name, Applied: s.Applied}
					if s.Applied {
						m.AppliedAt = racefree.FromMillis(s.AppliedAt).Format(time.RFC3339)
					}
					out.Migrations = append(out.Migrations, m)
				}
				return json.NewEncoder(cmd.OutOrStdout()).Encode(out)
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
	formatFlag(status, &format, "output: text (a table) or json ({migrations: [{version, name, applied, applied_at}]})")
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

// openExisting opens the database d names, which must exist: a SQLite
// path that names no file is refused with one line saying so, and no file
// is created ([dsn.OpenExisting]). Every command but serve and migrate up
// opens its database this way.
func openExisting(ctx context.Context, d string, cfg *racefree.Config) (*racefree.DB, error) {
	h, err := dsn.OpenExisting(ctx, d, cfg)
	if errors.Is(err, sqlite.ErrNoDatabase) {
		_, path, _ := dsn.Parse(d)
		return nil, noDatabase(path)
	}
	return h, err
}

// noDatabase is the one line of a command given a SQLite path that names
// no file.
func noDatabase(path string) error {
	return fmt.Errorf("no database at %s (run racefree serve or racefree migrate up first)", path)
}
