package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/dsn"
	"github.com/racefree/racefree/rlscheck"
	"github.com/spf13/cobra"
)

// exitFindings is rls-check's exit code when it found a misconfiguration,
// as unique-check's for duplicates.
const exitFindings = exitDuplicates

func rlsCheckCmd() *cobra.Command {
	var (
		o       rlscheck.Options
		db      string
		format  string
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "rls-check",
		Short: "Prove row-level security isolates tenant tables in a PostgreSQL database, or say what it cannot prove; reads only (exit 0 proven, 1 findings, 2 could not check)",
		Long: `rls-check reads the catalogue of a PostgreSQL database and reports, for every
table with the tenant column, what it cannot prove keeps one tenant from
seeing or changing another's rows: RLS not enabled or not forced, a command
without a policy, a permissive policy not proven to admit only rows with
the tenant column equal to the guarded setting (every OR arm must hold that
equality; a restrictive policy excuses it only if it proves it and applies
to every role the permissive one does), the setting read without missing_ok,
outside NULLIF or in a COALESCE; the application role owning a tenant table,
being superuser or BYPASSRLS, or able to become one of these by SET ROLE
through any chain of memberships (INHERIT or not), with the path; views
without security_invoker; SECURITY
DEFINER functions that reach a tenant table through what they call and read
at any depth, or reach a body it cannot follow (EXECUTE, another language);
a tenant column no table has. Each finding comes with the SQL that fixes it.
It runs catalogue queries only, in one read-only transaction with a
statement timeout.

  racefree rls-check --db postgres://… --role app

A policy is correct when it reads, for a uuid tenant column,
  tenant_id = NULLIF(current_setting('racefree.tenant_id', true), '')::uuid
Exit status: 0 no findings (proven), 1 findings, 2 could not check.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			err := rlsCheck(cmd.Context(), cmd.OutOrStdout(), db, format, timeout, o)
			var ee *exitError
			if err != nil && !errors.As(err, &ee) {
				err = &exitError{exitFailed, err}
			}
			return err
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &exitError{exitFailed, err} })
	f := cmd.Flags()
	f.StringVar(&db, "db", envOr("RACEFREE_DB", ""), "PostgreSQL database: postgres://… (env RACEFREE_DB)")
	f.StringVar(&o.TenantColumn, "tenant-column", rlscheck.DefaultTenantColumn, "the column that makes a table a tenant table")
	f.StringVar(&o.Setting, "setting", rlscheck.DefaultSetting, "the setting policies read the current tenant from")
	f.StringVar(&o.Role, "role", "", "the role the application logs in as: checks that it is not, and cannot become through its memberships, a tenant table's owner, a superuser or a BYPASSRLS role, and checks the policies that apply to it and to the roles it is a member of")
	f.StringArrayVar(&o.Schemas, "schema", nil, "schema whose tables to check (repeat for more); default: the search_path's schemas, normally public")
	f.StringVar(&format, "format", "text", "output: text or json (one JSON object)")
	f.DurationVar(&timeout, "timeout", rlscheck.DefaultTimeout, "statement timeout of the check")
	return cmd
}

func rlsCheck(ctx context.Context, stdout io.Writer, db, format string, timeout time.Duration, o rlscheck.Options) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if format != "text" && format != "json" {
		return racefree.Invalid("format", "%q: want text or json", format)
	}
	if timeout <= 0 {
		return racefree.Invalid("timeout", "%s: must be positive", timeout)
	}
	// The flags default to the package's defaults: empty was asked for.
	if o.TenantColumn == "" {
		return racefree.Invalid("tenant-column", "empty")
	}
	if o.Setting == "" {
		return racefree.Invalid("setting", "empty")
	}
	if db == "" {
		return racefree.Invalid("db", "give --db postgres://… (or RACEFREE_DB)")
	}
	engine, _, err := dsn.Parse(db)
	if err != nil {
		return err
	}
	if engine != racefree.Postgres {
		return rlscheck.ErrNotPostgres
	}
	c, err := rlscheck.Open(db)
	if err != nil {
		return err
	}
	defer c.Close()
	c.Timeout = timeout
	rep, err := c.Check(ctx, o)
	if err != nil {
		return err
	}
	if format == "json" {
		err = rlscheck.WriteJSON(stdout, rep)
	} else {
		err = rlscheck.WriteText(stdout, rep)
	}
	if err != nil {
		return err
	}
	if n := len(rep.Findings); n > 0 {
		return &exitError{exitFindings, fmt.Errorf("rls-check: %d findings", n)}
	}
	return nil
}
