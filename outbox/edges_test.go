package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/outbox"
	"github.com/racefree/racefree/tenant"
)

// The tests of this file try the outbox's promises at their edges (the
// boundary matrix of docs/contributing.md): each limit at the limit and
// one past it, two values that differ in one dimension alone (a tenant, a
// topic), each class the retry logic tells apart (retried, not retried,
// dead at exactly its last attempt and not one before), the dead-letter
// repairs in the caller's transaction committed and rolled back, a caller
// cancelled at each stage of Ancillary, and the options with and without
// each one.

// refused fails the test unless err is an InputError.
func refused(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, racefree.ErrInvalidInput) {
		t.Errorf("%s: %v, want an InputError", what, err)
	}
}

// TestEdgesEnqueueBounds tries each limit of a message at the limit and
// one past it: a topic of MaxTopicBytes and a key of MaxKeyBytes (two-byte
// characters: the limits count bytes), a payload of MaxPayloadBytes,
// MaxHeaders headers and headers of MaxHeaderBytes in all, MaxAttemptsLimit
// attempts and a NotBefore MaxDelay ahead are stored and delivered as
// given; one more byte, header, attempt or millisecond is an InputError
// that stores nothing.
func TestEdgesEnqueueBounds(t *testing.T) {
	clock, cfg := manual()
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		o := newOutbox(t, db, nil)
		topic := strings.Repeat("é", outbox.MaxTopicBytes/2)
		key := strings.Repeat("é", outbox.MaxKeyBytes/2)
		many := map[string]string{}
		for i := range outbox.MaxHeaders {
			many[fmt.Sprintf("X-H%02d", i)] = fmt.Sprint(i)
		}
		big := map[string]string{"X-Big": strings.Repeat("v", outbox.MaxHeaderBytes-len("X-Big"))}
		payload := make([]byte, outbox.MaxPayloadBytes)
		payload[len(payload)-1] = 0xff
		atLimit := []outbox.Message{
			{Topic: topic, Key: key},
			{Topic: "t", Payload: payload},
			{Topic: "t", Headers: many},
			{Topic: "t", Headers: big},
			{Topic: "t", MaxAttempts: outbox.MaxAttemptsLimit},
			{Topic: "t", MaxAttempts: 1},
			{Topic: "t", Headers: map[string]string{strings.Repeat("h", 256): "v"}},
		}
		var want []int64
		for i, m := range atLimit {
			id, err := o.Enqueue(ctx, db, m)
			if err != nil {
				t.Fatalf("message %d at the limits: %v", i, err)
			}
			want = append(want, id)
		}
		later, err := o.Enqueue(ctx, db, outbox.Message{Topic: "t", NotBefore: t0.Add(outbox.MaxDelay)})
		if err != nil {
			t.Fatalf("a NotBefore MaxDelay ahead: %v", err)
		}
		if r := get(t, ctx, o, later); !r.AvailableAt.Equal(t0.Add(outbox.MaxDelay)) {
			t.Fatalf("a NotBefore MaxDelay ahead is due %s, want %s", r.AvailableAt, t0.Add(outbox.MaxDelay))
		}
		ds := claim(t, ctx, o, "w", 10, time.Minute)
		if fmt.Sprint(ids(ds)) != fmt.Sprint(want) {
			t.Fatalf("claimed %v, want %v", ids(ds), want)
		}
		if d := ds[0]; d.Topic != topic || d.Key != key {
			t.Errorf("topic and key at their limits came back as %d and %d bytes", len(d.Topic), len(d.Key))
		}
		if d := ds[1]; len(d.Payload) != outbox.MaxPayloadBytes || d.Payload[len(d.Payload)-1] != 0xff {
			t.Errorf("a payload of MaxPayloadBytes came back as %d bytes", len(d.Payload))
		}
		if d := ds[2]; len(d.Headers) != outbox.MaxHeaders || d.Headers["X-H63"] != "63" {
			t.Errorf("MaxHeaders headers came back as %d", len(d.Headers))
		}
		if d := ds[6]; d.Headers[strings.Repeat("h", 256)] != "v" {
			t.Errorf("a header name of 256 bytes came back as %v", d.Headers)
		}
		if d := ds[3]; d.Headers["X-Big"] != big["X-Big"] {
			t.Errorf("headers of MaxHeaderBytes came back as %d bytes", len(d.Headers["X-Big"]))
		}
		if ds[4].MaxAttempts != outbox.MaxAttemptsLimit || ds[5].MaxAttempts != 1 {
			t.Errorf("max attempts %d and %d, want %d and 1", ds[4].MaxAttempts, ds[5].MaxAttempts, outbox.MaxAttemptsLimit)
		}

		before, err := o.Stats(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		tooMany := map[string]string{"X-Extra": "x"}
		for k, v := range many {
			tooMany[k] = v
		}
		for name, m := range map[string]outbox.Message{
			"a topic of MaxTopicBytes + 1":       {Topic: topic + "x"},
			"a key of MaxKeyBytes + 1":           {Topic: "t", Key: key + "x"},
			"a payload of MaxPayloadBytes + 1":   {Topic: "t", Payload: make([]byte, outbox.MaxPayloadBytes+1)},
			"MaxHeaders + 1 headers":             {Topic: "t", Headers: tooMany},
			"headers of MaxHeaderBytes + 1":      {Topic: "t", Headers: map[string]string{"X-Big": big["X-Big"] + "v"}},
			"MaxAttemptsLimit + 1 attempts":      {Topic: "t", MaxAttempts: outbox.MaxAttemptsLimit + 1},
			"a NotBefore MaxDelay + 1ms ahead":   {Topic: "t", NotBefore: t0.Add(outbox.MaxDelay + time.Millisecond)},
			"a header name of 257 bytes":         {Topic: "t", Headers: map[string]string{strings.Repeat("h", 257): "v"}},
			"an ordered message without its key": {Topic: "t", Ordered: true},
		} {
			_, err := o.Enqueue(ctx, db, m)
			refused(t, name, err)
		}
		if after, err := o.Stats(ctx, db); err != nil || *after != *before {
			t.Fatalf("refused messages changed the outbox: %+v, %v; was %+v", after, err, before)
		}
	})
}

