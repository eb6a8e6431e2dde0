package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"text/tabwriter"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/client"
	"github.com/racefree/racefree/inbox"
	"github.com/spf13/cobra"
)

const inboxExitHelp = `Exit status: 0 delivered (a new delivery or a duplicate, recorded once) or
listed, 1 the server failed, could not be reached, or refused the key or
the delivery (bad-signature: the signature does not match the body, id
and timestamp, or is too old; unknown-source: the server has no secret for
SOURCE), 2 bad input or usage (nothing sent).`

// inboxCmd forwards signed webhook deliveries to a running server's inbox
// and lists what it received.
func inboxCmd() *cobra.Command {
	g := newClientGroup("inbox", "Forward a signed webhook delivery to a running server's inbox, or list what it received (--server URL, key in RACEFREE_KEY)",
		"inbox talks to a racefree server. "+inboxExitHelp)
	var id, timestamp, signature, payload, payloadFile string
	deliver := &cobra.Command{
		Use:   "deliver SOURCE --webhook-id ID --webhook-timestamp T --webhook-signature SIG [--payload TEXT | --payload-file FILE]",
		Short: "Forward one Standard Webhooks delivery as its sender signed it: exit 0 recorded (new or a duplicate), 1 refused",
		Long: `deliver sends the body and the webhook-id, webhook-timestamp and
webhook-signature headers of one delivery, exactly as its sender signed
them, to the inbox of SOURCE (POST /v1/inbox/SOURCE): to replay a delivery
captured elsewhere, or to relay them. The signature authenticates it, not
the key. The body is --payload, or the bytes of --payload-file as they are
(- reads standard input to its end; nothing is trimmed, since the
signature covers every byte).
` + inboxExitHelp,
		Args: cobra.ExactArgs(1),
		RunE: g.run(func(ctx context.Context, cmd *cobra.Command, args []string, c *client.Client, asJSON bool) error {
			for _, f := range []struct{ name, value string }{{"webhook-id", id}, {"webhook-timestamp", timestamp}, {"webhook-signature", signature}} {
				if f.value == "" {
					return racefree.Invalid(f.name, "is required: the header as the sender signed the delivery")
				}
			}
			body, err := deliveryBody(cmd, payload, payloadFile)
			if err != nil {
				return err
			}
			h := http.Header{}
			h.Set("webhook-id", id)
			h.Set("webhook-timestamp", timestamp)
			h.Set("webhook-signature", signature)
			if err := c.Deliver(ctx, args[0], h, body); err != nil {
				return err
			}
			if asJSON { // the route answers 204: its own parameters
				return json.NewEncoder(cmd.OutOrStdout()).Encode(map[string]any{"source": args[0], "webhook-id": id, "webhook-timestamp": timestamp})
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s: delivered %s (%d bytes; a duplicate is recorded once)\n", args[0], id, len(body))
			return err
		}),
	}
	df := deliver.Flags()
	df.StringVar(&id, "webhook-id", "", "the delivery's webhook-id header, the event's id (required)")
	df.StringVar(&timestamp, "webhook-timestamp", "", "its webhook-timestamp header, Unix seconds (required)")
	df.StringVar(&signature, "webhook-signature", "", "its webhook-signature header, v1,<base64> (required)")
	df.StringVar(&payload, "payload", "", "the body, as bytes")
	df.StringVar(&payloadFile, "payload-file", "", "a file holding the body, its bytes as they are (- reads standard input)")

	var (
		after int64
		limit int
	)
	list := &cobra.Command{
		Use:   "list SOURCE [--after N] [--limit N]",
		Short: "List the deliveries SOURCE received, in arrival order, those numbered above --after (page on with the last seq)",
		Long: `list prints the deliveries the key's tenant received from SOURCE, oldest
first: a table, or with --format json one object per line with the
members of the API's event (seq, id, status, reason, received_at, payload:
the JSON body, or a string when it is not JSON). A page holds at most
--limit events, 4 MiB of payloads and 4 MiB of JSON (one larger event
alone), so a short page is not the end: pass the last seq as --after
until none is printed.
` + inboxExitHelp,
		Args: cobra.ExactArgs(1),
		RunE: g.run(func(ctx context.Context, cmd *cobra.Command, args []string, c *client.Client, asJSON bool) error {
			if after < 0 {
				return racefree.Invalid("after", "must not be negative, got %d", after)
			}
			evs, err := c.InboxEvents(ctx, args[0], after, limit)
			if err != nil {
				return err
			}
			return printInbox(cmd.OutOrStdout(), evs, asJSON)
		}),
	}
	list.Flags().Int64Var(&after, "after", 0, "only deliveries numbered above this one (the last seq of the previous page)")
	list.Flags().IntVar(&limit, "limit", 0, fmt.Sprintf("at most this many (1 to %d; 0: the server's default, 100)", inbox.MaxListLimit))
	return g.add("output: text or json (the members of the API's answer: one object, or with list one per event and line)", deliver, list)
}

// deliveryBody returns the body of a delivery: text, or the bytes of file
// (standard input for -), exactly; both given is a usage error.
func deliveryBody(cmd *cobra.Command, text, file string) ([]byte, error) {
	switch {
	case file == "":
		return []byte(text), nil
	case text != "":
		return nil, racefree.Invalid("payload", "give --payload or --payload-file, not both")
	case file == fromStdin:
		return io.ReadAll(cmd.InOrStdin())
	}
	body, err := os.ReadFile(file)
	if err != nil {
		return nil, racefree.Invalid("payload-file", "%v", err)
	}
	return body, nil
}

// printInbox prints deliveries as a table, or with asJSON one object per
// line with the members of GET /v1/inbox/{source}'s events.
func printInbox(w io.Writer, evs []inbox.Event, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		for _, e := range evs {
			out := map[string]any{"seq": e.Seq, "id": e.ID, "status": e.Status, "received_at": fmtTime(e.ReceivedAt)}
			if e.Reason != "" {
				out["reason"] = e.Reason
			}
			if json.Valid(e.Payload) {
				out["payload"] = json.RawMessage(e.Payload)
			} else {
				out["payload"] = string(e.Payload)
			}
			if err := enc.Encode(out); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tID\tSTATUS\tRECEIVED\tBYTES\tREASON")
	for _, e := range evs {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\n", e.Seq, e.ID, e.Status, fmtTime(e.ReceivedAt), len(e.Payload), oneLine(e.Reason))
	}
	return tw.Flush()
}
