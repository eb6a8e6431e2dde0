package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/claim"
	"github.com/racefree/racefree/client"
	"github.com/spf13/cobra"
)

// Exit codes of the client commands (claim, quota consume --server, audit
// verify --server), for scripts to branch on.
const (
	exitOK        = 0 // won, renewed, released, found, allowed
	exitUnreached = 1 // the server could not be reached or failed
	exitUsage     = 2 // bad input or usage: nothing was sent or changed
	exitHeld      = 3 // another holder's claim is live
	exitStale     = 4 // the fence is stale: another tenure began
	exitNotHeld   = 5 // the claim is not the caller's (lapsed, released, never issued)
	exitNotFound  = 6 // no such claim
	clientTimeout = 30 * time.Second
)

const exitCodesHelp = `Exit status: 0 won (or renewed, released, found), 1 the server failed or
could not be reached, 2 bad input or usage (nothing changed), 3 held by
another holder (its claim is printed), 4 stale fence (another tenure began),
5 not held (the claim lapsed, was released or is another's), 6 no such claim.`

// serverFlags are the flags of every command that talks to a server.
type serverFlags struct{ url string }

func (f *serverFlags) add(cmd *cobra.Command) {
	cmd.PersistentFlags().StringVar(&f.url, "server", envOr("RACEFREE_SERVER", ""), "URL of a racefree server, e.g. http://127.0.0.1:8080 (env RACEFREE_SERVER); the key is read from RACEFREE_KEY")
}

// client returns a client of --server with the key in RACEFREE_KEY.
func (f *serverFlags) client() (*client.Client, error) {
	if f.url == "" {
		return nil, racefree.Invalid("server", "is required (--server URL or RACEFREE_SERVER)")
	}
	return client.New(f.url, &client.Options{Key: os.Getenv("RACEFREE_KEY")})
}

// run runs fn with a client of --server and a timeout, and maps its error
// to the exit status.
func (f *serverFlags) run(cmd *cobra.Command, fn func(ctx context.Context, c *client.Client) error) error {
	c, err := f.client()
	if err != nil {
		return clientExit(err)
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), clientTimeout)
	defer cancel()
	return clientExit(fn(ctx, c))
}

// runOutput checks format (text or json: a usage error otherwise) before
// anything is sent, then runs fn as run does, telling it whether to print
// JSON.
func (f *serverFlags) runOutput(cmd *cobra.Command, format string, fn func(ctx context.Context, c *client.Client, asJSON bool) error) error {
	asJSON, err := jsonOutput(format)
	if err != nil {
		return err
	}
	return f.run(cmd, func(ctx context.Context, c *client.Client) error { return fn(ctx, c, asJSON) })
}

// clientGroup builds a command whose subcommands talk to a running
// server: the group carries --server, for all of them, and the --format
// they share.
type clientGroup struct {
	cmd    *cobra.Command
	srv    serverFlags
	format string
}

// newClientGroup returns the group of the command use, with --server.
func newClientGroup(use, short, long string) *clientGroup {
	g := &clientGroup{cmd: &cobra.Command{Use: use, Short: short, Long: long}}
	g.srv.add(g.cmd)
	return g
}

// run returns a subcommand's RunE: fn runs, with the subcommand and its
// arguments, as runOutput runs it (--format checked before anything is
// sent, a client of --server, a timeout, the error's exit status).
func (g *clientGroup) run(fn func(ctx context.Context, cmd *cobra.Command, args []string, c *client.Client, asJSON bool) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		return g.srv.runOutput(cmd, g.format, func(ctx context.Context, c *client.Client, asJSON bool) error {
			return fn(ctx, cmd, args, c, asJSON)
		})
	}
}

// add gives each of subs --format (formatHelp says what each value
// prints), makes cobra's own refusals of the group and of subs exit 2,
// adds subs to the group and returns the group's command.
func (g *clientGroup) add(formatHelp string, subs ...*cobra.Command) *cobra.Command {
	usageExit(g.cmd)
	for _, sub := range subs {
		formatFlag(sub, &g.format, formatHelp)
		usageExit(sub)
		g.cmd.AddCommand(sub)
	}
	return g.cmd
}

// clientExit gives a client command's error its exit status.
func clientExit(err error) error {
	var ee *exitError
	switch {
	case err == nil || errors.As(err, &ee):
		return err
	case errors.Is(err, racefree.ErrInvalidInput):
		return &exitError{exitUsage, err}
	case errors.Is(err, racefree.ErrHeld):
		return &exitError{exitHeld, err}
	case errors.Is(err, racefree.ErrStaleFence):
		return &exitError{exitStale, err}
	case errors.Is(err, racefree.ErrNotHeld):
		return &exitError{exitNotHeld, err}
	case errors.Is(err, racefree.ErrNotFound):
		return &exitError{exitNotFound, err}
	}
	return &exitError{exitUnreached, err}
}