// TestEdgesCallBounds tries the limits of the calls and options at the
// limit and one past it: Claim takes n of 1 to MaxClaim and a lease of
// MinLease to MaxLease in whole milliseconds; Dead a limit of 1 to
// MaxPage; a Filter up to MaxFilterIDs ids; New a MaxAttempts and a
// History of 1 to MaxAttemptsLimit, a Retention from 1ms, a ReapBatch of
// 1 to 100,000 (a negative one is refused, not taken for the default) and
// an AncillaryLease of MinLease to MaxLease; NewRelay a Concurrency and a
// Batch of 1 to MaxClaim, a worker name of MaxWorkerBytes. It also pages
// the dead letters across a break: a page resumed with after, once the
// message it ended on was discarded and another died, skips nothing and
// repeats nothing.
func TestEdgesCallBounds(t *testing.T) {
	clock, cfg := manual()
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		o := newOutbox(t, db, nil)
		kill := func(topic string) int64 {
			t.Helper()
			id := enqueue(t, ctx, o, db, outbox.Message{Topic: topic})
			ds, err := o.Claim(ctx, "w", outbox.MaxClaim, outbox.MinLease, topic)
			if err != nil || len(ds) != 1 || ds[0].ID != id {
				t.Fatalf("claim of MaxClaim with the lease MinLease: %v, %v", ids(ds), err)
			}
			if _, err := o.Fail(ctx, ds[0], outbox.Permanent(errors.New("no"))); err != nil {
				t.Fatal(err)
			}
			return id
		}
		a, b, c := kill("a"), kill("b"), kill("c")
		if ds, err := o.Claim(ctx, strings.Repeat("w", outbox.MaxWorkerBytes), 1, outbox.MaxLease); err != nil || len(ds) != 0 {
			t.Fatalf("a claim with a lease of MaxLease and a worker of MaxWorkerBytes: %v, %v", ids(ds), err)
		}
		page := func(after int64, limit int) []int64 {
			t.Helper()
			rs, err := o.Dead(ctx, db, outbox.Filter{}, after, limit)
			if err != nil {
				t.Fatalf("Dead(after %d, limit %d): %v", after, limit, err)
			}
			var out []int64
			for _, r := range rs {
				out = append(out, r.ID)
			}
			return out
		}
		if got := page(0, outbox.MaxPage); fmt.Sprint(got) != fmt.Sprint([]int64{a, b, c}) {
			t.Fatalf("Dead with a limit of MaxPage: %v", got)
		}
		// Resumed across a break: the last message listed is discarded
		// and another dies before the next page.
		first := page(0, 1)
		if fmt.Sprint(first) != fmt.Sprint([]int64{a}) {
			t.Fatalf("the first page of one: %v", first)
		}
		if _, err := o.Discard(ctx, db, outbox.Filter{IDs: []int64{a}}); err != nil {
			t.Fatal(err)
		}
		d := kill("d")
		var rest []int64
		for after := first[0]; ; {
			p := page(after, 1)
			if len(p) == 0 {
				break
			}
			rest = append(rest, p...)
			after = p[0]
		}
		if fmt.Sprint(rest) != fmt.Sprint([]int64{b, c, d}) {
			t.Fatalf("paged on after a break: %v, want %v", rest, []int64{b, c, d})
		}
		maxIDs := make([]int64, outbox.MaxFilterIDs)
		for i := range maxIDs {
			maxIDs[i] = int64(i + 1)
		}
		if rs, err := o.Dead(ctx, db, outbox.Filter{IDs: maxIDs}, 0, outbox.MaxPage); err != nil || len(rs) != 3 {
			t.Fatalf("a filter of MaxFilterIDs ids: %d listed, %v; want 3", len(rs), err)
		}

		_, err := o.Claim(ctx, "w", outbox.MaxClaim+1, time.Minute)
		refused(t, "a claim of MaxClaim + 1", err)
		_, err = o.Claim(ctx, "w", 1, outbox.MinLease-time.Millisecond)
		refused(t, "a lease of MinLease - 1ms", err)
		_, err = o.Claim(ctx, "w", 1, outbox.MaxLease+time.Millisecond)
		refused(t, "a lease of MaxLease + 1ms", err)
		_, err = o.Claim(ctx, "w", 1, outbox.MinLease+time.Microsecond)
		refused(t, "a lease that is not whole milliseconds", err)
		_, err = o.Claim(ctx, strings.Repeat("w", outbox.MaxWorkerBytes+1), 1, time.Minute)
		refused(t, "a worker of MaxWorkerBytes + 1", err)
		_, err = o.Dead(ctx, db, outbox.Filter{}, 0, outbox.MaxPage+1)
		refused(t, "a page of MaxPage + 1", err)
		_, err = o.Dead(ctx, db, outbox.Filter{IDs: append(maxIDs, int64(len(maxIDs)+1))}, 0, 1)
		refused(t, "a filter of MaxFilterIDs + 1 ids", err)
		_, err = o.Redrive(ctx, db, outbox.Filter{IDs: append(maxIDs, int64(len(maxIDs)+1))})
		refused(t, "a redrive of MaxFilterIDs + 1 ids", err)
		if got := page(0, outbox.MaxPage); fmt.Sprint(got) != fmt.Sprint([]int64{b, c, d}) {
			t.Fatalf("refused calls changed the dead letters: %v", got)
		}

		for name, opts := range map[string]outbox.Options{
			"MaxAttempts 1":                   {MaxAttempts: 1},
			"MaxAttempts of MaxAttemptsLimit": {MaxAttempts: outbox.MaxAttemptsLimit},
			"History 1":                       {History: 1},
			"History of MaxAttemptsLimit":     {History: outbox.MaxAttemptsLimit},
			"Retention 1ms":                   {Retention: time.Millisecond},
			"ReapBatch 1":                     {ReapBatch: 1},
			"ReapBatch 100000":                {ReapBatch: 100_000},
			"AncillaryLease MinLease":         {AncillaryLease: outbox.MinLease},
			"AncillaryLease MaxLease":         {AncillaryLease: outbox.MaxLease},
		} {
			if _, err := outbox.New(db, &opts); err != nil {
				t.Errorf("New with %s: %v", name, err)
			}
		}
		for name, opts := range map[string]outbox.Options{
			"MaxAttempts of MaxAttemptsLimit + 1": {MaxAttempts: outbox.MaxAttemptsLimit + 1},
			"MaxAttempts -1":                      {MaxAttempts: -1},
			"History of MaxAttemptsLimit + 1":     {History: outbox.MaxAttemptsLimit + 1},
			"Retention 1ms - 1ns":                 {Retention: time.Millisecond - 1},
			"ReapBatch -1":                        {ReapBatch: -1},
			"ReapBatch 100001":                    {ReapBatch: 100_001},
			"AncillaryLease MinLease - 1ms":       {AncillaryLease: outbox.MinLease - time.Millisecond},
			"AncillaryLease MaxLease + 1ms":       {AncillaryLease: outbox.MaxLease + time.Millisecond},
		} {
			_, err := outbox.New(db, &opts)
			refused(t, "New with "+name, err)
		}
		handler := func(context.Context, *outbox.Delivery) error { return nil }
		for name, opts := range map[string]outbox.RelayOptions{
			"Concurrency of MaxClaim":  {Concurrency: outbox.MaxClaim},
			"Batch of MaxClaim":        {Batch: outbox.MaxClaim},
			"Batch 1":                  {Batch: 1},
			"Concurrency 1":            {Concurrency: 1},
			"PollInterval 1ms":         {PollInterval: time.Millisecond},
			"Lease MinLease":           {Lease: outbox.MinLease},
			"Lease MaxLease":           {Lease: outbox.MaxLease},
			"Worker of MaxWorkerBytes": {Worker: strings.Repeat("w", outbox.MaxWorkerBytes)},
		} {
			if _, err := o.NewRelay(handler, &opts); err != nil {
				t.Errorf("NewRelay with %s: %v", name, err)
			}
		}
		for name, opts := range map[string]outbox.RelayOptions{
			"Concurrency of MaxClaim + 1":  {Concurrency: outbox.MaxClaim + 1},
			"Batch of MaxClaim + 1":        {Batch: outbox.MaxClaim + 1},
			"Lease MinLease - 1ms":         {Lease: outbox.MinLease - time.Millisecond},
			"Lease MaxLease + 1ms":         {Lease: outbox.MaxLease + time.Millisecond},
			"Worker of MaxWorkerBytes + 1": {Worker: strings.Repeat("w", outbox.MaxWorkerBytes+1)},
			"PollInterval 1ms - 1µs":       {PollInterval: time.Millisecond - time.Microsecond},
		} {
			_, err := o.NewRelay(handler, &opts)
			refused(t, "NewRelay with "+name, err)
		}
	})
}

