// Command racefree serves racefree's HTTP API and manages its schema.
//
//	racefree serve      [--db DSN] [--addr HOST:PORT] [--token T] [--require-key] [--metrics-token T] [--inbox-secret [TENANT/]SOURCE=whsec_…] [--read-timeout D] [--log-format text|json] [--log-level L] …
//	racefree migrate up|status|sql [--db DSN] [--to N] [--app-role NAME]
//	racefree keys create --tenant T [--scope read,write] [--name N] | list [--tenant T] [--format json] | revoke --tenant T ID
//	racefree unique-check --db DSN (--table T --key EXPR… | --migration FILE.sql)
//	racefree rls-check --db postgres://… [--role APP_ROLE] [--tenant-column C] [--setting S] [--schema S…]
//	racefree audit verify|checkpoint|keygen [--db DSN] [--keys FILE] [--scope S]… [--checkpoint FILE] [--format json]
//	racefree audit verify --server URL --scope S…
//	racefree outbox dead list|redrive|discard [ID…] [--topic T] [--key K] [--all] [--tenant T] [--db DSN] [--json]
//	racefree outbox stats [--tenant T] [--db DSN] [--json]
//	racefree quota consume KEY --rate N [--per D] [--burst N] [--kind gcra|window] [--n N] [--db DSN | --server URL]
//	racefree claim acquire|renew|release|get KEY [--holder H] [--fence N] [--ttl D] --server URL   (key in RACEFREE_KEY)
//	racefree version
//
// DSN is sqlite:PATH (the default, sqlite:racefree.db) or postgres://….
// Every failure prints one line on stderr and exits non-zero.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// exitError carries a specific exit code; other errors exit 1.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// run runs racefree with args, writing to stdout and stderr, and returns
// its exit status.
func run(args []string, stdout, stderr io.Writer) int {
	root := &cobra.Command{
		Use:           "racefree",
		Short:         "Make concurrency, retries and re-delivery safe, with the database as the referee",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(serveCmd(), migrateCmd(), keysCmd(), uniqueCheckCmd(), rlsCheckCmd(), doctorCmd(), auditCmd(), quotaCmd(), outboxCmd(), claimCmd(), versionCmd())
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.Execute()
	if err == nil {
		return 0
	}
	fmt.Fprintf(stderr, "racefree: %s\n", oneLine(err.Error()))
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 1
}

// oneLine folds a multi-line driver message (pgx lists each address it
// tried) into one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", "; ")), " ")
}

// envOr returns the environment variable key, or def when it is unset.
func envOr(key, def string) string {
	if v, ok := os.LookupEnv(key); ok && v != "" {
		return v
	}
	return def
}
