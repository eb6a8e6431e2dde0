package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/doctor"
	"github.com/racefree/racefree/dsn"
	"github.com/spf13/cobra"
)

func doctorCmd() *cobra.Command {
	var (
		db, role, format string
		timeout          time.Duration
		strict           bool
	)
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check what the database does to racefree's guarantees: durability, replication, role, row-level security, schema (exit 0 clean, 1 findings, 2 could not check)",
		Long: `doctor reads the database's settings and catalogue and reports, one line
each, what weakens racefree's guarantees: on PostgreSQL fsync,
full_page_writes or synchronous_commit off; standbys streaming while no
standby waits for a commit (synchronous_standby_names empty, or
synchronous_commit off or local), or a synchronous standby that is not
streaming; the role (--role, else the connecting one) being, or able to
become, a superuser, a BYPASSRLS role or the owner of racefree's tables;
racefree's tables without forced row-level security; a schema behind (or
ahead of) this binary; racefree's tables never analyzed (info); a
transaction pooler in front of a DSN that prepares statements. On SQLite:
the journal mode and synchronous level, and what each means for a power
loss. With --require-synchronous-replication, whether serve in that mode
would refuse writes now (strict-refuses-writes, with the reason).
What it cannot see is a finding too (…-not-judged), never "ok".
It changes nothing.

  racefree doctor --db postgres://app@db/app --format json

Every finding has a stable code; --format json prints an array of
{code, severity, detail, fix}. Exit status: 0 nothing found (or info
only), 1 a finding of severity warn or error, 2 could not check.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			err := runDoctor(cmd.Context(), cmd.OutOrStdout(), db, role, format, timeout, strict)
			var ee *exitError
			if err != nil && !errors.As(err, &ee) {
				err = &exitError{exitFailed, err}
			}
			return err
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &exitError{exitFailed, err} })
	f := cmd.Flags()
	f.StringVar(&db, "db", envOr("RACEFREE_DB", dsn.Default), "database: sqlite:PATH or postgres://… (env RACEFREE_DB)")
	f.StringVar(&role, "role", "", "PostgreSQL: the role the application serves as, judged by every role it can become (default: the connecting role)")
	f.StringVar(&format, "format", "text", "output: text (one line a finding) or json (an array of {code, severity, detail, fix})")
	f.DurationVar(&timeout, "timeout", doctor.DefaultTimeout, "bound on the whole check")
	f.BoolVar(&strict, "require-synchronous-replication", false, "PostgreSQL: also check whether serve --require-synchronous-replication would accept writes now")
	return cmd
}

func runDoctor(ctx context.Context, stdout io.Writer, db, role, format string, timeout time.Duration, strict bool) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if format != "text" && format != "json" {
		return racefree.Invalid("format", "%q: want text or json", format)
	}
	if timeout <= 0 {
		return racefree.Invalid("timeout", "%s: must be positive", timeout)
	}
	engine, _, err := dsn.Parse(db)
	if err != nil {
		return err
	}
	if role != "" && engine != racefree.Postgres {
		return racefree.Invalid("role", "SQLite has no roles")
	}
	if strict && engine != racefree.Postgres {
		return racefree.Invalid("require-synchronous-replication", "SQLite has no standbys")
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var rep doctor.Report
	h, err := openExisting(ctx, db, &racefree.Config{Schema: racefree.SchemaAllowOutdated, RequireSynchronousReplication: strict})
	switch {
	case errors.Is(err, racefree.ErrSchemaTooNew):
		// Nothing else can be checked by a binary older than the schema.
		rep = doctor.Report{Engine: engine, Findings: []doctor.Finding{{
			Code: doctor.SchemaAhead, Severity: doctor.Error,
			Detail: oneLine(err.Error()) + ": this binary refuses to serve it, and checked nothing else",
			Fix:    "run the racefree release that migrated the schema",
		}}}
	case err != nil:
		return err
	default:
		defer h.Close()
		if rep, err = doctor.Check(ctx, h, doctor.Options{Role: role, Timeout: timeout}); err != nil {
			return err
		}
	}
	if format == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(rep.Findings)
	} else {
		for _, f := range rep.Findings {
			if _, err = fmt.Fprintln(stdout, f.String()); err != nil {
				break
			}
		}
		if len(rep.Findings) == 0 {
			_, err = fmt.Fprintln(stdout, "nothing found")
		}
	}
	if err != nil {
		return err
	}
	if rep.Failed() {
		n := 0
		for _, f := range rep.Findings {
			if f.Severity != doctor.Info {
				n++
			}
		}
		return &exitError{exitFindings, fmt.Errorf("doctor: %d findings", n)}
	}
	return nil
}
