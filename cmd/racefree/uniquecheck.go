package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/dsn"
	"github.com/racefree/racefree/uniquecheck"
	"github.com/spf13/cobra"
)

// Exit codes of unique-check.
const (
	exitDuplicates = 1
	exitFailed     = 2
)

func uniqueCheckCmd() *cobra.Command {
	var (
		db, table, where, migration, format, dedupe, ageColumn  string
		keys                                                    []string
		nullsNotDistinct, notNull, reveal, quiet, forceProgress bool
		limit, maxKeys                                          int
		timeout                                                 time.Duration
	)
	cmd := &cobra.Command{
		Use:   "unique-check",
		Short: "Find the rows that would make adding a UNIQUE index fail; reads only (exit 0 clean, 1 duplicates, 2 error)",
		Long: `unique-check groups a table's rows exactly as a unique index would: by the
index's own key expressions, without rows that have a NULL key (unless
--nulls-not-distinct), and only the rows a partial index's --where covers;
with --not-null (a PRIMARY KEY's columns) it also counts the rows with a
NULL key, on each of which the key's NOT NULL fails.
It runs in a read-only transaction with a statement timeout and never writes.

  racefree unique-check --db DSN --table users --key 'lower(email)' --where 'deleted_at IS NULL'
  racefree unique-check --db DSN --migration migrations/042_unique_email.sql

Key values are masked (sha256 prefix and length) unless --reveal-values.
On a terminal it shows progress on stderr, at most once a second: the check
it runs, the rows checked of the total (PostgreSQL's estimate), their rate
and the time left; --quiet turns it off, --progress shows it even when
stderr is not a terminal.
Exit status: 0 the index will build, 1 duplicates (or NULL keys under NOT
NULL) found, 2 error.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			err := uniqueCheck(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), uniqueCheckOptions{
				db: db, table: table, keys: keys, where: where, nullsNotDistinct: nullsNotDistinct, notNull: notNull,
				migration: migration, format: format, limit: limit, maxKeys: maxKeys, reveal: reveal, timeout: timeout,
				dedupe: dedupe, ageColumn: ageColumn, progress: !quiet && (forceProgress || isTerminal(cmd.ErrOrStderr())),
			})
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
	f.StringVar(&table, "table", "", "table to check: name, schema.name, or \"Quoted\" as in SQL")
	f.StringArrayVar(&keys, "key", nil, "key column or expression of the index, as in the index (repeat for a composite key): email, 'lower(email)'")
	f.StringVar(&where, "where", "", "predicate of a partial index: 'deleted_at IS NULL'")
	f.BoolVar(&nullsNotDistinct, "nulls-not-distinct", false, "NULL keys are equal, as UNIQUE NULLS NOT DISTINCT (PostgreSQL 15 and later)")
	f.BoolVar(&notNull, "not-null", false, "the keys must hold no NULL either, as a PRIMARY KEY's columns: rows with a NULL key are counted and fail the check")
	f.StringVar(&migration, "migration", "", "check every unique index or constraint a migration FILE.sql adds, instead of --table/--key")
	f.StringVar(&format, "format", "text", "output: text or json (one JSON object per check and line)")
	f.IntVar(&limit, "limit", uniquecheck.DefaultLimit, "groups to list per check, largest first (totals always count all); -1 for all")
	f.IntVar(&maxKeys, "max-keys", uniquecheck.DefaultMaxKeys, "primary keys to list per group, lowest first (the row count beside them is always the true one); -1 for all")
	f.BoolVar(&reveal, "reveal-values", false, "print key values instead of their sha256 prefix and length (they are often personal data)")
	f.DurationVar(&timeout, "timeout", uniquecheck.DefaultTimeout, "statement timeout of each check")
	f.StringVar(&dedupe, "dedupe-sql", "", "print (never run) SQL that archives and deletes the surplus rows: keep=oldest|newest|min-id")
	f.StringVar(&ageColumn, "age-column", "created_at", "column that keep=oldest and keep=newest order by")
	f.BoolVarP(&quiet, "quiet", "q", false, "no progress line on stderr")
	f.BoolVar(&forceProgress, "progress", false, "show the progress line on stderr even when it is not a terminal")
	return cmd
}

type uniqueCheckOptions struct {
	db, table, where, migration, format, dedupe, ageColumn string
	keys                                                   []string
	nullsNotDistinct, notNull, reveal, progress            bool
	limit, maxKeys                                         int
	timeout                                                time.Duration
}

func uniqueCheck(ctx context.Context, stdout, stderr io.Writer, o uniqueCheckOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if o.format != "text" && o.format != "json" {
		return racefree.Invalid("format", "%q: want text or json", o.format)
	}
	var keep uniquecheck.Keep
	if o.dedupe != "" {
		k, ok := strings.CutPrefix(o.dedupe, "keep=")
		if !ok {
			return racefree.Invalid("dedupe-sql", "%q: want keep=oldest, keep=newest or keep=min-id", o.dedupe)
		}
		keep = uniquecheck.Keep(k)
		if keep != uniquecheck.KeepOldest && keep != uniquecheck.KeepNewest && keep != uniquecheck.KeepMinID {
			return racefree.Invalid("dedupe-sql", "%q: want keep=oldest, keep=newest or keep=min-id", o.dedupe)
		}
	}
	if o.limit == 0 || o.limit < -1 {
		return racefree.Invalid("limit", "%d: want a positive number, or -1 for all", o.limit)
	}
	if o.maxKeys == 0 || o.maxKeys < -1 {
		return racefree.Invalid("max-keys", "%d: want a positive number, or -1 for all", o.maxKeys)
	}
	if o.timeout <= 0 {
		return racefree.Invalid("timeout", "%s: must be positive", o.timeout)
	}
	engine, _, err := dsn.Parse(o.db)
	if err != nil {
		return err
	}

	var specs []uniquecheck.Spec
	var notes []uniquecheck.Warning
	switch {
	case o.migration != "" && (o.table != "" || len(o.keys) > 0 || o.where != "" || o.nullsNotDistinct || o.notNull):
		return racefree.Invalid("migration", "give either --migration or --table and --key, not both")
	case o.migration != "":
		text, err := os.ReadFile(o.migration)
		if err != nil {
			return err
		}
		if specs, notes, err = uniquecheck.FromMigration(engine, string(text)); err != nil {
			return fmt.Errorf("%s: %w", o.migration, err)
		}
		for i := range specs {
			specs[i].Source = o.migration + ":" + strings.TrimPrefix(specs[i].Source, "line ")
		}
	case o.table == "" || len(o.keys) == 0:
		return racefree.Invalid("table", "give --table and at least one --key, or --migration FILE")
	default:
		specs = []uniquecheck.Spec{{Table: o.table, Keys: o.keys, Where: o.where, NullsNotDistinct: o.nullsNotDistinct, NotNull: o.notNull}}
	}
	for _, n := range notes {
		fmt.Fprintf(stderr, "racefree: warning: %s:%s: %s\n", o.migration, strings.TrimPrefix(n.Source, "line "), n.Message)
	}

	if _, path, _ := dsn.Parse(o.db); engine == racefree.SQLite {
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			return noDatabase(path) // uniquecheck.Open opens it mode=ro: it would not create it either
		}
	}
	c, err := uniquecheck.Open(o.db)
	if err != nil {
		return err
	}
	defer c.Close()
	c.Timeout = o.timeout
	var reps []*uniquecheck.Report
	dups, nulls := 0, 0
	var p *scanProgress
	if o.progress {
		p = newScanProgress(stderr, len(specs))
		defer p.stop()
		for _, s := range specs {
			n, exact, err := c.Rows(ctx, s.Table)
			if err != nil {
				return err
			}
			p.rows = append(p.rows, n)
			p.exact = p.exact && exact
		}
	}
	for i, s := range specs {
		s.Limit, s.MaxKeys = o.limit, o.maxKeys
		p.begin(i, s)
		rep, err := c.Check(ctx, s)
		p.end(i)
		if err != nil {
			if s.Source != "" {
				return fmt.Errorf("%s: %w", s.Source, err)
			}
			return err
		}
		if !rep.Builds() {
			dups++
		}
		if rep.NullRows > 0 {
			nulls++
		}
		reps = append(reps, rep)
	}
	p.stop() // the last progress line, before the report

	out := reps
	if !o.reveal {
		out = make([]*uniquecheck.Report, len(reps))
		for i, r := range reps {
			out[i] = r.Masked()
		}
	}
	if keep != "" {
		// stdout carries only the SQL, so that it can be saved and reviewed;
		// the report goes to stderr.
		if err := uniquecheck.WriteText(stderr, out); err != nil {
			return err
		}
		for _, r := range reps {
			if r.DuplicateGroups == 0 {
				continue
			}
			script, err := uniquecheck.DedupeSQL(engine, r, keep, o.ageColumn)
			if err != nil {
				return err
			}
			fmt.Fprintln(stdout, script)
		}
	} else if o.format == "json" {
		err = uniquecheck.WriteJSON(stdout, out)
	} else {
		err = uniquecheck.WriteText(stdout, out)
	}
	if err != nil {
		return err
	}
	if dups > 0 && nulls > 0 {
		return &exitError{exitDuplicates, fmt.Errorf("unique-check: %d of %d checks found duplicates or NULL keys under NOT NULL", dups, len(reps))}
	}
	if dups > 0 {
		return &exitError{exitDuplicates, fmt.Errorf("unique-check: %d of %d checks found duplicates", dups, len(reps))}
	}
	return nil
}