// TestEdgesAnErrorIsCutAtItsLimit: a failure's text is kept up to
// MaxErrorBytes, on both engines alike: one of exactly MaxErrorBytes
// whole, one byte more cut to the limit, a character the limit would
// split left out whole (PostgreSQL refuses half a character), and NUL and
// invalid UTF-8 replaced; in the message's last error and its history.
func TestEdgesAnErrorIsCutAtItsLimit(t *testing.T) {
	clock, cfg := manual()
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		o := newOutbox(t, db, &outbox.Options{Backoff: fixedBackoff})
		at := strings.Repeat("e", outbox.MaxErrorBytes)
		for _, c := range []struct{ name, err, want string }{
			{"exactly MaxErrorBytes", at, at},
			{"MaxErrorBytes + 1", at + "x", at},
			{"a character across the limit", at[:outbox.MaxErrorBytes-1] + "é", at[:outbox.MaxErrorBytes-1]},
			{"a character ending at the limit", at[:outbox.MaxErrorBytes-2] + "é" + "x", at[:outbox.MaxErrorBytes-2] + "é"},
			{"NUL and invalid UTF-8", "a\x00b\xffc", "a\uFFFDb\uFFFDc"},
		} {
			id := enqueue(t, ctx, o, db, outbox.Message{Topic: "t"})
			d := claim(t, ctx, o, "w", 1, time.Minute)[0]
			if _, err := o.Fail(ctx, d, errors.New(c.err)); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			r := get(t, ctx, o, id)
			if r.LastError != c.want || len(r.History) != 1 || r.History[0].Error != c.want || !utf8.ValidString(r.LastError) {
				t.Errorf("%s: kept %d bytes (history %d entries), want %d", c.name, len(r.LastError), len(r.History), len(c.want))
			}
			clock.Advance(time.Hour) // due again: the next claim takes it, complete it
			if err := o.Complete(ctx, db, claim(t, ctx, o, "w", 1, time.Minute)[0]); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestEdgesOrderedKeysOfTwoTopics: ordering holds per (topic, key). Two
// ordered topics with the same key, differing in the topic alone, are
// two queues: a retrying head of one does not hold up the other, and each
// keeps its own order.
func TestEdgesOrderedKeysOfTwoTopics(t *testing.T) {
	clock, cfg := manual()
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		o := newOutbox(t, db, &outbox.Options{OrderedTopics: []string{"a"}, Backoff: fixedBackoff})
		a1 := enqueue(t, ctx, o, db, outbox.Message{Topic: "a", Key: "k"})
		b1 := enqueue(t, ctx, o, db, outbox.Message{Topic: "b", Key: "k", Ordered: true})
		a2 := enqueue(t, ctx, o, db, outbox.Message{Topic: "a", Key: "k"})
		b2 := enqueue(t, ctx, o, db, outbox.Message{Topic: "b", Key: "k", Ordered: true})
		expect := func(step string, want ...int64) []*outbox.Delivery {
			t.Helper()
			ds := claim(t, ctx, o, "w", 100, time.Hour)
			if fmt.Sprint(ids(ds)) != fmt.Sprint(want) {
				t.Fatalf("%s: claimed %v, want %v", step, ids(ds), want)
			}
			return ds
		}
		ds := expect("the head of (a, k) and the head of (b, k)", a1, b1)
		if _, err := o.Fail(ctx, ds[0], errors.New("transient")); err != nil {
			t.Fatal(err)
		}
		if err := o.Complete(ctx, db, ds[1]); err != nil {
			t.Fatal(err)
		}
		ds = expect("(a, k) retries its head; (b, k) goes on", b2)
		if err := o.Complete(ctx, db, ds[0]); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Second)
		if err := o.Complete(ctx, db, expect("(a, k)'s head due again", a1)[0]); err != nil {
			t.Fatal(err)
		}
		if err := o.Complete(ctx, db, expect("(a, k) moves on", a2)[0]); err != nil {
			t.Fatal(err)
		}
		expect("all done")
	})
}

// TestEdgesRelayServesItsTenantsAndTopics: a relay with
// RelayOptions.Tenants and Topics delivers the messages of those tenants
// and topics only, through every poll, the same topic of another tenant
// and another topic of its tenant differing in that one dimension alone;
// a relay without them delivers every tenant's every topic.
func TestEdgesRelayServesItsTenantsAndTopics(t *testing.T) {
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		acme, err := tenant.With(ctx, "acme")
		if err != nil {
			t.Fatal(err)
		}
		o := newOutbox(t, db, nil)
		mine := enqueue(t, acme, o, db, outbox.Message{Topic: "mail"})
		otherTopic := enqueue(t, acme, o, db, outbox.Message{Topic: "sms"})
		otherTenant := enqueue(t, ctx, o, db, outbox.Message{Topic: "mail"})
		var mu sync.Mutex
		got := map[int64]int{}
		handler := func(_ context.Context, d *outbox.Delivery) error {
			mu.Lock()
			got[d.ID]++
			mu.Unlock()
			return nil
		}
		r, err := o.NewRelay(handler, &outbox.RelayOptions{Tenants: []string{"acme"}, Topics: []string{"mail"}, PollInterval: 5 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		stop := runRelay(t, r)
		defer stop()
		waitFor(t, "acme's mail to be delivered", func() bool { return get(t, acme, o, mine).State == outbox.Delivered })
		// Two more rounds over every tenant: each claims synchronously
		// before it counts.
		polls := r.Stats().Polls
		waitFor(t, "two more polls", func() bool { return r.Stats().Polls >= polls+2 })
		stop()
		if s := get(t, acme, o, otherTopic).State; s != outbox.Ready {
			t.Errorf("acme's sms, a topic the relay does not serve, is %s", s)
		}
		if s := get(t, ctx, o, otherTenant).State; s != outbox.Ready {
			t.Errorf("the default tenant's mail, a tenant the relay does not serve, is %s", s)
		}
		mu.Lock()
		if len(got) != 1 || got[mine] != 1 {
			t.Errorf("handled %v, want only message %d", got, mine)
		}
		mu.Unlock()

		all, err := o.NewRelay(handler, &outbox.RelayOptions{PollInterval: 5 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		stopAll := runRelay(t, all)
		defer stopAll()
		waitFor(t, "a relay without Tenants and Topics to deliver the rest", func() bool {
			return get(t, acme, o, otherTopic).State == outbox.Delivered && get(t, ctx, o, otherTenant).State == outbox.Delivered
		})
	})
}

// TestEdgesAttemptsOfEachClass tells apart each class of the retry logic,
// with Options.MaxAttempts and without it, and a message's own
// MaxAttempts over it: a transient failure before the last attempt is
// retried (not one attempt early dead), the failure of exactly the last
// attempt dies, running OnExhausted once; a permanent failure dies at its
// first attempt; a RetryAfter is retried after its delay.
func TestEdgesAttemptsOfEachClass(t *testing.T) {
	clock, cfg := manual()
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		appTable(t, db)
		o := newOutbox(t, db, &outbox.Options{MaxAttempts: 2, Backoff: fixedBackoff, OnExhausted: compensate})
		// fail claims id and fails it with err; it reports whether it died.
		fail := func(id int64, err error, attempt, maxAttempts int) bool {
			t.Helper()
			clock.Advance(time.Hour)
			ds := claim(t, ctx, o, "w", 10, time.Minute)
			if len(ds) != 1 || ds[0].ID != id || ds[0].Attempt != attempt || ds[0].MaxAttempts != maxAttempts {
				t.Fatalf("claimed %d deliveries (%+v), want message %d at attempt %d of %d", len(ds), ds, id, attempt, maxAttempts)
			}
			out, ferr := o.Fail(ctx, ds[0], err)
			if ferr != nil {
				t.Fatal(ferr)
			}
			if st := get(t, ctx, o, id).State; out.Dead != (st == outbox.Dead) {
				t.Fatalf("message %d: outcome %+v, state %s", id, out, st)
			}
			return out.Dead
		}
		transient := errors.New("connection reset")

		byOption := enqueue(t, ctx, o, db, outbox.Message{Topic: "t"})
		if fail(byOption, transient, 1, 2) {
			t.Fatal("Options.MaxAttempts 2: the first attempt's failure killed the message")
		}
		if !fail(byOption, transient, 2, 2) || compensations(t, db) != 1 {
			t.Fatalf("Options.MaxAttempts 2: the second attempt's failure left the message alive (%d compensations)", compensations(t, db))
		}
		own := enqueue(t, ctx, o, db, outbox.Message{Topic: "t", MaxAttempts: 3})
		for attempt := 1; attempt <= 2; attempt++ {
			if fail(own, transient, attempt, 3) {
				t.Fatalf("MaxAttempts 3 over the option's 2: attempt %d's failure killed the message", attempt)
			}
		}
		if !fail(own, outbox.RetryAfter(time.Minute, transient), 3, 3) {
			t.Fatal("a RetryAfter on the last attempt left the message alive")
		}
		permanent := enqueue(t, ctx, o, db, outbox.Message{Topic: "t", MaxAttempts: outbox.MaxAttemptsLimit})
		if !fail(permanent, outbox.Permanent(errors.New("rejected")), 1, outbox.MaxAttemptsLimit) {
			t.Fatal("a permanent failure at the first attempt was retried")
		}
		later := enqueue(t, ctx, o, db, outbox.Message{Topic: "t"})
		clock.Advance(time.Hour)
		d := claim(t, ctx, o, "w", 1, time.Minute)[0]
		if out, err := o.Fail(ctx, d, outbox.RetryAfter(7*time.Second, transient)); err != nil || out.Dead || !out.RetryAt.Equal(clock.Now().Add(7*time.Second)) {
			t.Fatalf("a RetryAfter before the last attempt: %+v, %v; want due in 7s", out, err)
		}
		clock.Advance(7*time.Second - time.Millisecond)
		if ds := claim(t, ctx, o, "w", 1, time.Minute); len(ds) != 0 {
			t.Fatalf("claimed a millisecond before its RetryAfter")
		}
		clock.Advance(time.Millisecond)
		if ds := claim(t, ctx, o, "w", 1, time.Minute); len(ds) != 1 || ds[0].ID != later || ds[0].Attempt != 2 {
			t.Fatalf("at its RetryAfter: %+v", ds)
		}
		if n := compensations(t, db); n != 3 {
			t.Fatalf("OnExhausted ran %d times, want 3 (once per death)", n)
		}
	})
}

