package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/audit"
	"github.com/racefree/racefree/dsn"
	"github.com/racefree/racefree/tenant"
	"github.com/spf13/cobra"
)

// Exit codes of audit verify.
const (
	exitAuditBroken = 1
	exitAuditFailed = 2
	// exitAuditMayHaveLost: with --strict, every chain is intact but one
	// moved to another PostgreSQL timeline (a failover), after which
	// entries the old primary acknowledged may be lost.
	exitAuditMayHaveLost = 3
	// With --require-checkpoint, an intact chain that no checkpoint
	// anchors is not proven intact (a tail cut with its head row, or an
	// older copy restored, would look the same): a finding, exit 1 as a
	// broken chain is, as rls-check exits 1 for what it cannot prove; 2
	// stays "could not check".
	exitAuditUnanchored = exitAuditBroken
)

func auditCmd() *cobra.Command {
	var db, keys string
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Verify, checkpoint and key the tamper-evident audit log",
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&db, "db", envOr("RACEFREE_DB", dsn.Default), "database: sqlite:PATH or postgres://… (env RACEFREE_DB)")
	pf.StringVar(&keys, "keys", "", "keyring file (default: the keyring in "+audit.EnvKeys+")")

	var (
		scopes     []string
		checkpoint string
		format     string
		parallel   int
		verifyFor  string
		verifySrv  serverFlags
		strict     bool
		requireCP  bool
	)
	verify := &cobra.Command{
		Use:   "verify",
		Short: "Verify the audit chains (exit 0 intact, 1 broken or, with --require-checkpoint, unanchored, 2 error, 3 possible loss with --strict)",
		Long: `verify streams each scope's chain of one tenant (--tenant; every scope, or
those given with --scope) and prints one line per scope: intact, or the
first break and its kind. Every scope is each one with a head row, an
entry or a stored checkpoint (and, with --checkpoint, one in FILE): a
scope whose head row was deleted is verified and found broken, not left
out. It verifies against the checkpoints stored in
the database (those "racefree audit checkpoint", prune and the server
signed), as the server's verify does: they reveal a cut tail or a restored
older copy, which a bare chain cannot, as long as they were left alone.
A scope with none is reported intact with "no stored checkpoints: a chain
cut short cannot be detected". With --checkpoint FILE it verifies against
the checkpoints exported to FILE instead, the stronger check for a
database that may have been tampered with as a whole; those of other
tenants in the file are left out (a checkpoint without a tenant is the
default tenant's).
On a terminal it shows progress on stderr; piped, it prints only the result.
With --server URL (or RACEFREE_SERVER) it asks a running server instead,
for the tenant of the key in RACEFREE_KEY, to verify each --scope against
the checkpoints stored in its database.
A chain that moved to another PostgreSQL timeline (a failover: a standby
was promoted) holds a racefree.audit.timeline_changed entry there. The
chain is still intact, but entries the old primary acknowledged after the
entry it names may have been lost (an asynchronous standby lacks the last
commits): verify prints, after the scope's line, one line per such entry,
"SCOPE: WARNING: entry N records a move from timeline A to B: entries
acknowledged on timeline A after entry M may have been lost; compare them
with checkpoints kept outside the database" (with --format json, the
object's possible_loss and warnings). Verify against the checkpoints you
exported before the failover (--checkpoint): one past entry M reports the
chain rolled back or truncated.
With --require-checkpoint an intact chain that no checkpoint anchors (none
stored, or none in FILE, for its scope) is not proven intact: verify still
prints every scope's line, then exits 1 with one line on stderr naming
those scopes. A tenant with no chain at all exits 1 too: a log deleted
whole cannot be told from one never written, unless a checkpoint in FILE
names its scope. Without it such a chain exits 0: its line says it was not
anchored. A checkpoint vouches for the chain up to its entry; entries
appended after the last one are as unanchored as a bare chain's.
Exit status: 0 every chain intact (warnings printed), 1 a chain broken
or, with --require-checkpoint, one intact but not anchored by a
checkpoint, 2 error; with --strict, 3 when every chain is intact (and,
with --require-checkpoint, anchored) but one may have lost entries in a
failover.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if verifySrv.url != "" {
				return auditExit(auditVerifyServer(cmd, &verifySrv, scopes, format, verdict{strict, requireCP}))
			}
			ctx, err := tenant.With(cmd.Context(), verifyFor)
			if err == nil {
				err = auditVerify(ctx, cmd.OutOrStdout(), cmd.ErrOrStderr(), isTerminal(cmd.ErrOrStderr()), db, keys, scopes, checkpoint, format, parallel, verdict{strict, requireCP})
			}
			return auditExit(err)
		},
	}
	verify.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &exitError{exitAuditFailed, err} })
	vf := verify.Flags()
	vf.StringArrayVar(&scopes, "scope", nil, "scope to verify (repeat; default: every scope)")
	vf.StringVar(&checkpoint, "checkpoint", "", "file of exported checkpoints (JSON lines) to verify against (default: the checkpoints stored in the database)")
	vf.StringVar(&format, "format", "text", "output: text or json (one JSON object per scope and line)")
	vf.IntVar(&parallel, "parallel", 4, "scopes verified at once")
	vf.StringVar(&verifyFor, "tenant", tenant.Default, "tenant whose chains to verify")
	vf.BoolVar(&strict, "strict", false, "exit 3 when every chain is intact but one may have lost entries in a failover (a timeline change)")
	vf.BoolVar(&requireCP, "require-checkpoint", false, "exit 1 when a chain is intact but no checkpoint anchors it (stored, or in --checkpoint FILE), naming its scopes on stderr: a cut tail or a restored older copy could not be told")
	verifySrv.add(verify)

	var (
		cpScopes []string
		cpFor    string
	)
	cp := &cobra.Command{
		Use:   "checkpoint",
		Short: "Sign a checkpoint of each scope's head of one tenant and print it (JSON lines) for safekeeping",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, err := tenant.With(cmd.Context(), cpFor)
			if err != nil {
				return err
			}
			return auditCheckpoint(ctx, cmd.OutOrStdout(), db, keys, cpScopes)
		},
	}
	cp.Flags().StringArrayVar(&cpScopes, "scope", nil, "scope to checkpoint (repeat; default: every scope of the tenant)")
	cp.Flags().StringVar(&cpFor, "tenant", tenant.Default, "tenant whose chains to checkpoint")

	var (
		pruneScope, pruneActor, pruneCheckpoint, pruneFor string
		pruneThrough                                      int64
	)
	prune := &cobra.Command{
		Use:   "prune",
		Short: "Delete a scope's oldest entries, recorded in its chain, and print the new checkpoint",
		Long: `prune deletes the entries of one scope (--scope, of --tenant) numbered 1
through --through and re-anchors the chain at entry --through: in one
transaction it appends a racefree.audit.pruned entry by --actor that records
the anchor, deletes the entries and signs a checkpoint of the new head,
which it prints (a JSON line: append it to your exported checkpoints).
It first verifies the scope (against the checkpoints stored in the
database, or those in --checkpoint FILE) and deletes nothing from a broken
chain. On PostgreSQL run it as the tables'
owner: the application role cannot delete audit entries.
Exit status: 0 pruned, 1 the chain is broken, 2 error.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, err := tenant.With(cmd.Context(), pruneFor)
			if err == nil {
				err = auditPrune(ctx, cmd.OutOrStdout(), cmd.ErrOrStderr(), db, keys, pruneScope, pruneThrough, pruneActor, pruneCheckpoint)
			}
			return auditExit(err)
		},
	}
	prune.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &exitError{exitAuditFailed, err} })
	pr := prune.Flags()
	pr.StringVar(&pruneScope, "scope", "", "scope to prune (required)")
	pr.Int64Var(&pruneThrough, "through", 0, "delete entries 1 through this number (required)")
	pr.StringVar(&pruneActor, "actor", "", "who prunes, recorded in the chain (required)")
	pr.StringVar(&pruneCheckpoint, "checkpoint", "", "file of exported checkpoints (JSON lines) to verify against first (default: the checkpoints stored in the database)")
	pr.StringVar(&pruneFor, "tenant", tenant.Default, "tenant whose scope to prune")

	var (
		appendScope, appendActor, appendAction, appendSubject, appendData, appendFor, appendFormat string
		appendSrv                                                                                  serverFlags
	)
	appendCmd := &cobra.Command{
		Use:   "append --scope S --actor A --action X [--subject S] [--data JSON]",
		Short: "Append an entry to a scope's chain and print it as stored (numbered, timed, chained)",
		Long: `append appends one entry to the chain of --scope, in the database (--db,
with --keys and --tenant) or, with --server URL (or RACEFREE_SERVER), on a
running racefree server for the tenant of the key in RACEFREE_KEY. It
prints the entry as stored: one line of text, or with --format json one
object with the members of the API's entry (scope, seq, at, actor, action,
subject, data, key_id, prev_mac, mac). Over HTTP a retry after a lost reply
returns the entry already appended, never a second one.
Exit status: 0 appended, 1 the database or server failed, 2 bad input or
usage (nothing appended).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := jsonOutput(appendFormat)
			if err != nil {
				return err
			}
			e := audit.Entry{Actor: appendActor, Action: appendAction, Subject: appendSubject}
			if appendData != "" {
				e.Data = []byte(appendData)
			}
			rec, err := auditAppend(cmd, &appendSrv, db, keys, appendFor, appendScope, e)
			if err != nil {
				return clientExit(err)
			}
			return printEntry(cmd.OutOrStdout(), &rec, asJSON)
		},
	}
	af := appendCmd.Flags()
	af.StringVar(&appendScope, "scope", "", "the chain to append to (required)")
	af.StringVar(&appendActor, "actor", "", "who did it (required)")
	af.StringVar(&appendAction, "action", "", "what was done (required)")
	af.StringVar(&appendSubject, "subject", "", "to what")
	af.StringVar(&appendData, "data", "", "details, as JSON (over HTTP the data must be JSON)")
	af.StringVar(&appendFor, "tenant", tenant.Default, "tenant whose chain it is (--db only; with --server the key names it)")
	formatFlag(appendCmd, &appendFormat, "output: text (one line) or json (one object, the members of the API's entry)")
	appendSrv.add(appendCmd)
	usageExit(appendCmd)

	var macID, signID string
	keygen := &cobra.Command{
		Use:   "keygen",
		Short: "Print a new keyring (one mac key, one sign key); connects to nothing",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if macID == "" {
				macID = "mac-" + time.Now().UTC().Format("20060102")
			}
			if signID == "" {
				signID = "sign-" + time.Now().UTC().Format("20060102")
			}
			return audit.Keygen(cmd.OutOrStdout(), macID, signID)
		},
	}
	keygen.Flags().StringVar(&macID, "mac-id", "", "id of the mac key (default mac-YYYYMMDD)")
	keygen.Flags().StringVar(&signID, "sign-id", "", "id of the sign key (default sign-YYYYMMDD)")
	cmd.AddCommand(verify, appendCmd, cp, prune, keygen)
	return cmd
}

// isTerminal reports whether f is a character device: a terminal, not a
// pipe or a file.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func openAudit(ctx context.Context, db, keys string) (*racefree.DB, *audit.Log, error) {
	var ring *audit.Keyring
	var err error
	if keys != "" {
		ring, err = audit.LoadKeyring(keys)
	} else {
		ring, err = audit.KeyringFromEnv()
	}
	if err != nil {
		return nil, nil, err
	}
	h, err := openExisting(ctx, db, nil)
	if err != nil {
		return nil, nil, err
	}
	l, err := audit.New(h, ring)
	if err != nil {
		h.Close()
		return nil, nil, err
	}
	return h, l, nil
}

func auditVerify(ctx context.Context, stdout, stderr io.Writer, tty bool, db, keys string, scopes []string, checkpoint, format string, parallel int, v verdict) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if format != "text" && format != "json" {
		return racefree.Invalid("format", "%q: want text or json", format)
	}
	if parallel < 1 {
		return racefree.Invalid("parallel", "%d: want at least 1", parallel)
	}
	cps, err := readCheckpoints(ctx, checkpoint)
	if err != nil {
		return err
	}
	stored := checkpoint == "" // verify against the database's own checkpoints
	h, l, err := openAudit(ctx, db, keys)
	if err != nil {
		return err
	}
	defer h.Close()
	if len(scopes) == 0 {
		if scopes, err = l.Scopes(ctx); err != nil {
			return err
		}
		for s := range cps { // a scope whose whole log is gone still has checkpoints
			if !contains(scopes, s) {
				scopes = append(scopes, s)
			}
		}
		sort.Strings(scopes)
	}
	var prog *verifyProgress
	if tty {
		prog = newVerifyProgress(stderr)
		for _, s := range scopes {
			n, err := l.Length(ctx, s)
			if err != nil {
				return err
			}
			prog.total += n
		}
		defer prog.finish()
	}
	results := make([]audit.Result, len(scopes))
	errs := make([]error, len(scopes))
	sem := make(chan struct{}, parallel)
	done := make(chan struct{})
	for i, s := range scopes {
		go func() {
			sem <- struct{}{}
			defer func() { <-sem; done <- struct{}{} }()
			var last int64
			opts := &audit.VerifyOptions{Checkpoints: cps[s]}
			if stored {
				if opts.Checkpoints, errs[i] = l.Checkpoints(ctx, s, 0); errs[i] != nil {
					return
				}
			}
			if prog != nil {
				opts.Progress = func(n int64) { prog.add(n - last); last = n }
			}
			results[i], errs[i] = l.Verify(ctx, s, opts)
		}()
	}
	for range scopes {
		<-done
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	prog.finish()
	return printVerified(stdout, format, results, stored, v)
}

// verdict is what audit verify holds against chains beyond a break.
type verdict struct {
	// strict: a chain that may have lost entries in a failover exits 3.
	strict bool
	// requireCheckpoint: an intact chain no checkpoint anchors exits 1.
	requireCheckpoint bool
}

// printVerified prints each scope's result (a line and a WARNING line for
// each of its warnings, or a JSON object with --format json) and returns
// an exit status 1 error when a chain is broken or, with
// v.requireCheckpoint, intact and not anchored by a checkpoint (naming
// those scopes), and with v.strict an exit status 3 error when a chain may
// have lost entries in a failover. stored says the results were verified
// against the checkpoints stored in the database, so an intact chain that
// none anchored has none stored.
func printVerified(stdout io.Writer, format string, results []audit.Result, stored bool, v verdict) error {
	broken, warned := 0, 0
	var unanchored []string
	enc := json.NewEncoder(stdout)
	for _, r := range results {
		if !r.Intact() {
			broken++
		} else if !r.Anchored {
			unanchored = append(unanchored, strconv.Quote(r.Scope))
		}
		if len(r.Warnings) > 0 {
			warned++
		}
		if format == "json" {
			if err := enc.Encode(&r); err != nil {
				return err
			}
			continue
		}
		switch {
		case !r.Intact():
			fmt.Fprintf(stdout, "%s: BROKEN at %d: %s: %s\n", r.Scope, r.Break.Seq, r.Break.Kind, r.Break.Detail)
		case r.Anchored:
			fmt.Fprintf(stdout, "%s: intact, %d entries, anchored by a checkpoint\n", r.Scope, r.Rows)
		case stored:
			fmt.Fprintf(stdout, "%s: intact, %d entries, no stored checkpoints: a chain cut short cannot be detected\n", r.Scope, r.Rows)
		default:
			fmt.Fprintf(stdout, "%s: intact, %d entries, no checkpoint (a cut tail or a restored older copy would go unnoticed)\n", r.Scope, r.Rows)
		}
		for _, w := range r.Warnings {
			fmt.Fprintf(stdout, "%s: WARNING: %s\n", r.Scope, w)
		}
	}
	var notProven string
	switch {
	case v.requireCheckpoint && len(results) == 0:
		// No chain at all: nothing anchors one, and a log deleted whole
		// (head, entries and stored checkpoints) looks like a log never
		// written. Only the scopes of an exported checkpoint could tell.
		notProven = "no audit chain to verify, so none is anchored by a checkpoint: a log deleted whole could not be told from one never written (--require-checkpoint; verify against exported checkpoints with --checkpoint FILE)"
	case v.requireCheckpoint && len(unanchored) > 0:
		notProven = fmt.Sprintf("%d of %d audit chains intact but not anchored by a checkpoint, so a cut tail or a restored older copy could not be told (--require-checkpoint): %s", len(unanchored), len(results), strings.Join(unanchored, ", "))
	}
	if broken > 0 {
		msg := fmt.Sprintf("%d of %d audit chains broken", broken, len(results))
		if notProven != "" {
			msg += "; " + notProven
		}
		return &exitError{exitAuditBroken, errors.New(msg)}
	}
	if notProven != "" {
		return &exitError{exitAuditUnanchored, errors.New(notProven)}
	}
	if v.strict && warned > 0 {
		return &exitError{exitAuditMayHaveLost, fmt.Errorf("%d of %d audit chains may have lost entries in a failover (--strict)", warned, len(results))}
	}
	return nil
}

// auditAppend appends e to scope on --server when it is set, else in the
// database db (keyring keys) for tenant ten.
func auditAppend(cmd *cobra.Command, srv *serverFlags, db, keys, ten, scope string, e audit.Entry) (audit.Record, error) {
	ctx, cancel := context.WithTimeout(cmd.Context(), clientTimeout)
	defer cancel()
	if srv.url != "" {
		for _, f := range []string{"db", "keys", "tenant"} {
			if cmd.Flags().Changed(f) {
				return audit.Record{}, racefree.Invalid(f, "is for the database; with --server the server's keyring appends, for the key's tenant")
			}
		}
		c, err := srv.client()
		if err != nil {
			return audit.Record{}, err
		}
		return c.Append(ctx, scope, e)
	}
	ctx, err := tenant.With(ctx, ten)
	if err != nil {
		return audit.Record{}, err
	}
	h, l, err := openAudit(ctx, db, keys)
	if err != nil {
		return audit.Record{}, err
	}
	defer h.Close()
	return l.Append(ctx, h, scope, e)
}

// printEntry prints an audit entry as one line of text, or with asJSON as
// one object with the members of the API's entry: data as the JSON it
// holds, or data_base64 for data that is not JSON; the MACs in base64.
func printEntry(w io.Writer, r *audit.Record, asJSON bool) error {
	if !asJSON {
		_, err := fmt.Fprintf(w, "%s: entry %d at %s: %s %s %s\n", r.Scope, r.Seq, fmtTime(r.At), r.Actor, r.Action, r.Subject)
		return err
	}
	out := map[string]any{"scope": r.Scope, "seq": r.Seq, "at": fmtTime(r.At), "actor": r.Actor, "action": r.Action, "subject": r.Subject,
		"key_id": r.KeyID, "prev_mac": base64.StdEncoding.EncodeToString(r.PrevMAC), "mac": base64.StdEncoding.EncodeToString(r.MAC)}
	switch {
	case len(r.Data) == 0:
	case json.Valid(r.Data):
		out["data"] = json.RawMessage(r.Data)
	default:
		out["data_base64"] = base64.StdEncoding.EncodeToString(r.Data)
	}
	return json.NewEncoder(w).Encode(out)
}

// auditVerifyServer verifies scopes on a running server, against the
// checkpoints stored in its database, for the tenant of RACEFREE_KEY.
func auditVerifyServer(cmd *cobra.Command, srv *serverFlags, scopes []string, format string, v verdict) error {
	for _, f := range []string{"checkpoint", "tenant", "db", "keys"} {
		if cmd.Flags().Changed(f) {
			return racefree.Invalid(f, "is for the database; with --server the server's keyring and stored checkpoints verify, for the key's tenant")
		}
	}
	if len(scopes) == 0 {
		return racefree.Invalid("scope", "is required with --server (repeat for several)")
	}
	if format != "text" && format != "json" {
		return racefree.Invalid("format", "%q: want text or json", format)
	}
	c, err := srv.client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), clientTimeout)
	defer cancel()
	results := make([]audit.Result, len(scopes))
	for i, s := range scopes {
		if results[i], err = c.Verify(ctx, s); err != nil {
			return err
		}
	}
	return printVerified(cmd.OutOrStdout(), format, results, true, v)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func auditCheckpoint(ctx context.Context, stdout io.Writer, db, keys string, scopes []string) error {
	if ctx == nil {
		ctx = context.Background()
	}
	h, l, err := openAudit(ctx, db, keys)
	if err != nil {
		return err
	}
	defer h.Close()
	listed := len(scopes) == 0
	if listed {
		if scopes, err = l.Scopes(ctx); err != nil {
			return err
		}
	}
	// A listed scope without a head row (its entries or checkpoints left,
	// the head deleted) cannot be checkpointed: the others still are, and
	// the command fails at the end, naming it, for verify to judge.
	var headless []string
	for _, s := range scopes {
		c, err := l.Checkpoint(ctx, h, s)
		if listed && errors.Is(err, racefree.ErrNotFound) {
			headless = append(headless, strconv.Quote(s))
			continue
		}
		if err != nil {
			return err
		}
		if err := audit.WriteCheckpoints(stdout, c); err != nil {
			return err
		}
	}
	if len(headless) > 0 {
		return fmt.Errorf("no checkpoint of %s: entries or checkpoints but no head row (racefree audit verify judges the chain); the other scopes were checkpointed", strings.Join(headless, ", "))
	}
	return nil
}

// readCheckpoints reads the checkpoints file (none when path is empty) and
// returns the context's tenant's checkpoints by scope: one exported before
// tenancy, without a tenant, is the default tenant's.
func readCheckpoints(ctx context.Context, path string) (map[string][]audit.Checkpoint, error) {
	cps := map[string][]audit.Checkpoint{}
	if path == "" {
		return cps, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	list, err := audit.ReadCheckpoints(f)
	f.Close()
	if err != nil {
		return nil, err
	}
	t := tenant.From(ctx)
	for _, c := range list {
		if c.Tenant == t || c.Tenant == "" && t == tenant.Default {
			cps[c.Scope] = append(cps[c.Scope], c)
		}
	}
	return cps, nil
}

// auditPrune verifies scope, prunes it through through and prints the
// pruning's checkpoint to stdout, a summary to stderr.
func auditPrune(ctx context.Context, stdout, stderr io.Writer, db, keys, scope string, through int64, actor, checkpoint string) error {
	if scope == "" {
		return racefree.Invalid("scope", "is required")
	}
	if through < 1 {
		return racefree.Invalid("through", "is required: the last entry number to delete, at least 1")
	}
	if actor == "" {
		return racefree.Invalid("actor", "is required: who prunes, recorded in the chain")
	}
	cps, err := readCheckpoints(ctx, checkpoint)
	if err != nil {
		return err
	}
	stored := checkpoint == "" // verify against the database's own checkpoints
	h, l, err := openAudit(ctx, db, keys)
	if err != nil {
		return err
	}
	defer h.Close()
	opts := &audit.VerifyOptions{Checkpoints: cps[scope]}
	if stored {
		if opts.Checkpoints, err = l.Checkpoints(ctx, scope, 0); err != nil {
			return err
		}
	}
	res, err := l.Verify(ctx, scope, opts)
	if err != nil {
		return err
	}
	if !res.Intact() {
		return &exitError{exitAuditBroken, fmt.Errorf("%s: BROKEN at %d: %s: %s; nothing pruned", scope, res.Break.Seq, res.Break.Kind, res.Break.Detail)}
	}
	p, err := l.Prune(ctx, h, scope, through, actor)
	if err != nil {
		return err
	}
	if err := audit.WriteCheckpoints(stdout, p.Checkpoint); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "%s: %d entries deleted, through %d; recorded as entry %d, checkpoint %d\n", scope, p.Deleted, through, p.Entry.Seq, p.Checkpoint.N)
	return nil
}

// auditExit gives an error of an audit command that carries no exit status
// of its own the status of an error (2), never that of a broken chain.
func auditExit(err error) error {
	var ee *exitError
	if err != nil && !errors.As(err, &ee) {
		return &exitError{exitAuditFailed, err}
	}
	return err
}
