// Command racefree serves racefree's HTTP API and manages its schema.
//
//	racefree serve      [--db DSN] [--addr HOST:PORT] [--token T] [--require-key] [--metrics-token T] [--inbox-secret [TENANT/]SOURCE=whsec_…] [--read-timeout D] [--log-format text|json] [--log-level L] …
//	racefree migrate up|status|sql [--db DSN] [--to N] [--app-role NAME] [--format json]
//	racefree keys create --tenant T [--scope read,write] [--name N] | list [--tenant T] | revoke --tenant T ID   [--format json]
//	racefree unique-check --db DSN (--table T --key EXPR… | --migration FILE.sql) [--format json] [--quiet | --progress]
//	racefree rls-check --db postgres://… [--role APP_ROLE] [--tenant-column C] [--setting S] [--schema S…]
//	racefree audit verify|checkpoint|keygen [--db DSN] [--keys FILE] [--scope S]… [--checkpoint FILE] [--format json]
//	racefree audit verify --server URL --scope S…
//	racefree outbox dead list|redrive|discard [ID…] [--topic T] [--key K] [--all] [--tenant T] [--db DSN | --server URL] [--format json]
//	racefree outbox stats [--tenant T] [--db DSN | --server URL] [--format json]
//	racefree outbox enqueue TOPIC [--key K] [--header N=V]… [--payload TEXT] [--db DSN | --server URL] [--format json]
//	racefree quota consume KEY --rate N [--per D] [--burst N] [--kind gcra|window] [--n N] [--db DSN | --server URL] [--format json]
//	racefree seq next SCOPE NAME [--n N] [--db DSN | --server URL] [--format json]
//	racefree claim acquire|renew|release|get KEY [--holder H] [--fence N] [--ttl D] --server URL [--format json]   (key in RACEFREE_KEY)
//	racefree token issue|consume|rotate … --server URL [--format json]   (a TOKEN given as - is read from stdin)
//	racefree events observe --source S --level L --message M [--fingerprint F] [--window D] | record FINGERPRINT --fence N … --server URL [--format json]
//	racefree inbox deliver SOURCE --webhook-id ID --webhook-timestamp T --webhook-signature SIG [--payload TEXT | --payload-file FILE|-] | list SOURCE [--after N] [--limit N] --server URL [--format json]
//	racefree audit append --scope S --actor A --action X [--subject S] [--data JSON] [--db DSN | --server URL] [--format json]
//	racefree openapi
//	racefree version [--format json]   (or racefree --version)
//
// DSN is sqlite:PATH (the default, sqlite:racefree.db) or postgres://….
// Every command but serve and migrate up refuses a SQLite path that names
// no file, and creates none. Every failure prints one line on stderr and
// exits non-zero; a usage error (unknown command or flag, a flag's bad
// value, a missing argument) and any other bad input that a primitive
// refuses before changing anything (racefree.ErrInvalidInput) exit 2.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/racefree/racefree"
	"github.com/spf13/cobra"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// exitError carries a specific exit code; other errors exit 1.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// run runs racefree with args, reading stdin (where an argument given as
// - is read from) and writing to stdout and stderr, and returns its exit
// status.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := &cobra.Command{
		Use:           "racefree",
		Short:         "Make concurrency, retries and re-delivery safe, with the database as the referee",
		Version:       buildVersion(readBuildInfo()).String(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.AddCommand(serveCmd(), migrateCmd(), keysCmd(), uniqueCheckCmd(), rlsCheckCmd(), doctorCmd(), auditCmd(), quotaCmd(), outboxCmd(), claimCmd(), eventsCmd(), inboxCmd(), seqCmd(), tokenCmd(), openapiCmd(), versionCmd())
	usageErrors(root)
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.Execute()
	if err == nil {
		return 0
	}
	fmt.Fprintf(stderr, "racefree: %s\n", oneLine(err.Error()))
	var ee *exitError
	switch {
	case errors.As(err, &ee):
		return ee.code
	case errors.Is(err, racefree.ErrInvalidInput):
		return exitUsage // refused before anything changed
	}
	return 1
}

// usageErrors makes every usage error of cmd and of the commands under it
// exit 2 (exitUsage) with one line: an unknown flag or a flag's bad value,
// an unknown command, a missing or extra argument, a command that needs a
// subcommand given none.
func usageErrors(cmd *cobra.Command) {
	if !cmd.HasParent() {
		cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usage(err) })
	}
	if cmd.HasSubCommands() {
		var names []string
		for _, sub := range cmd.Commands() {
			if sub.IsAvailableCommand() {
				names = append(names, sub.Name())
			}
		}
		cmd.Args = func(c *cobra.Command, a []string) error {
			if len(a) > 0 {
				return fmt.Errorf("unknown command %q for %q (%s --help lists them)", a[0], c.CommandPath(), c.CommandPath())
			}
			return nil
		}
		cmd.RunE = func(c *cobra.Command, _ []string) error {
			return usage(fmt.Errorf("%s needs a command: %s", c.CommandPath(), strings.Join(names, ", ")))
		}
		cmd.Run = nil
	}
	if args := cmd.Args; args != nil {
		cmd.Args = func(c *cobra.Command, a []string) error {
			if err := args(c, a); err != nil {
				return usage(err)
			}
			return nil
		}
	}
	for _, sub := range cmd.Commands() {
		usageErrors(sub)
	}
}

// usage gives err the exit status of a usage error (2), unless it carries
// one already.
func usage(err error) error {
	var ee *exitError
	if err == nil || errors.As(err, &ee) {
		return err
	}
	return &exitError{exitUsage, err}
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
