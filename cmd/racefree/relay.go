package main

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/outbox"
	"github.com/spf13/cobra"
)

// relayOptions are serve's --relay flags: the outbox relay that runs
// inside serve and POSTs each message to a URL ([outbox.HTTPHandler]).
type relayOptions struct {
	On          bool
	URLs        []string // "URL" for every topic, or "topic=URL"
	Timeout     time.Duration
	Lease       time.Duration
	Concurrency int
	Poll        time.Duration
	Listen      bool

	all     string            // the URL of every topic without one of its own
	byTopic map[string]string // the URLs of single topics
}

func (ro *relayOptions) flags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.BoolVar(&ro.On, "relay", false, "run an outbox relay inside serve: it POSTs each message to its --relay-url with Idempotency-Key set to the message id, Racefree-Outbox-Tenant to its tenant and Racefree-Outbox-Fence to the lease's fence, and stops with serve")
	f.StringArrayVar(&ro.URLs, "relay-url", nil, "URL (every topic) or topic=URL (one topic) the relay POSTs messages to; repeatable. Without a URL for every topic, the relay serves only the topics named")
	f.DurationVar(&ro.Timeout, "relay-timeout", 30*time.Second, "how long the relay waits for each POST before it counts as a transient failure (retried with backoff)")
	f.DurationVar(&ro.Lease, "relay-lease", time.Minute, "how long a relay holds a message it delivers (heartbeated while the POST runs; must exceed --relay-timeout): a relay that dies leaves it to another after this")
	f.IntVar(&ro.Concurrency, "relay-concurrency", 16, "how many messages the relay delivers at once")
	f.DurationVar(&ro.Poll, "relay-poll", time.Second, "how often the relay looks for due messages besides its wake-ups (retries, delays, redriven messages, enqueues of other processes without LISTEN)")
	f.BoolVar(&ro.Listen, "relay-listen", true, "on PostgreSQL, LISTEN for enqueues on one pooled connection; set false behind a transaction-mode pooler (PgBouncer), the relay then polls")
}

// check validates the flags, before serve opens anything.
func (ro *relayOptions) check() error {
	if !ro.On {
		if len(ro.URLs) > 0 {
			return racefree.Invalid("relay-url", "needs --relay")
		}
		return nil
	}
	if len(ro.URLs) == 0 {
		return racefree.Invalid("relay", "needs at least one --relay-url (URL or topic=URL)")
	}
	ro.byTopic = map[string]string{}
	for _, v := range ro.URLs {
		topic, u := "", v
		if !strings.HasPrefix(v, "http://") && !strings.HasPrefix(v, "https://") {
			var ok bool
			if topic, u, ok = strings.Cut(v, "="); !ok || topic == "" {
				return racefree.Invalid("relay-url", "%q: want an http(s) URL or topic=URL", v)
			}
			if err := racefree.CheckText("relay-url topic", topic, outbox.MaxTopicBytes); err != nil {
				return err
			}
		}
		if _, err := outbox.HTTPHandler(outbox.HTTPOptions{URL: u}); err != nil {
			return racefree.Invalid("relay-url", "%q: want an http(s) URL or topic=URL", v)
		}
		switch {
		case topic == "" && ro.all != "":
			return racefree.Invalid("relay-url", "two URLs for every topic: %s and %s", ro.all, u)
		case topic == "":
			ro.all = u
		case ro.byTopic[topic] != "":
			return racefree.Invalid("relay-url", "two URLs for topic %q", topic)
		default:
			ro.byTopic[topic] = u
		}
	}
	switch {
	case ro.Timeout <= 0:
		return racefree.Invalid("relay-timeout", "must be positive")
	case ro.Lease < outbox.MinLease || ro.Lease > outbox.MaxLease:
		return racefree.Invalid("relay-lease", "must be %s to %s", outbox.MinLease, outbox.MaxLease)
	case ro.Lease <= ro.Timeout:
		return racefree.Invalid("relay-lease", "must be longer than --relay-timeout (%s), so that a POST never outlives its lease", ro.Timeout)
	case ro.Concurrency < 1 || ro.Concurrency > outbox.MaxClaim:
		return racefree.Invalid("relay-concurrency", "must be 1 to %d", outbox.MaxClaim)
	case ro.Poll < time.Millisecond:
		return racefree.Invalid("relay-poll", "must be at least 1ms")
	}
	return nil
}

// topics returns the topics the relay serves: every one (nil) with a URL
// for every topic, else the ones named.
func (ro *relayOptions) topics() []string {
	if ro.all != "" {
		return nil
	}
	var ts []string
	for t := range ro.byTopic {
		ts = append(ts, t)
	}
	sort.Strings(ts)
	return ts
}

// newRelay returns the relay of o that the flags describe. grace is how
// long its running deliveries may finish once serve shuts down.
func (ro *relayOptions) newRelay(o *outbox.Outbox, grace time.Duration, log *slog.Logger) (*outbox.Relay, error) {
	h, err := outbox.HTTPHandler(outbox.HTTPOptions{Timeout: ro.Timeout, URLFor: func(d *outbox.Delivery) (string, error) {
		if u, ok := ro.byTopic[d.Topic]; ok {
			return u, nil
		}
		if ro.all != "" {
			return ro.all, nil
		}
		return "", fmt.Errorf("no --relay-url for topic %q", d.Topic) // not claimed: the relay serves the named topics only
	}})
	if err != nil {
		return nil, err
	}
	if grace <= 0 {
		grace = -1 // cancel at once
	}
	return o.NewRelay(h, &outbox.RelayOptions{Topics: ro.topics(), Concurrency: ro.Concurrency, Lease: ro.Lease,
		PollInterval: ro.Poll, Listen: ro.Listen, ShutdownGrace: grace, Logger: log})
}

// runRelay runs r until ctx ends and returns a channel closed once it
// stopped (its deliveries finished or released).
func runRelay(ctx context.Context, r *outbox.Relay) <-chan struct{} {
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	return done
}
