package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/client"
	"github.com/racefree/racefree/dsn"
	"github.com/racefree/racefree/outbox"
	"github.com/racefree/racefree/tenant"
	"github.com/spf13/cobra"
)

// outboxCmd lets operators look at and repair the outbox without the HTTP
// API: the dead letters (list, redrive, discard), the figures (stats) and
// an enqueue (for scripts and for trying a relay out), one tenant at a
// time.
func outboxCmd() *cobra.Command {
	var (
		db       string
		tenantID string
		format   string
		asJSON   bool // --json, the deprecated spelling of --format json
		srv      serverFlags
	)
	cmd := &cobra.Command{
		Use:   "outbox",
		Short: "Inspect the transactional outbox: dead letters and figures; enqueue a message",
	}
	cmd.PersistentFlags().StringVar(&db, "db", envOr("RACEFREE_DB", dsn.Default), "database: sqlite:PATH or postgres://… (env RACEFREE_DB)")
	cmd.PersistentFlags().StringVar(&tenantID, "tenant", tenant.Default, "the tenant whose outbox to read")
	cmd.PersistentFlags().StringVar(&format, "format", "text", "output: text or json (the shapes of the HTTP API: one JSON object per line)")
	cmd.PersistentFlags().BoolVar(&asJSON, "json", false, "print JSON instead of text")
	_ = cmd.PersistentFlags().MarkHidden("json")
	srv.add(cmd)
	// output checks --format and says whether to print JSON.
	output := func(cmd *cobra.Command) (bool, error) {
		if err := checkFormat(format); err != nil {
			return false, usage(err)
		}
		if asJSON {
			fmt.Fprintln(cmd.ErrOrStderr(), "racefree: warning: --json is deprecated: use --format json")
		}
		return asJSON || format == "json", nil
	}
	// remote returns a client of --server, or nil without --server; with
	// it, the flags of the database are refused.
	remote := func(cmd *cobra.Command) (*client.Client, error) {
		if srv.url == "" {
			return nil, nil
		}
		for _, f := range []string{"db", "tenant"} {
			if cmd.Flags().Changed(f) {
				return nil, racefree.Invalid(f, "is for the database; with --server the key in RACEFREE_KEY names the tenant")
			}
		}
		return srv.client()
	}

	// open returns the outbox, and a context naming the tenant.
	open := func(cmd *cobra.Command) (context.Context, *racefree.DB, *outbox.Outbox, func(), error) {
		ctx, err := tenant.With(cmd.Context(), tenantID)
		if err != nil {
			return nil, nil, nil, nil, err
		}
		ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		h, err := openExisting(ctx, db, nil)
		if err != nil {
			cancel()
			return nil, nil, nil, nil, err
		}
		o, err := outbox.New(h, nil)
		if err != nil {
			cancel()
			h.Close()
			return nil, nil, nil, nil, err
		}
		return ctx, h, o, func() { h.Close(); cancel() }, nil
	}

	stats := &cobra.Command{
		Use:   "stats",
		Short: "Print the backlog (ready, due, leased), the age of the oldest pending message and the dead count",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := output(cmd)
			if err != nil {
				return err
			}
			var s *outbox.Stats
			c, err := remote(cmd)
			if err != nil {
				return err
			}
			if c != nil {
				ctx, cancel := context.WithTimeout(cmd.Context(), clientTimeout)
				defer cancel()
				if s, err = c.OutboxStats(ctx); err != nil {
					return err
				}
			} else {
				ctx, h, o, done, err := open(cmd)
				if err != nil {
					return err
				}
				defer done()
				if s, err = o.Stats(ctx, h); err != nil {
					return err
				}
			}
			w := cmd.OutOrStdout()
			tenantID := tenantID
			if c != nil {
				tenantID = "(the key's)"
			}
			if asJSON {
				out := map[string]any{
					"backlog": s.Ready + s.Leased, "ready": s.Ready, "due": s.Due, "leased": s.Leased,
					"oldest_pending_ms": s.OldestPending.Milliseconds(), "dead": s.Dead, "delivered": s.Delivered,
				}
				if c == nil {
					out["tenant"] = tenantID
				}
				return json.NewEncoder(w).Encode(out)
			}
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintf(tw, "tenant\t%s\n", tenantID)
			fmt.Fprintf(tw, "backlog\t%d\t(ready %d, of which due %d; leased %d)\n", s.Ready+s.Leased, s.Ready, s.Due, s.Leased)
			fmt.Fprintf(tw, "oldest pending\t%s\n", s.OldestPending.Round(time.Millisecond))
			fmt.Fprintf(tw, "dead\t%d\n", s.Dead)
			fmt.Fprintf(tw, "delivered\t%d\t(until reaped)\n", s.Delivered)
			return tw.Flush()
		},
	}

	dead := &cobra.Command{
		Use:   "dead",
		Short: "List, redrive or discard dead messages",
	}
	var (
		topic, key string
		all        bool
		after      int64
		limit      int
	)
	filter := func(args []string) (outbox.Filter, error) {
		f := outbox.Filter{Topic: topic, Key: key, All: all}
		for _, a := range args {
			id, err := strconv.ParseInt(a, 10, 64)
			if err != nil || id < 1 {
				return f, racefree.Invalid("id", "%q is not a message id", a)
			}
			f.IDs = append(f.IDs, id)
		}
		return f, nil
	}
	list := &cobra.Command{
		Use:   "list [ID…]",
		Short: "List dead messages, by id, with their last error (page with --after)",
		Long: `list prints the dead messages of the tenant, by id, those above --after:
at most --limit a page. With --server a page also stops at 4 MiB of JSON
(GET /v1/outbox/dead), so a short page is not the end: pass the last id
as --after until none is printed.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			asJSON, err := output(cmd)
			if err != nil {
				return err
			}
			f, err := filter(args)
			if err != nil {
				return err
			}
			var rs []*outbox.Record
			c, err := remote(cmd)
			if err != nil {
				return err
			}
			if c != nil {
				if len(f.IDs) > 0 {
					return racefree.Invalid("id", "with --server, list by --topic and --key (the HTTP API lists no ids)")
				}
				ctx, cancel := context.WithTimeout(cmd.Context(), clientTimeout)
				defer cancel()
				if rs, err = c.Dead(ctx, f, after, limit); err != nil {
					return err
				}
			} else {
				ctx, h, o, done, err := open(cmd)
				if err != nil {
					return err
				}
				defer done()
				if rs, err = o.Dead(ctx, h, f, after, limit); err != nil {
					return err
				}
			}
			return printDead(cmd.OutOrStdout(), rs, asJSON)
		},
	}
	act := func(use, done, short string, do func(o *outbox.Outbox) func(context.Context, racefree.Executor, outbox.Filter) ([]int64, error),
		remoteDo func(c *client.Client) func(context.Context, int64) error) *cobra.Command {
		return &cobra.Command{
			Use:   use + " (ID… | --topic T | --key K | --all)",
			Short: short,
			RunE: func(cmd *cobra.Command, args []string) error {
				asJSON, err := output(cmd)
				if err != nil {
					return err
				}
				f, err := filter(args)
				if err != nil {
					return err
				}
				var ids []int64
				c, err := remote(cmd)
				if err != nil {
					return err
				}
				if c != nil {
					if f.Topic != "" || f.Key != "" || f.All || len(f.IDs) == 0 {
						return racefree.Invalid("id", "with --server, name the messages by id (the HTTP API repairs one id at a time)")
					}
					ctx, cancel := context.WithTimeout(cmd.Context(), clientTimeout)
					defer cancel()
					for _, id := range f.IDs {
						if err := remoteDo(c)(ctx, id); err != nil {
							return err
						}
						ids = append(ids, id)
					}
				} else {
					ctx, h, o, closeDB, err := open(cmd)
					if err != nil {
						return err
					}
					defer closeDB()
					if ids, err = do(o)(ctx, h, f); err != nil {
						return err
					}
				}
				if asJSON {
					if ids == nil {
						ids = []int64{}
					}
					return json.NewEncoder(cmd.OutOrStdout()).Encode(map[string]any{done: ids})
				}
				for _, id := range ids {
					fmt.Fprintln(cmd.OutOrStdout(), id)
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "%s %d dead message(s)\n", done, len(ids))
				return nil
			},
		}
	}
	redrive := act("redrive", "redriven", "Make dead messages due again at once, with a fresh set of attempts (only dead ones)",
		func(o *outbox.Outbox) func(context.Context, racefree.Executor, outbox.Filter) ([]int64, error) {
			return o.Redrive
		}, func(c *client.Client) func(context.Context, int64) error { return c.Redrive })
	discard := act("discard", "discarded", "Delete dead messages and their history (only dead ones)",
		func(o *outbox.Outbox) func(context.Context, racefree.Executor, outbox.Filter) ([]int64, error) {
			return o.Discard
		}, func(c *client.Client) func(context.Context, int64) error { return c.Discard })
	for _, c := range []*cobra.Command{list, redrive, discard} {
		c.Flags().StringVar(&topic, "topic", "", "only messages of this topic")
		c.Flags().StringVar(&key, "key", "", "only messages of this key")
	}
	for _, c := range []*cobra.Command{redrive, discard} {
		c.Flags().BoolVar(&all, "all", false, "every dead message of the tenant")
	}
	list.Flags().Int64Var(&after, "after", 0, "only ids above this one (the last id of the previous page)")
	list.Flags().IntVar(&limit, "limit", 100, fmt.Sprintf("at most this many (1 to %d)", outbox.MaxPage))
	var (
		eqKey, payload string
		headers        []string
		ordered        bool
	)
	enqueue := &cobra.Command{
		Use:   "enqueue TOPIC [--key K] [--header Name=Value]… [--payload TEXT]",
		Short: "Enqueue a message for the relays (exits 2, storing nothing, on bad input such as a header named Racefree-*)",
		Long: `enqueue stores one message of the tenant (--tenant) for the relays, and
prints its id, which is the Idempotency-Key every delivery carries. Headers
go with it as request headers; names starting with Racefree- (any case) are
racefree's own (the relay sets Racefree-Outbox-Tenant and
Racefree-Outbox-Fence) and are refused. Exit status: 0 stored, 1 the
database failed, 2 bad input (nothing stored).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			asJSON, err := output(cmd)
			if err != nil {
				return err
			}
			m := outbox.Message{Topic: args[0], Key: eqKey, Payload: []byte(payload), Ordered: ordered}
			for _, h := range headers {
				name, value, ok := strings.Cut(h, "=")
				if !ok {
					return clientExit(racefree.Invalid("header", "%q: want Name=Value", h))
				}
				if m.Headers == nil {
					m.Headers = map[string]string{}
				}
				if _, dup := m.Headers[name]; dup {
					return clientExit(racefree.Invalid("header", "%q given twice", name))
				}
				m.Headers[name] = value
			}
			var id int64
			c, err := remote(cmd)
			if err != nil {
				return clientExit(err)
			}
			if c != nil {
				ctx, cancel := context.WithTimeout(cmd.Context(), clientTimeout)
				defer cancel()
				if id, err = c.Enqueue(ctx, m); err != nil {
					return clientExit(err)
				}
			} else {
				ctx, h, o, done, err := open(cmd)
				if err != nil {
					return clientExit(err)
				}
				defer done()
				if id, err = o.Enqueue(ctx, h, m); err != nil {
					return clientExit(err)
				}
			}
			if asJSON {
				out := map[string]any{"id": id, "idempotency_key": strconv.FormatInt(id, 10), "topic": m.Topic, "key": m.Key}
				if c == nil {
					out["tenant"] = tenantID
				}
				return json.NewEncoder(cmd.OutOrStdout()).Encode(out)
			}
			fmt.Fprintln(cmd.OutOrStdout(), id)
			return nil
		},
	}
	enqueue.Flags().StringVar(&eqKey, "key", "", "the message's key (groups messages; required with --ordered)")
	enqueue.Flags().StringArrayVar(&headers, "header", nil, "a header sent with the message, Name=Value; repeatable (names starting with Racefree- are refused)")
	enqueue.Flags().StringVar(&payload, "payload", "", "the payload, as bytes")
	enqueue.Flags().BoolVar(&ordered, "ordered", false, "deliver after every older message of its (topic, key)")
	usageExit(enqueue)
	get := &cobra.Command{
		Use:   "get ID",
		Short: "Print a message in any state, with its failed attempts (exit 6: no such message)",
		Long: `get prints the message: its state (ready, leased, delivered or dead),
attempts, the latest tenure's fence and worker, its payload and headers,
and its latest failed attempts, oldest first, each with its worker, time,
outcome (retry, dead or lapsed) and error. --format json prints one object
with the members of GET /v1/outbox/messages/{id}.
Exit status: 0 printed, 1 the database or server failed, 2 bad input or
usage, 6 no such message in the tenant (or reaped, or discarded).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			asJSON, err := output(cmd)
			if err != nil {
				return err
			}
			id, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil || id < 1 {
				return clientExit(racefree.Invalid("id", "%q is not a message id", args[0]))
			}
			var r *outbox.Record
			c, err := remote(cmd)
			if err != nil {
				return err
			}
			if c != nil {
				ctx, cancel := context.WithTimeout(cmd.Context(), clientTimeout)
				defer cancel()
				r, err = c.Message(ctx, id)
			} else {
				ctx, h, o, done, oerr := open(cmd)
				if oerr != nil {
					return oerr
				}
				defer done()
				r, err = o.Get(ctx, h, id)
			}
			if err != nil {
				return clientExit(err)
			}
			return printMessage(cmd.OutOrStdout(), r, asJSON)
		},
	}
	dead.AddCommand(list, redrive, discard)
	cmd.AddCommand(dead, stats, enqueue, get)
	return cmd
}

// deadJSON is a dead message as GET /v1/outbox/dead answers it: a JSON
// payload as its JSON value, any other as payload_base64.
type deadJSON struct {
	ID            int64             `json:"id"`
	Topic         string            `json:"topic"`
	Key           string            `json:"key"`
	Ordered       bool              `json:"ordered"`
	Payload       json.RawMessage   `json:"payload,omitempty"`
	PayloadBase64 string            `json:"payload_base64,omitempty"`
	Headers       map[string]string `json:"headers"`
	Attempts      int               `json:"attempts"`
	MaxAttempts   int               `json:"max_attempts"`
	CreatedAt     string            `json:"created_at"`
	DiedAt        string            `json:"died_at"`
	LastError     string            `json:"last_error"`
}

// printMessage prints r and its history as text, or with asJSON as one
// object with the members of GET /v1/outbox/messages/{id}.
func printMessage(w io.Writer, r *outbox.Record, asJSON bool) error {
	if asJSON {
		type attempt struct {
			Fence   int64  `json:"fence"`
			Attempt int    `json:"attempt"`
			Worker  string `json:"worker"`
			At      string `json:"at"`
			Outcome string `json:"outcome"`
			Error   string `json:"error"`
		}
		m := struct {
			ID            int64             `json:"id"`
			Topic         string            `json:"topic"`
			Key           string            `json:"key"`
			Ordered       bool              `json:"ordered"`
			Payload       json.RawMessage   `json:"payload,omitempty"`
			PayloadBase64 string            `json:"payload_base64,omitempty"`
			Headers       map[string]string `json:"headers"`
			State         outbox.State      `json:"state"`
			CreatedAt     string            `json:"created_at"`
			AvailableAt   string            `json:"available_at"`
			Attempts      int               `json:"attempts"`
			MaxAttempts   int               `json:"max_attempts"`
			Fence         int64             `json:"fence"`
			LeasedBy      string            `json:"leased_by"`
			LastError     string            `json:"last_error"`
			History       []attempt         `json:"history"`
		}{ID: r.ID, Topic: r.Topic, Key: r.Key, Ordered: r.Ordered, Headers: r.Headers, State: r.State, CreatedAt: fmtTime(r.CreatedAt),
			AvailableAt: fmtTime(r.AvailableAt), Attempts: r.Attempts, MaxAttempts: r.MaxAttempts, Fence: r.Fence, LeasedBy: r.LeasedBy,
			LastError: r.LastError, History: []attempt{}}
		m.Payload, m.PayloadBase64 = payloadJSON(r.Payload)
		for _, a := range r.History {
			m.History = append(m.History, attempt{a.Fence, a.Attempt, a.Worker, fmtTime(a.At), a.Outcome, a.Error})
		}
		return json.NewEncoder(w).Encode(m)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "id\t%d\n", r.ID)
	fmt.Fprintf(tw, "topic\t%s\n", r.Topic)
	fmt.Fprintf(tw, "key\t%s\n", r.Key)
	when := map[outbox.State]string{outbox.Ready: "due at", outbox.Leased: "leased until"}[r.State]
	if when == "" {
		when = "since" // delivered or dead
	}
	fmt.Fprintf(tw, "state\t%s\t%s %s\n", r.State, when, r.AvailableAt.Format(time.RFC3339))
	fmt.Fprintf(tw, "attempts\t%d/%d\n", r.Attempts, r.MaxAttempts)
	if r.Fence > 0 {
		fmt.Fprintf(tw, "fence\t%d\t(worker %s)\n", r.Fence, r.LeasedBy)
	}
	fmt.Fprintf(tw, "created\t%s\n", r.CreatedAt.Format(time.RFC3339))
	if r.LastError != "" {
		fmt.Fprintf(tw, "last error\t%s\n", oneLine(r.LastError))
	}
	fmt.Fprintf(tw, "payload\t%d bytes\n", len(r.Payload))
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.History) == 0 {
		_, err := fmt.Fprintln(w, "no failed attempt")
		return err
	}
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ATTEMPT\tFENCE\tWORKER\tAT\tOUTCOME\tERROR")
	for _, a := range r.History {
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%s\n", a.Attempt, a.Fence, a.Worker, a.At.Format(time.RFC3339), a.Outcome, oneLine(a.Error))
	}
	return tw.Flush()
}

// payloadJSON returns a payload as the API gives it: the JSON value when
// it is JSON, else its standard base64.
func payloadJSON(p []byte) (json.RawMessage, string) {
	switch {
	case len(p) == 0:
		return nil, ""
	case json.Valid(p):
		return p, ""
	}
	return nil, base64.StdEncoding.EncodeToString(p)
}

func printDead(w io.Writer, rs []*outbox.Record, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		for _, r := range rs {
			m := deadJSON{ID: r.ID, Topic: r.Topic, Key: r.Key, Ordered: r.Ordered, Headers: r.Headers, Attempts: r.Attempts,
				MaxAttempts: r.MaxAttempts, CreatedAt: fmtTime(r.CreatedAt), DiedAt: fmtTime(r.AvailableAt), LastError: r.LastError}
			m.Payload, m.PayloadBase64 = payloadJSON(r.Payload)
			if err := enc.Encode(m); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTOPIC\tKEY\tATTEMPTS\tDIED\tLAST ERROR")
	for _, r := range rs {
		errText := r.LastError
		if utf8.RuneCountInString(errText) > 120 {
			errText = string([]rune(errText)[:117]) + "..."
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d/%d\t%s\t%s\n", r.ID, r.Topic, r.Key, r.Attempts, r.MaxAttempts, r.AvailableAt.Format(time.RFC3339), oneLine(errText))
	}
	return tw.Flush()
}