// usageExit makes cobra's own refusals (unknown flag, wrong arguments)
// exit 2.
func usageExit(cmd *cobra.Command) {
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &exitError{exitUsage, err} })
	if args := cmd.Args; args != nil {
		cmd.Args = func(c *cobra.Command, a []string) error {
			if err := args(c, a); err != nil {
				return &exitError{exitUsage, err}
			}
			return nil
		}
	}
}

// printClaim prints a claim as one line of text, or with asJSON as one
// JSON object with the members of the API's Claim; a live claim held by
// another (from a *claim.HeldError) has only its key, holder, fence and
// expiry.
func printClaim(w io.Writer, c *claim.Claim, asJSON bool) error {
	if !asJSON {
		state := "held by"
		if !c.Live {
			state = "free; last held by"
		}
		_, err := fmt.Fprintf(w, "%s: %s %s, fence %d, until %s\n", c.Key, state, c.Holder, c.Fence, fmtTime(c.ExpiresAt))
		return err
	}
	out := map[string]any{"key": c.Key, "holder": c.Holder, "fence": c.Fence, "live": c.Live, "expires_at": fmtTime(c.ExpiresAt)}
	if !c.ClaimedAt.IsZero() {
		out["claimed_at"], out["count"] = fmtTime(c.ClaimedAt), c.Count
	}
	return json.NewEncoder(w).Encode(out)
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// claimCmd is racefree claim: the claims of a running server, for scripts
// and operators.
func claimCmd() *cobra.Command {
	var (
		holder string
		fence  int64
		ttl    time.Duration
	)
	g := newClientGroup("claim", "Acquire, renew, release or read a claim on a running server (--server URL, key in RACEFREE_KEY)",
		"claim talks to a racefree server. "+exitCodesHelp)
	acquire := &cobra.Command{
		Use:   "acquire KEY --holder H --ttl D",
		Short: "Take the claim on KEY: exit 0 won (the claim is printed), 3 held (the live claim is printed)",
		Long:  exitCodesHelp,
		Args:  cobra.ExactArgs(1),
		RunE: g.run(func(ctx context.Context, cmd *cobra.Command, args []string, c *client.Client, asJSON bool) error {
			got, err := c.Acquire(ctx, args[0], holder, ttl)
			var held *claim.HeldError
			if errors.As(err, &held) {
				if perr := printClaim(cmd.OutOrStdout(), &held.Claim, asJSON); perr != nil {
					return perr
				}
			}
			if err != nil {
				return err
			}
			return printClaim(cmd.OutOrStdout(), got, asJSON)
		}),
	}
	renew := &cobra.Command{
		Use:   "renew KEY --holder H --fence N --ttl D",
		Short: "Extend the caller's live claim: exit 0 renewed, 4 stale fence, 5 not held",
		Long:  exitCodesHelp,
		Args:  cobra.ExactArgs(1),
		RunE: g.run(func(ctx context.Context, cmd *cobra.Command, args []string, c *client.Client, asJSON bool) error {
			got, err := c.Renew(ctx, args[0], holder, fence, ttl)
			if err != nil {
				return err
			}
			return printClaim(cmd.OutOrStdout(), got, asJSON)
		}),
	}
	release := &cobra.Command{
		Use:   "release KEY --holder H --fence N",
		Short: "End the caller's tenure now: exit 0 released, 4 stale fence, 5 not held",
		Long:  exitCodesHelp,
		Args:  cobra.ExactArgs(1),
		RunE: g.run(func(ctx context.Context, cmd *cobra.Command, args []string, c *client.Client, asJSON bool) error {
			if err := c.Release(ctx, args[0], holder, fence); err != nil {
				return err
			}
			if asJSON { // the route answers 204: its own parameters
				return json.NewEncoder(cmd.OutOrStdout()).Encode(map[string]any{"key": args[0], "holder": holder, "fence": fence})
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "%s: released by %s, fence %d\n", args[0], holder, fence)
			return err
		}),
	}
	get := &cobra.Command{
		Use:   "get KEY",
		Short: "Print the claim on KEY: exit 0 found, 6 no such claim",
		Long:  exitCodesHelp,
		Args:  cobra.ExactArgs(1),
		RunE: g.run(func(ctx context.Context, cmd *cobra.Command, args []string, c *client.Client, asJSON bool) error {
			got, err := c.Get(ctx, args[0])
			if err != nil {
				return err
			}
			return printClaim(cmd.OutOrStdout(), got, asJSON)
		}),
	}
	for _, sub := range []*cobra.Command{acquire, renew, release} {
		sub.Flags().StringVar(&holder, "holder", "", "the holder's name, unique per worker (required)")
	}
	for _, sub := range []*cobra.Command{renew, release} {
		sub.Flags().Int64Var(&fence, "fence", 0, "the fence the claim was won with (required)")
	}
	for _, sub := range []*cobra.Command{acquire, renew} {
		sub.Flags().DurationVar(&ttl, "ttl", 30*time.Second, "how long the claim lives without a renewal (whole milliseconds)")
	}
	return g.add("output: text (one line) or json (one object, the members of the API's claim)", acquire, renew, release, get)
}
