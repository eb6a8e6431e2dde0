package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/racefree/racefree/client"
	"github.com/racefree/racefree/dedup"
	"github.com/spf13/cobra"
)

// exitDuplicate is events observe's exit status when another observer has
// the event's window: the occurrence is counted, and not this observer's
// to process.
const exitDuplicate = 3

const eventsExitHelp = `Exit status: 0 process the event (observe: this observer won the window)
or recorded (record), 1 the server failed, could not be reached or refused
the key, 2 bad input or usage (nothing sent), 3 a duplicate (observe:
another observer has the window; the observation is printed), 4 stale
fence (record: a later window was won since), 5 not held (record: the
fence was never issued), 6 no such fingerprint (record, get).`

// eventsCmd observes events and records their results on a running
// server: of all the observers of one fingerprint in one window, exactly
// one is told to process it.
func eventsCmd() *cobra.Command {
	g := newClientGroup("events", "Observe an event (one observer per window processes it) and record its result on a running server (--server URL, key in RACEFREE_KEY)",
		"events talks to a racefree server. "+eventsExitHelp)
	var (
		ev     dedup.Event
		window time.Duration
	)
	observe := &cobra.Command{
		Use:   "observe --source S --level L --message M [--fingerprint F] [--window D]",
		Short: "Count one occurrence of an event: exit 0 process it (this observer won the window), 3 a duplicate (another observer has it)",
		Long: `observe counts one occurrence of the event and prints the observation: its
fingerprint (given, or derived from the source, the level and the message
with numbers and ids folded), whether to process it, the window's fence
(pass it to record) and the occurrences so far. Over HTTP a retry after a
lost reply gets the same observation back, counted once.
` + eventsExitHelp,
		Args: cobra.NoArgs,
		RunE: g.run(func(ctx context.Context, cmd *cobra.Command, args []string, c *client.Client, asJSON bool) error {
			o, err := c.Observe(ctx, ev, window)
			if err != nil {
				return err
			}
			if err := printObservation(cmd.OutOrStdout(), o, asJSON); err != nil {
				return err
			}
			if !o.Process {
				return &exitError{exitDuplicate, fmt.Errorf("duplicate: event %s is another observer's to process in the window of fence %d", o.Fingerprint, o.Fence)}
			}
			return nil
		}),
	}
	of := observe.Flags()
	of.StringVar(&ev.Source, "source", "", "where the event came from, e.g. billing-worker (required)")
	of.StringVar(&ev.Level, "level", "", "its level, e.g. error (required)")
	of.StringVar(&ev.Message, "message", "", "its text (numbers, hexadecimal ids and UUIDs are folded for the fingerprint)")
	of.StringVar(&ev.Fingerprint, "fingerprint", "", "the event's identity (default: derived from --source, --level and --message)")
	of.DurationVar(&window, "window", 0, "how long the winner has the event before the next occurrence wins again (whole milliseconds; 0: the server's default, 5m)")

	var (
		fence  int64
		result dedup.Result
	)
	record := &cobra.Command{
		Use:   "record FINGERPRINT --fence N [--classification C] [--external-id X]",
		Short: "Record the result of the window won at fence N: exit 0 recorded, 4 stale fence, 5 not held, 6 no such fingerprint",
		Long: `record writes the downstream result of the event while --fence is its
current window's fence: a winner that stalled past its window cannot
overwrite its successor's work. Recording again at the same fence
overwrites the result.
` + eventsExitHelp,
		Args: cobra.ExactArgs(1),
		RunE: g.run(func(ctx context.Context, cmd *cobra.Command, args []string, c *client.Client, asJSON bool) error {
			if err := c.Record(ctx, args[0], fence, result); err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(map[string]any{"fingerprint": args[0], "fence": fence,
					"classification": result.Classification, "external_id": result.ExternalID})
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "%s: result recorded at fence %d\n", args[0], fence)
			return err
		}),
	}
	rf := record.Flags()
	rf.Int64Var(&fence, "fence", 0, "the fence observe printed with process (required)")
	rf.StringVar(&result.Classification, "classification", "", "what the event turned out to be")
	rf.StringVar(&result.ExternalID, "external-id", "", "what the downstream work made of it, e.g. a ticket's id")
	get := &cobra.Command{
		Use:   "get FINGERPRINT",
		Short: "Print an event and the result recorded for it: exit 0 found, 6 no such fingerprint",
		Long: `get prints the stored event (source, level, message) and the result recorded
for it with the fence it was recorded at (fence 0: none recorded yet).
` + eventsExitHelp,
		Args: cobra.ExactArgs(1),
		RunE: g.run(func(ctx context.Context, cmd *cobra.Command, args []string, c *client.Client, asJSON bool) error {
			rec, err := c.Event(ctx, args[0])
			if err != nil {
				return err
			}
			return printEvent(cmd.OutOrStdout(), rec, asJSON)
		}),
	}
	return g.add("output: text (one line) or json (one object, the members of the API's answer)", observe, record, get)
}

// printObservation prints an observation as one line of text, or with
// asJSON as one object with the members of POST /v1/events' answer.
func printObservation(w io.Writer, o *dedup.Observation, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(w).Encode(map[string]any{"fingerprint": o.Fingerprint, "process": o.Process, "fence": o.Fence,
			"count": o.Count, "first_seen": fmtTime(o.FirstSeen), "last_seen": fmtTime(o.LastSeen)})
	}
	verdict := "process"
	if !o.Process {
		verdict = "duplicate"
	}
	_, err := fmt.Fprintf(w, "%s: %s, fence %d, occurrence %d since %s\n", o.Fingerprint, verdict, o.Fence, o.Count, fmtTime(o.FirstSeen))
	return err
}

// printEvent prints an event and its result as one line of text, or with
// asJSON as one object with the members of GET /v1/events/{fingerprint}.
func printEvent(w io.Writer, r *dedup.Record, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(w).Encode(map[string]any{"fingerprint": r.Fingerprint, "source": r.Source, "level": r.Level,
			"message": r.Message, "classification": r.Classification, "external_id": r.ExternalID, "result_fence": r.ResultFence})
	}
	result := "no result recorded"
	if r.ResultFence > 0 {
		result = fmt.Sprintf("result at fence %d: classification %q, external id %q", r.ResultFence, r.Classification, r.ExternalID)
	}
	_, err := fmt.Fprintf(w, "%s: %s %s %q; %s\n", r.Fingerprint, r.Source, r.Level, r.Message, result)
	return err
}