// TestEdgesTheLastAttemptRunsTheHandler: a relay runs the handler on
// every attempt up to and including a message's MaxAttempts: a message of
// one attempt is handled once and delivered, one of two whose first
// attempt fails is delivered by its second; only a lease that lapsed on
// the last attempt dies without the handler (TestALapsedLastAttemptDies).
func TestEdgesTheLastAttemptRunsTheHandler(t *testing.T) {
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		o := newOutbox(t, db, &outbox.Options{Backoff: func(int) time.Duration { return 0 }})
		one := enqueue(t, ctx, o, db, outbox.Message{Topic: "t", MaxAttempts: 1})
		two := enqueue(t, ctx, o, db, outbox.Message{Topic: "t", MaxAttempts: 2})
		var mu sync.Mutex
		attempts := map[int64][]int{}
		r, err := o.NewRelay(func(_ context.Context, d *outbox.Delivery) error {
			mu.Lock()
			defer mu.Unlock()
			attempts[d.ID] = append(attempts[d.ID], d.Attempt)
			if d.ID == two && d.Attempt == 1 {
				return errors.New("transient")
			}
			return nil
		}, &outbox.RelayOptions{PollInterval: 5 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		stop := runRelay(t, r)
		defer stop()
		settled := func(id int64) bool {
			st := get(t, ctx, o, id).State
			return st == outbox.Delivered || st == outbox.Dead
		}
		waitFor(t, "both messages to settle", func() bool { return settled(one) && settled(two) })
		stop()
		for _, id := range []int64{one, two} {
			if r := get(t, ctx, o, id); r.State != outbox.Delivered {
				t.Errorf("message %d (max attempts %d) is %s: %q", id, r.MaxAttempts, r.State, r.LastError)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if fmt.Sprint(attempts[one]) != "[1]" || fmt.Sprint(attempts[two]) != "[1 2]" {
			t.Fatalf("handled attempts %v and %v, want [1] and [1 2]", attempts[one], attempts[two])
		}
	})
}

// TestEdgesDeadLetterRepairsInTheCallersTransaction: Redrive and Discard
// take the caller's transaction: rolled back, the message stays dead,
// listed, with its history, and no claim finds it; committed, the
// redriven message is due at once with a fresh set of attempts and the
// discarded one is gone. Inside the transaction it already reads as
// changed.
func TestEdgesDeadLetterRepairsInTheCallersTransaction(t *testing.T) {
	clock, cfg := manual()
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		o := newOutbox(t, db, nil)
		kill := func() int64 {
			t.Helper()
			id := enqueue(t, ctx, o, db, outbox.Message{Topic: "t"})
			if _, err := o.Fail(ctx, claim(t, ctx, o, "w", 1, time.Minute)[0], outbox.Permanent(errors.New("no"))); err != nil {
				t.Fatal(err)
			}
			return id
		}
		a, b := kill(), kill()
		rollback := errors.New("roll back")
		for _, commit := range []bool{false, true} {
			err := db.InTx(ctx, func(tx *sql.Tx) error {
				got, err := o.Redrive(ctx, tx, outbox.Filter{IDs: []int64{a}})
				if err != nil || fmt.Sprint(got) != fmt.Sprint([]int64{a}) {
					t.Fatalf("redrive in the transaction: %v, %v", got, err)
				}
				if r, err := o.Get(ctx, tx, a); err != nil || r.State != outbox.Ready {
					t.Fatalf("the redriven message in its transaction: %+v, %v", r, err)
				}
				got, err = o.Discard(ctx, tx, outbox.Filter{IDs: []int64{b}})
				if err != nil || fmt.Sprint(got) != fmt.Sprint([]int64{b}) {
					t.Fatalf("discard in the transaction: %v, %v", got, err)
				}
				if commit {
					return nil
				}
				return rollback
			})
			if !commit {
				if !errors.Is(err, rollback) {
					t.Fatal(err)
				}
				for _, id := range []int64{a, b} {
					if r := get(t, ctx, o, id); r.State != outbox.Dead || len(r.History) != 1 {
						t.Fatalf("message %d after a rolled-back repair: %+v", id, r)
					}
				}
				if rs, err := o.Dead(ctx, db, outbox.Filter{}, 0, 10); err != nil || len(rs) != 2 {
					t.Fatalf("dead letters after a rolled-back repair: %d, %v", len(rs), err)
				}
				if ds := claim(t, ctx, o, "w", 10, time.Minute); len(ds) != 0 {
					t.Fatalf("a rolled-back redrive was claimed: %v", ids(ds))
				}
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if _, err := o.Get(ctx, db, b); !errors.Is(err, racefree.ErrNotFound) {
			t.Fatalf("the discarded message: %v", err)
		}
		ds := claim(t, ctx, o, "w", 10, time.Minute)
		if len(ds) != 1 || ds[0].ID != a || ds[0].Attempt != 1 {
			t.Fatalf("after the committed redrive: %+v", ds)
		}
	})
}

// TestEdgesAncillaryCallerCancelled cancels Ancillary's caller at each
// stage: before the call, nothing runs and nothing is stored; in the main
// work, before the commit, nothing is stored and the step does not run;
// during the step, past the commit, the step's success is recorded
// (delivered, no warning) and its failure recorded for a retry: the
// caller's context ends neither.
func TestEdgesAncillaryCallerCancelled(t *testing.T) {
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		o := newOutbox(t, db, &outbox.Options{Backoff: func(int) time.Duration { return time.Hour }})
		msg := outbox.Message{Topic: "upload"}
		var mains, steps atomic.Int32
		main := func(context.Context, *sql.Tx) error { mains.Add(1); return nil }
		step := func(context.Context, *outbox.Delivery) error { steps.Add(1); return nil }
		stats := func() outbox.Stats {
			t.Helper()
			s, err := o.Stats(context.Background(), db)
			if err != nil {
				t.Fatal(err)
			}
			return *s
		}

		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if w, err := o.Ancillary(ctx, msg, main, step); !errors.Is(err, context.Canceled) || w != nil {
			t.Fatalf("cancelled before the call: %v, %v; want context.Canceled", w, err)
		}
		if mains.Load() != 0 || steps.Load() != 0 || stats() != (outbox.Stats{}) {
			t.Fatalf("cancelled before the call: main ran %d, the step %d, stats %+v", mains.Load(), steps.Load(), stats())
		}

		ctx, cancel = context.WithCancel(context.Background())
		w, err := o.Ancillary(ctx, msg, func(context.Context, *sql.Tx) error { cancel(); return nil }, step)
		if err == nil || w != nil {
			t.Fatalf("cancelled in the main work: %v, %v; want an error", w, err)
		}
		if steps.Load() != 0 || stats() != (outbox.Stats{}) {
			t.Fatalf("cancelled in the main work: the step ran %d times, stats %+v", steps.Load(), stats())
		}

		ctx, cancel = context.WithCancel(context.Background())
		w, err = o.Ancillary(ctx, msg, main, func(context.Context, *outbox.Delivery) error { cancel(); return nil })
		if err != nil || w != nil {
			t.Fatalf("cancelled during a step that succeeded: %v, %v; want neither error nor warning", w, err)
		}
		if s := stats(); s.Delivered != 1 || s.Leased != 0 {
			t.Fatalf("cancelled during a step that succeeded: %+v, want it delivered", s)
		}

		ctx, cancel = context.WithCancel(context.Background())
		w, err = o.Ancillary(ctx, msg, main, func(ctx context.Context, _ *outbox.Delivery) error {
			cancel()
			return errors.New("storage unavailable")
		})
		if err != nil || w == nil || w.Outcome == nil || w.Outcome.Dead {
			t.Fatalf("cancelled during a step that failed: %+v, %v; want a warning with a retry", w, err)
		}
		if r := get(t, context.Background(), o, w.MessageID); r.State != outbox.Ready || len(r.History) != 1 || r.History[0].Outcome != "retry" {
			t.Fatalf("cancelled during a step that failed: %+v, want it recorded for a retry", r)
		}
	})
}

