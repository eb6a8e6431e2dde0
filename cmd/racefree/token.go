package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/racefree/racefree/client"
	"github.com/racefree/racefree/onetime"
	"github.com/spf13/cobra"
)

// exitRefused is token consume's and token rotate's exit status when the
// server refused the token (already used, reused, revoked, expired,
// unknown).
const exitRefused = 3

const tokenExitHelp = `TOKEN given as - is read from standard input, one line (its trailing newline
trimmed): a token may begin with -, which the command line would take for
a flag, and stays out of the process list. Empty input is a usage error.
Exit status: 0 issued (or consumed, rotated), 1 the server failed or could
not be reached, 2 bad input or usage, 3 the token was refused (its outcome
is printed: already_used, reused, revoked, expired or unknown).`

// tokenCmd issues, consumes and rotates one-time codes and refresh tokens
// on a running server.
func tokenCmd() *cobra.Command {
	var (
		purpose, subject string
		ttl              time.Duration
		refresh          bool
	)
	g := newClientGroup("token", "Issue, consume or rotate one-time codes and refresh tokens on a running server (--server URL, key in RACEFREE_KEY)", "")
	issue := &cobra.Command{
		Use:   "issue --subject S (--purpose P | --refresh) [--ttl D]",
		Short: "Issue a one-time code of purpose P (or, with --refresh, a refresh-token family) for subject S: prints it, with the token",
		Long:  "issue prints one JSON object, with the token in clear: racefree stores only its hash.\n" + tokenExitHelp,
		Args:  cobra.NoArgs,
		RunE: g.run(func(ctx context.Context, cmd *cobra.Command, _ []string, c *client.Client, asJSON bool) error {
			if refresh {
				if purpose != "" {
					return usage(fmt.Errorf("--purpose is for codes, not --refresh"))
				}
				t, err := c.IssueRefresh(ctx, subject, ttl)
				if err != nil {
					return err
				}
				return printRefresh(cmd.OutOrStdout(), "issued", t, asJSON)
			}
			code, err := c.IssueCode(ctx, purpose, subject, ttl)
			if err != nil {
				return err
			}
			if !asJSON {
				_, err := fmt.Fprintf(cmd.OutOrStdout(), "code for %s (purpose %s), expires %s: %s\n", code.Subject, code.Purpose, fmtTime(code.ExpiresAt), code.Token)
				return err
			}
			return json.NewEncoder(cmd.OutOrStdout()).Encode(map[string]any{"kind": "code", "token": code.Token, "purpose": code.Purpose,
				"subject": code.Subject, "issued_at": fmtTime(code.IssuedAt), "expires_at": fmtTime(code.ExpiresAt)})
		}),
	}
	issue.Flags().StringVar(&purpose, "purpose", "", "what the code is for, e.g. email-verify (codes)")
	issue.Flags().StringVar(&subject, "subject", "", "whom the token is for, e.g. a user id")
	issue.Flags().DurationVar(&ttl, "ttl", 15*time.Minute, "how long the token lives (whole milliseconds)")
	issue.Flags().BoolVar(&refresh, "refresh", false, "issue a refresh token (the first of a family) instead of a code")

	var consumePurpose string
	consume := &cobra.Command{
		Use:   "consume (TOKEN | -) --purpose P",
		Short: "Redeem a one-time code: exactly one caller ever gets consumed (exit 0); any other is refused (exit 3)",
		Long:  tokenExitHelp,
		Args:  cobra.ExactArgs(1),
		RunE: g.run(func(ctx context.Context, cmd *cobra.Command, args []string, c *client.Client, asJSON bool) error {
			token, err := argOrStdin(cmd, "token", args[0], onetime.MaxTokenBytes)
			if err != nil {
				return err
			}
			red, err := c.ConsumeCode(ctx, consumePurpose, token)
			if err != nil {
				return err
			}
			out := map[string]any{"outcome": red.Outcome.String()}
			if red.Outcome == onetime.Consumed {
				out["purpose"], out["subject"], out["issued_at"], out["expires_at"], out["used_at"] =
					consumePurpose, red.Subject, fmtTime(red.IssuedAt), fmtTime(red.ExpiresAt), fmtTime(red.UsedAt)
			}
			if err := printOutcome(cmd.OutOrStdout(), out, asJSON); err != nil {
				return err
			}
			if red.Outcome != onetime.Consumed {
				return &exitError{exitRefused, fmt.Errorf("token refused: %s", red.Outcome)}
			}
			return nil
		}),
	}
	consume.Flags().StringVar(&consumePurpose, "purpose", "", "the purpose the code was issued for")

	rotate := &cobra.Command{
		Use:   "rotate (TOKEN | -)",
		Short: "Retire a refresh token and print its successor (exit 0); a reused one revokes its family (exit 3)",
		Long:  "rotate is sent once, never retried: a retry after the server's --refresh-grace would revoke the family.\n" + tokenExitHelp,
		Args:  cobra.ExactArgs(1),
		RunE: g.run(func(ctx context.Context, cmd *cobra.Command, args []string, c *client.Client, asJSON bool) error {
			token, err := argOrStdin(cmd, "token", args[0], onetime.MaxTokenBytes)
			if err != nil {
				return err
			}
			rot, err := c.Rotate(ctx, token)
			if err != nil {
				return err
			}
			if rot.Next == nil {
				if err := printOutcome(cmd.OutOrStdout(), map[string]any{"outcome": rot.Outcome.String()}, asJSON); err != nil {
					return err
				}
				return &exitError{exitRefused, fmt.Errorf("token refused: %s", rot.Outcome)}
			}
			return printRefresh(cmd.OutOrStdout(), rot.Outcome.String(), rot.Next, asJSON)
		}),
	}
	return g.add("output: text (one line; an issued token last) or json (one object, the members of the API's answer)", issue, consume, rotate)
}

// printOutcome prints a redemption: one line of text ("consumed: …" or
// the refusal's outcome), or with asJSON the object out.
func printOutcome(w io.Writer, out map[string]any, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(w).Encode(out)
	}
	if out["outcome"] != onetime.Consumed.String() {
		_, err := fmt.Fprintf(w, "refused: %s\n", out["outcome"])
		return err
	}
	_, err := fmt.Fprintf(w, "consumed: code for %s (purpose %s), used at %s\n", out["subject"], out["purpose"], out["used_at"])
	return err
}

// printRefresh prints a refresh token: one line of text with the token
// last, or with asJSON one object with the members of the API's answer.
func printRefresh(w io.Writer, outcome string, t *onetime.Refresh, asJSON bool) error {
	if !asJSON {
		_, err := fmt.Fprintf(w, "%s: refresh token for %s (generation %d), expires %s: %s\n", outcome, t.Subject, t.Generation, fmtTime(t.ExpiresAt), t.Token)
		return err
	}
	return json.NewEncoder(w).Encode(map[string]any{"kind": "refresh", "outcome": outcome, "token": t.Token, "subject": t.Subject,
		"expires_at": fmtTime(t.ExpiresAt), "generation": t.Generation})
}