// TestEdgesHTTPHandlerOptions runs HTTPHandler with and without each
// optional field: URLFor routes each delivery (its error, or a URL that is
// not absolute http(s), is a permanent failure, never a retry); without
// it every message goes to URL. ContentType is sent when the message has
// no Content-Type (application/octet-stream without it), and a message's
// own Content-Type wins over it.
func TestEdgesHTTPHandlerOptions(t *testing.T) {
	var (
		mu   sync.Mutex
		seen []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.URL.Path+" "+r.Header.Get("Content-Type"))
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	last := func() string {
		mu.Lock()
		defer mu.Unlock()
		if len(seen) == 0 {
			return ""
		}
		return seen[len(seen)-1]
	}
	ctx := context.Background()
	plain := &outbox.Delivery{ID: 1, Tenant: "default", Topic: "mail", Attempt: 1, Fence: 1}
	typed := &outbox.Delivery{ID: 2, Tenant: "default", Topic: "sms", Attempt: 1, Fence: 1, Headers: map[string]string{"Content-Type": "application/json"}}

	h, err := outbox.HTTPHandler(outbox.HTTPOptions{URL: srv.URL + "/all", Client: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		d    *outbox.Delivery
		want string
	}{{plain, "/all application/octet-stream"}, {typed, "/all application/json"}} {
		if err := h(ctx, c.d); err != nil || last() != c.want {
			t.Errorf("without URLFor and ContentType, message %d: %v, sent %q; want %q", c.d.ID, err, last(), c.want)
		}
	}

	route := func(d *outbox.Delivery) (string, error) {
		switch d.Topic {
		case "mail", "sms":
			return srv.URL + "/" + d.Topic, nil
		case "ftp":
			return "ftp://files.internal/in", nil
		case "relative":
			return "/in", nil
		}
		return "", errors.New("no route")
	}
	h, err = outbox.HTTPHandler(outbox.HTTPOptions{URLFor: route, Client: srv.Client(), ContentType: "text/plain"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		d    *outbox.Delivery
		want string
	}{{plain, "/mail text/plain"}, {typed, "/sms application/json"}} {
		if err := h(ctx, c.d); err != nil || last() != c.want {
			t.Errorf("with URLFor and ContentType, message %d: %v, sent %q; want %q", c.d.ID, err, last(), c.want)
		}
	}
	mu.Lock()
	sent := len(seen)
	mu.Unlock()
	for _, topic := range []string{"unrouted", "ftp", "relative"} {
		err := h(ctx, &outbox.Delivery{ID: 3, Tenant: "default", Topic: topic, Attempt: 1, Fence: 1})
		if err == nil || !outbox.Classify(err).Permanent {
			t.Errorf("URLFor for %s: %v, want a permanent failure", topic, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != sent {
		t.Errorf("deliveries without a good URL reached the receiver: %v", seen[sent:])
	}
}

// TestEdgesRelayCountsACompletionRefusedAsStale: a handler returns nil
// after its lease lapsed and another worker took the message over. The
// relay's completion is refused: counted Stale once, not Delivered, and
// the message stays the other worker's.
func TestEdgesRelayCountsACompletionRefusedAsStale(t *testing.T) {
	clock, cfg := manual()
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		o := newOutbox(t, db, nil)
		takeover := make(chan error, 1)
		// A lease of a minute: the relay's heartbeat (every 20 s) never
		// runs here. One handler at a time: while it runs, the relay
		// claims nothing, so B's claim is the one that takes the lapsed
		// lease over.
		r, err := o.NewRelay(func(ctx context.Context, d *outbox.Delivery) error {
			clock.Advance(time.Minute) // the lease lapses at this millisecond
			ds, err := o.Claim(ctx, "B", 1, time.Minute)
			if err == nil && (len(ds) != 1 || ds[0].ID != d.ID || ds[0].Fence != d.Fence+1) {
				err = fmt.Errorf("B's takeover claimed %+v", ds)
			}
			takeover <- err
			return nil
		}, &outbox.RelayOptions{Worker: "A", Concurrency: 1, Lease: time.Minute, PollInterval: 5 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		stop := runRelay(t, r)
		defer stop()
		id := enqueue(t, ctx, o, db, outbox.Message{Topic: "t"})
		if err := <-takeover; err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the refused completion counted", func() bool { return r.Stats().Stale == 1 })
		stop()
		if s := r.Stats(); s.Delivered != 0 || s.Stale != 1 || s.LeaseLost != 0 {
			t.Fatalf("relay stats %+v; want one stale completion, none delivered", s)
		}
		if m := get(t, ctx, o, id); m.State != outbox.Leased || m.LeasedBy != "B" || m.Fence != 2 {
			t.Fatalf("message %+v; want it leased to B at fence 2", m)
		}
	})
}

// TestEdgesRelayHandledDeliveryLosesNoLease: a handler has returned nil
// and its completion is on the way when a heartbeat finds the lease gone
// (it lapsed and another worker took the message over). The heartbeat
// leaves it to the completion: no lease lost is counted, and the refused
// completion counts Stale. PostgreSQL only: a trigger holds the
// completion's statement on an advisory lock until heartbeats have run
// after the takeover, which orders the three; the relay's code is the
// same on both engines.
func TestEdgesRelayHandledDeliveryLosesNoLease(t *testing.T) {
	clock, cfg := manual()
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		if db.Engine() != racefree.Postgres {
			return
		}
		clock.Set(t0)
		ctx := context.Background()
		o := newOutbox(t, db, nil)
		lockKey := time.Now().UnixNano()
		hold, err := db.SQL().Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := hold.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, lockKey); err != nil {
			t.Fatal(err)
		}
		testdb.ExecAll(t, db,
			`CREATE TABLE rf_heartbeats (at timestamptz NOT NULL DEFAULT clock_timestamp())`,
			fmt.Sprintf(`CREATE FUNCTION rf_order() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  IF current_query() LIKE '%%SET state = ''delivered''%%' THEN
    PERFORM pg_advisory_xact_lock(%d);
  ELSIF current_query() LIKE '%%-- renew: the heartbeat%%' OR current_query() LIKE '%%SET available_at = (SELECT now FROM clock) + $4%%' THEN
    INSERT INTO rf_heartbeats DEFAULT VALUES;
  END IF;
  RETURN NULL;
END $f$`, lockKey),
			`CREATE TRIGGER rf_order BEFORE UPDATE ON racefree_outbox FOR EACH STATEMENT EXECUTE FUNCTION rf_order()`,
		)
		returned := make(chan *outbox.Delivery, 1)
		r, err := o.NewRelay(func(ctx context.Context, d *outbox.Delivery) error {
			returned <- d
			return nil
		}, &outbox.RelayOptions{Worker: "A", Concurrency: 1, Lease: 150 * time.Millisecond, PollInterval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		stop := runRelay(t, r)
		defer stop()
		defer func() { // first: a failed test lets the held completion go, so that stop returns
			_, _ = hold.ExecContext(context.Background(), `SELECT pg_advisory_unlock_all()`)
			_ = hold.Close()
		}()
		id := enqueue(t, ctx, o, db, outbox.Message{Topic: "t"})
		d := <-returned
		// The completion waits on the advisory lock.
		waitFor(t, "the completion held by the trigger", func() bool {
			var n int
			if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND objid = ($1::bigint & 4294967295)::oid`, lockKey).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n > 0
		})
		clock.Advance(time.Hour) // the lease lapses
		if ds, err := o.Claim(ctx, "B", 1, time.Hour); err != nil || len(ds) != 1 || ds[0].ID != d.ID || ds[0].Fence != d.Fence+1 {
			t.Fatalf("B's takeover: %+v, %v", ds, err)
		}
		count := func() (n int) {
			if err := db.QueryRowContext(ctx, `SELECT count(*) FROM rf_heartbeats`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		// Two: the relay's heartbeat loop handles what one statement
		// found before it sends the next.
		after := count()
		waitFor(t, "two heartbeats after the takeover", func() bool { return count() >= after+2 || r.Stats().LeaseLost > 0 })
		if s := r.Stats(); s.LeaseLost != 0 {
			t.Fatalf("relay stats %+v; want no lease lost: the handler had returned", s)
		}
		if _, err := hold.ExecContext(ctx, `SELECT pg_advisory_unlock($1)`, lockKey); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the refused completion counted", func() bool { return r.Stats().Stale == 1 })
		stop()
		if s := r.Stats(); s.LeaseLost != 0 || s.Delivered != 0 {
			t.Fatalf("relay stats %+v; want no lease lost (the handler had returned), none delivered, one stale", s)
		}
		if m := get(t, ctx, o, id); m.State != outbox.Leased || m.LeasedBy != "B" {
			t.Fatalf("message %+v; want it leased to B", m)
		}
	})
}

// TestEdgesRelayRenewsWithinTheLease: on the engine's own clock, a
// handler that runs for longer than its lease keeps it: the relay's first
// renewal lands well within the lease (every Lease/3: here after about a
// second of a three-second lease), and no other worker can claim the
// message while the handler runs.
func TestEdgesRelayRenewsWithinTheLease(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		o := newOutbox(t, db, nil)
		const lease = 3 * time.Second
		started, release := make(chan *outbox.Delivery, 1), make(chan struct{})
		r, err := o.NewRelay(func(ctx context.Context, d *outbox.Delivery) error {
			started <- d
			<-release
			return nil
		}, &outbox.RelayOptions{Worker: "A", Concurrency: 1, Lease: lease, PollInterval: 5 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		stop := runRelay(t, r)
		defer stop()
		defer close(release)
		id := enqueue(t, ctx, o, db, outbox.Message{Topic: "t"})
		<-started
		first := get(t, ctx, o, id)
		claimedBy := time.Now()
		renewed := func() bool { return get(t, ctx, o, id).AvailableAt.After(first.AvailableAt) }
		waitFor(t, "the first renewal or the lease's end", func() bool { return renewed() || time.Since(claimedBy) >= lease })
		if !renewed() {
			t.Fatalf("no renewal %s after the claim was read; want one within the lease of %s", time.Since(claimedBy), lease)
		}
		if ds := claim(t, ctx, o, "B", 1, time.Minute); len(ds) != 0 {
			t.Fatalf("B claimed a message whose handler still runs: %+v", ds)
		}
	})
}

// errorsLogged is a slog.Handler that keeps the time of each error a
// relay reports whose text starts with prefix (for example "outbox
// complete:", a failed completion).
type errorsLogged struct {
	prefix string
	mu     sync.Mutex
	times  []time.Time
	texts  []string
}

func (h *errorsLogged) Enabled(context.Context, slog.Level) bool { return true }
func (h *errorsLogged) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *errorsLogged) WithGroup(string) slog.Handler            { return h }
func (h *errorsLogged) Handle(_ context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "error" && strings.HasPrefix(a.Value.String(), h.prefix) {
			h.mu.Lock()
			h.times = append(h.times, r.Time)
			h.texts = append(h.texts, a.Value.String())
			h.mu.Unlock()
		}
		return true
	})
	return nil
}

func (h *errorsLogged) seen() []time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.times)
}

// said returns the text of each error kept.
func (h *errorsLogged) said() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.texts)
}

// TestEdgesRelayCompletionRetriesFiveTimesThenGivesUp: a completion the
// database refuses each time (a trigger refuses the update to delivered)
// is tried five times in all, 50, 100, 200 and 400 ms apart at least,
// and then given up (the message's lease will lapse and it will be
// delivered again): the relay then stops at once, with nothing left to
// retry.
func TestEdgesRelayCompletionRetriesFiveTimesThenGivesUp(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		o := newOutbox(t, db, nil)
		refuse := []string{`CREATE TRIGGER rf_refuse BEFORE UPDATE OF state ON racefree_outbox WHEN NEW.state = 'delivered' BEGIN SELECT RAISE(ABORT, 'completion refused by the test'); END`}
		if db.Engine() == racefree.Postgres {
			refuse = []string{
				`CREATE FUNCTION rf_refuse() RETURNS trigger LANGUAGE plpgsql AS $f$ BEGIN RAISE EXCEPTION 'completion refused by the test'; END $f$`,
				`CREATE TRIGGER rf_refuse BEFORE UPDATE ON racefree_outbox FOR EACH ROW WHEN (NEW.state = 'delivered') EXECUTE FUNCTION rf_refuse()`,
			}
		}
		testdb.ExecAll(t, db, refuse...)
		logs := &errorsLogged{prefix: "outbox complete:"}
		// Two slots for one message: its claim comes back short, so the
		// relay claims no more (and carries no completion along) until it
		// polls, in an hour.
		r, err := o.NewRelay(func(context.Context, *outbox.Delivery) error { return nil },
			&outbox.RelayOptions{Worker: "A", Concurrency: 2, Batch: 2, Lease: time.Minute, PollInterval: time.Hour, Logger: slog.New(logs)})
		if err != nil {
			t.Fatal(err)
		}
		stop := runRelay(t, r)
		defer stop()
		enqueue(t, ctx, o, db, outbox.Message{Topic: "t"})
		waitFor(t, "five failed completions", func() bool { return len(logs.seen()) >= 5 })
		testdb.Within(t, 20*time.Second, "the relay's stop after the completion was given up", func() bool { stop(); return true })
		times := logs.seen()
		if len(times) != 5 {
			t.Fatalf("%d failed completions; want 5, then none", len(times))
		}
		for i, least := range []time.Duration{50, 100, 200, 400} {
			if gap := times[i+1].Sub(times[i]); gap < least*time.Millisecond {
				t.Fatalf("attempt %d came %s after attempt %d; want at least %s", i+2, gap, i+1, least*time.Millisecond)
			}
		}
		// Errors counts the five and, at times, a claim that carried the
		// completion along and failed on the same trigger (the completion
		// then went back to the completer, which tried it five times).
		if s := r.Stats(); s.Delivered != 0 || s.Errors < 5 {
			t.Fatalf("relay stats %+v; want at least the 5 errors, none delivered", s)
		}
	})
}

// TestEdgesARelayStoppedLeavesTheOthersAwake: two relays of one Outbox in
// one process; one stops. An enqueue then wakes the other, which polls
// only hourly: it delivers at once. (On PostgreSQL its LISTEN would wake
// it too; on SQLite the process's own wake is the only one.)
func TestEdgesARelayStoppedLeavesTheOthersAwake(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		o := newOutbox(t, db, nil)
		delivered := make(chan string, 4)
		relay := func(worker string) *outbox.Relay {
			r, err := o.NewRelay(func(context.Context, *outbox.Delivery) error { delivered <- worker; return nil },
				&outbox.RelayOptions{Worker: worker, PollInterval: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		a, b := relay("A"), relay("B")
		stopB := runRelay(t, b)
		defer stopB()
		stopA := runRelay(t, a)
		waitFor(t, "A's first poll", func() bool { return a.Stats().Polls > 0 })
		waitFor(t, "B's first poll", func() bool { return b.Stats().Polls > 0 })
		stopA()
		enqueue(t, ctx, o, db, outbox.Message{Topic: "t"})
		select {
		case w := <-delivered:
			if w != "B" {
				t.Fatalf("delivered by %s after A stopped", w)
			}
		case <-time.After(time.Minute):
			t.Fatal("no relay delivered the message within a minute: B was not woken")
		}
	})
}

// TestEdgesRelayCountsItsOwnLandedCompletionAsDelivered: the relay's
// completion of a delivery finds the message already delivered at the
// delivery's own fence, the state a completion leaves whose reply was
// lost once it committed, and which the relay then completes again (the
// handler completes it itself here, so the timing is fixed). That
// delivery happened: counted Delivered once, never Stale, and the
// message stays delivered at its fence.
func TestEdgesRelayCountsItsOwnLandedCompletionAsDelivered(t *testing.T) {
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		o := newOutbox(t, db, nil)
		landed := make(chan *outbox.Delivery, 1)
		r, err := o.NewRelay(func(ctx context.Context, d *outbox.Delivery) error {
			err := o.Complete(ctx, db, d) // the earlier completion that landed
			landed <- d
			return err
		}, &outbox.RelayOptions{Worker: "A", Concurrency: 1, Lease: time.Minute, PollInterval: 5 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		stop := runRelay(t, r)
		defer stop()
		id := enqueue(t, ctx, o, db, outbox.Message{Topic: "t"})
		d := <-landed
		waitFor(t, "the relay's completion counted", func() bool { s := r.Stats(); return s.Delivered+s.Stale == 1 })
		stop()
		if s := r.Stats(); s.Delivered != 1 || s.Stale != 0 {
			t.Fatalf("relay stats %+v; want the completion that found its own delivery counted delivered, not stale", s)
		}
		if m := get(t, ctx, o, id); m.State != outbox.Delivered || m.Fence != 1 {
			t.Fatalf("message %+v; want it delivered at fence 1", m)
		}
		// Complete retried by hand says the same: delivered by this
		// tenure (not leased any more), never a stale fence.
		if err := o.Complete(ctx, db, d); !errors.Is(err, outbox.ErrDelivered) || !errors.Is(err, racefree.ErrNotHeld) || errors.Is(err, racefree.ErrStaleFence) {
			t.Fatalf("Complete again by the tenure that delivered it: %v; want ErrDelivered and ErrNotHeld, not ErrStaleFence", err)
		}
	})
}

// TestEdgesRelayCompletionWhoseReplyWasLostIsDelivered loses the reply
// to the relay's completion once PostgreSQL committed it
// (testdb.CutReply, armed as the handler returns): the relay retries it
// (the claim that carried it failed, or the completer's statement did),
// finds the message delivered at the delivery's own fence, and counts
// it Delivered, never Stale.
func TestEdgesRelayCompletionWhoseReplyWasLostIsDelivered(t *testing.T) {
	ctx, o, r, id, stop := relayWithACutReply(t, "cut-completion-tenant", nil, nil)
	defer stop()
	waitFor(t, "the relay's completion counted", func() bool { s := r.Stats(); return s.Delivered+s.Stale == 1 })
	stop()
	if s := r.Stats(); s.Delivered != 1 || s.Stale != 0 {
		t.Fatalf("relay stats %+v; want the completion whose reply was lost counted delivered, not stale", s)
	}
	if m := get(t, ctx, o, id); m.State != outbox.Delivered || m.Fence != 1 {
		t.Fatalf("message %+v; want it delivered at fence 1", m)
	}
}

// TestEdgesFailRetriedByItsTenureReturnsItsOutcome: Fail again by the
// tenure whose Fail landed (its reply lost, say) returns the outcome the
// first one recorded, retry or dead, and records nothing twice; once the
// message moved on (another tenure took it, or it was redriven) the same
// retry is refused as before: a stale fence, or not held.
func TestEdgesFailRetriedByItsTenureReturnsItsOutcome(t *testing.T) {
	clock, cfg := manual()
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		o := newOutbox(t, db, &outbox.Options{MaxAttempts: 2, Backoff: fixedBackoff})
		transient := errors.New("connection reset")
		claimOne := func(attempt int) *outbox.Delivery {
			t.Helper()
			clock.Advance(time.Hour)
			ds := claim(t, ctx, o, "w", 1, time.Minute)
			if len(ds) != 1 || ds[0].Attempt != attempt {
				t.Fatalf("claimed %+v, want one delivery at attempt %d", ds, attempt)
			}
			return ds[0]
		}
		failTwice := func(d *outbox.Delivery, dead bool) {
			t.Helper()
			first, err := o.Fail(ctx, d, transient)
			if err != nil || first.Dead != dead {
				t.Fatalf("Fail at attempt %d: %+v, %v; want dead %v", d.Attempt, first, err, dead)
			}
			clock.Advance(time.Millisecond) // a retry's clock is not the first's
			again, err := o.Fail(ctx, d, transient)
			if err != nil || *again != *first {
				t.Fatalf("Fail again by the same tenure: %+v, %v; want the first's outcome %+v", again, err, first)
			}
		}
		id := enqueue(t, ctx, o, db, outbox.Message{Topic: "t"})

		first := claimOne(1)
		failTwice(first, false)
		second := claimOne(2)
		if _, err := o.Fail(ctx, first, transient); !errors.Is(err, racefree.ErrStaleFence) {
			t.Fatalf("Fail again by a tenure another one took over: %v; want ErrStaleFence", err)
		}
		failTwice(second, true)
		if m := get(t, ctx, o, id); m.State != outbox.Dead || m.Attempts != 2 || len(m.History) != 2 {
			t.Fatalf("message %+v; want it dead after two attempts, each failure recorded once", m)
		}
		if _, err := o.Redrive(ctx, db, outbox.Filter{IDs: []int64{id}}); err != nil {
			t.Fatal(err)
		}
		if out, err := o.Fail(ctx, second, transient); !errors.Is(err, racefree.ErrNotHeld) || errors.Is(err, racefree.ErrStaleFence) {
			t.Fatalf("Fail again by the dead tenure after a redrive: %+v, %v; want ErrNotHeld", out, err)
		}
		if m := get(t, ctx, o, id); m.State != outbox.Ready || len(m.History) != 2 {
			t.Fatalf("message %+v; want it ready again, its history as it was", m)
		}
	})
}

// TestEdgesRelayFailureWhoseReplyWasLostIsCounted loses the reply to the
// relay's Fail once PostgreSQL committed it (testdb.CutReply, armed as
// the handler fails): the relay fails it again, finds its own failure
// recorded, and counts it Retried, once, never Stale.
func TestEdgesRelayFailureWhoseReplyWasLostIsCounted(t *testing.T) {
	ctx, o, r, id, stop := relayWithACutReply(t, "cut-failure-tenant",
		&outbox.Options{Backoff: func(int) time.Duration { return time.Hour }}, errors.New("the receiver is down"))
	defer stop()
	waitFor(t, "the relay's failure counted", func() bool { s := r.Stats(); return s.Retried+s.Stale+s.Dead == 1 })
	stop()
	if s := r.Stats(); s.Retried != 1 || s.Stale != 0 || s.Dead != 0 {
		t.Fatalf("relay stats %+v; want the failure whose reply was lost counted retried, not stale", s)
	}
	if m := get(t, ctx, o, id); m.State != outbox.Ready || m.Fence != 1 || m.Attempts != 1 || len(m.History) != 1 {
		t.Fatalf("message %+v; want it ready again at fence 1, its failure recorded once", m)
	}
}

// TestEdgesAPermanentStatusCarriesNoRetryAfter: Classify hands an
// *HTTPError's Retry-After only to a transient answer (a 5xx, 408, 429);
// a permanent 4xx is Verdict{Permanent: true} alone, whatever Retry-After
// it came with: no caller of Classify may read a delay into it.
func TestEdgesAPermanentStatusCarriesNoRetryAfter(t *testing.T) {
	for _, c := range []struct {
		status int
		want   outbox.Verdict
	}{
		{http.StatusBadRequest, outbox.Verdict{Permanent: true}},
		{http.StatusNotFound, outbox.Verdict{Permanent: true}},
		{499, outbox.Verdict{Permanent: true}},
		{http.StatusRequestTimeout, outbox.Verdict{RetryAfter: time.Minute}},
		{http.StatusTooManyRequests, outbox.Verdict{RetryAfter: time.Minute}},
		{http.StatusServiceUnavailable, outbox.Verdict{RetryAfter: time.Minute}},
	} {
		err := fmt.Errorf("send: %w", &outbox.HTTPError{Status: c.status, RetryAfter: time.Minute})
		if got := outbox.Classify(err); got != c.want {
			t.Errorf("HTTP %d with Retry-After 1m: %+v, want %+v", c.status, got, c.want)
		}
	}
}

// TestEdgesAncillaryStepOutlivesItsCallersCancel: past the commit, the
// caller's context no longer reaches the step: a caller cancelled while
// the step runs leaves the step's own context live (only AncillaryLease
// bounds it), so a step that checks it, or waits on it, finishes, and its
// success is recorded with no warning.
func TestEdgesAncillaryStepOutlivesItsCallersCancel(t *testing.T) {
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		o := newOutbox(t, db, nil)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var stepErr error
		w, err := o.Ancillary(ctx, outbox.Message{Topic: "upload"},
			func(context.Context, *sql.Tx) error { return nil },
			func(sctx context.Context, _ *outbox.Delivery) error {
				cancel()
				<-ctx.Done() // the caller's context has ended
				stepErr = sctx.Err()
				return stepErr
			})
		if err != nil || w != nil {
			t.Fatalf("a caller cancelled during the step: %v, %v; want neither error nor warning", w, err)
		}
		if stepErr != nil {
			t.Fatalf("the step's context ended with its caller's: %v", stepErr)
		}
		if s, err := o.Stats(context.Background(), db); err != nil || s.Delivered != 1 || s.Leased != 0 || s.Ready != 0 {
			t.Fatalf("stats %+v, %v; want the step delivered", s, err)
		}
	})
}

// TestEdgesStatsCountOnlyTheirTenant: every figure of Stats is the
// tenant's own: another tenant holding a message in each state (ready
// and not due, leased, dead, delivered) leaves this tenant's Stats at
// zero, and its own Stats count exactly those.
func TestEdgesStatsCountOnlyTheirTenant(t *testing.T) {
	clock, cfg := manual()
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		globex, err := tenant.With(ctx, "globex")
		if err != nil {
			t.Fatal(err)
		}
		o := newOutbox(t, db, nil)
		dead := enqueue(t, globex, o, db, outbox.Message{Topic: "t", MaxAttempts: 1})
		if d := claim(t, globex, o, "w", 1, time.Minute); len(d) != 1 || d[0].ID != dead {
			t.Fatalf("claimed %v, want %d", ids(d), dead)
		} else if out, err := o.Fail(globex, d[0], errors.New("boom")); err != nil || !out.Dead {
			t.Fatalf("fail: %+v, %v; want it dead", out, err)
		}
		delivered := enqueue(t, globex, o, db, outbox.Message{Topic: "t"})
		if d := claim(t, globex, o, "w", 1, time.Minute); len(d) != 1 || d[0].ID != delivered {
			t.Fatalf("claimed %v, want %d", ids(d), delivered)
		} else if err := o.Complete(globex, db, d[0]); err != nil {
			t.Fatal(err)
		}
		leased := enqueue(t, globex, o, db, outbox.Message{Topic: "t"})
		if d := claim(t, globex, o, "w", 1, time.Minute); len(d) != 1 || d[0].ID != leased {
			t.Fatalf("claimed %v, want %d", ids(d), leased)
		}
		enqueue(t, globex, o, db, outbox.Message{Topic: "t", NotBefore: t0.Add(time.Hour)})
		clock.Advance(time.Second)
		if s, err := o.Stats(ctx, db); err != nil || *s != (outbox.Stats{}) {
			t.Fatalf("the default tenant's stats beside globex's messages: %+v, %v; want all zero", s, err)
		}
		want := outbox.Stats{Ready: 1, Leased: 1, Dead: 1, Delivered: 1, OldestPending: time.Second}
		if s, err := o.Stats(globex, db); err != nil || *s != want {
			t.Fatalf("globex's stats: %+v, %v; want %+v", s, err, want)
		}
	})
}

// outboxWithACutReply opens a fresh PostgreSQL database through
// testdb.CutReply and an outbox on it (opts), and returns the context of
// the tenant marker, which arms the proxy's cuts, the outbox, the
// database and the proxy.
func outboxWithACutReply(t *testing.T, marker string, opts *outbox.Options) (context.Context, *outbox.Outbox, *racefree.DB, *testdb.CutReply) {
	t.Helper()
	dsn := testdb.NewDSN(t, racefree.Postgres)
	proxy, cut := testdb.NewCutReply(t, dsn)
	db := testdb.Open(t, cut, nil)
	ctx, err := tenant.With(context.Background(), marker)
	if err != nil {
		t.Fatal(err)
	}
	return ctx, newOutbox(t, db, opts), db, proxy
}

// relayWithACutReply runs one relay on PostgreSQL through testdb.CutReply
// for the tenant marker alone, whose name marks the relay's statements
// for the proxy, enqueues one message of that tenant, and returns once
// the proxy lost the reply to the first of those statements to commit
// after the handler returned handlerErr (nil: the completion's; else the
// failure's). It returns the tenant's context, the outbox, the relay, the
// message and what stops the relay.
func relayWithACutReply(t *testing.T, marker string, opts *outbox.Options, handlerErr error) (context.Context, *outbox.Outbox, *outbox.Relay, int64, func()) {
	t.Helper()
	ctx, o, db, proxy := outboxWithACutReply(t, marker, opts)
	armed := make(chan struct{})
	r, err := o.NewRelay(func(ctx context.Context, d *outbox.Delivery) error {
		proxy.LoseNextCommit(marker)
		close(armed)
		return handlerErr
	}, &outbox.RelayOptions{Worker: "A", Concurrency: 1, Lease: time.Minute, PollInterval: 5 * time.Millisecond, Tenants: []string{marker}})
	if err != nil {
		t.Fatal(err)
	}
	stop := runRelay(t, r)
	id := enqueue(t, ctx, o, db, outbox.Message{Topic: "t"})
	<-armed
	proxy.Wait(t)
	if proxy.Cuts() != 1 {
		stop()
		t.Fatalf("%d replies lost, want one", proxy.Cuts())
	}
	return ctx, o, r, id, stop
}

// TestEdgesAncillaryOutcomeWhoseReplyWasLostIsSettled loses the reply to
// the commit that records an ancillary step's outcome once PostgreSQL
// committed it (testdb.CutReply, armed by the step): Ancillary records it
// again, finds what landed, and answers as if the reply had come. A failed
// step: a *Warning with its Outcome (retried, not dead), the failure
// recorded once. A step that succeeded: no warning, the message delivered.
func TestEdgesAncillaryOutcomeWhoseReplyWasLostIsSettled(t *testing.T) {
	for _, c := range []struct {
		name    string
		stepErr error
	}{{"failed", errors.New("the receiver is down")}, {"succeeded", nil}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			const marker = "cut-ancillary-tenant"
			ctx, o, db, proxy := outboxWithACutReply(t, marker, &outbox.Options{Backoff: func(int) time.Duration { return time.Hour }})
			w, err := o.Ancillary(ctx, outbox.Message{Topic: "upload"},
				func(context.Context, *sql.Tx) error { return nil },
				func(context.Context, *outbox.Delivery) error {
					proxy.LoseNextCommit(marker)
					return c.stepErr
				})
			if err != nil {
				t.Fatalf("Ancillary: %v", err)
			}
			if proxy.Cuts() != 1 {
				t.Fatalf("%d replies lost, want one", proxy.Cuts())
			}
			if c.stepErr == nil {
				if w != nil {
					t.Fatalf("a step that succeeded, its completion's reply lost: warning %v; want none", w)
				}
				if s, err := o.Stats(ctx, db); err != nil || s.Delivered != 1 || s.Leased != 0 || s.Ready != 0 {
					t.Fatalf("stats %+v, %v; want the step delivered", s, err)
				}
				return
			}
			if w == nil || w.Outcome == nil || w.Outcome.Dead || !errors.Is(w, c.stepErr) || errors.Is(w, racefree.ErrUnavailable) {
				t.Fatalf("a failed step, its failure's reply lost: warning %v; want the step's error with the outcome recorded (retried)", w)
			}
			if m := get(t, ctx, o, w.MessageID); m.State != outbox.Ready || m.Attempts != 1 || len(m.History) != 1 {
				t.Fatalf("message %+v; want it ready again, its failure recorded once", m)
			}
		})
	}
}
