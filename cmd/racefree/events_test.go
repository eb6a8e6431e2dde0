package main

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/dedup"
	"github.com/racefree/racefree/inbox"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/server"
)

// TestEventsCommandsOnBothEngines drives events observe and events record
// with --server against a live server per engine: of two observers of one
// window the first exits 0 (process) and the second 3 (a duplicate), both
// counted; record stores the result at the winner's fence (exit 0), and
// exits 4 for a stale fence, 5 for a fence never issued, 6 for an unknown
// fingerprint (naming it), 2 for bad input, changing nothing. With
// --format json each prints one object with the members of the API's
// answer, without it one line of text.
func TestEventsCommandsOnBothEngines(t *testing.T) {
	t.Parallel()
	start := time.Now().Truncate(time.Millisecond)
	clock := racefree.NewManualClock(start)
	testdb.Each(t, &racefree.Config{Clock: clock}, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		clock.Set(start)
		srv := httptest.NewServer(server.New(db, server.Options{}).Handler())
		defer srv.Close()
		url := srv.URL
		log := dedup.New(db)
		observe := []string{"events", "observe", "--source", "billing", "--level", "error", "--message", "charge 1041 failed", "--window", "1m", "--server", url}
		fp := dedup.Fingerprint("billing", "error", "charge 1041 failed")

		r := runCLI(t, append(observe, "--format", "json")...)
		if m := jsonOf(t, r, "POST /v1/events"); r.code != 0 || m["fingerprint"] != fp || m["process"] != true || m["fence"] != float64(1) || m["count"] != float64(1) {
			t.Fatalf("events observe: %+v, want exit 0, process at fence 1", r)
		}
		r = runCLI(t, append(observe, "--format", "json")...)
		if m := jsonOf(t, r, "POST /v1/events"); r.code != exitDuplicate || m["process"] != false || m["fence"] != float64(1) || m["count"] != float64(2) ||
			strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, "duplicate") {
			t.Fatalf("events observe of a duplicate: %+v, want exit 3, counted, one line saying duplicate", r)
		}
		r = runCLI(t, observe...)
		if textOf(t, r, fp+": duplicate, fence 1, occurrence 3 since "); r.code != exitDuplicate {
			t.Fatalf("events observe, text: %+v", r)
		}

		r = runCLI(t, "events", "record", fp, "--fence", "1", "--classification", "card", "--external-id", "T-1", "--server", url, "--format", "json")
		if m := jsonOf(t, r, "POST /v1/events/{fingerprint}/result"); r.code != 0 || m["fingerprint"] != fp || m["fence"] != float64(1) || m["classification"] != "card" || m["external_id"] != "T-1" {
			t.Fatalf("events record: %+v", r)
		}
		if rec, err := log.Get(ctx, db, fp); err != nil || rec.Classification != "card" || rec.ExternalID != "T-1" || rec.ResultFence != 1 {
			t.Fatalf("the result recorded: %+v, %v; want card, T-1 at fence 1", rec, err)
		}
		for _, c := range []struct {
			args   []string
			code   int
			stderr string
		}{
			{[]string{"events", "record", fp, "--fence", "7", "--classification", "other"}, exitNotHeld, ""},
			{[]string{"events", "record", "never-seen", "--fence", "1", "--classification", "other"}, exitNotFound, "never-seen"},
			{[]string{"events", "record", fp, "--fence", "0", "--classification", "other"}, exitUsage, "fence"},
			{[]string{"events", "record", fp, "--classification", "other"}, exitUsage, "fence"},
			{[]string{"events", "observe", "--level", "error", "--message", "m", "--fingerprint", fp}, exitUsage, "source"},
			{[]string{"events", "observe", "--source", "billing", "--level", "error", "--fingerprint", fp, "--window", "1500us"}, exitUsage, "window"},
		} {
			r := runCLI(t, append(c.args, "--server", url)...)
			if r.code != c.code || r.stdout != "" || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, c.stderr) {
				t.Errorf("%v: %+v; want exit %d, one line on stderr with %q", c.args, r, c.code, c.stderr)
			}
		}
		if rec, err := log.Get(ctx, db, fp); err != nil || rec.Classification != "card" || rec.ResultFence != 1 {
			t.Fatalf("after the refusals: %+v, %v; want the result unchanged", rec, err)
		}
		if r := runCLI(t, "events", "record", fp, "--fence", "1", "--server", url); r.code != 0 || r.stdout != fp+": result recorded at fence 1\n" {
			t.Fatalf("events record, text: %+v", r)
		}

		// The window lapses: the next observer wins at fence 2, and the
		// first winner's fence is stale.
		clock.Advance(time.Minute)
		r = runCLI(t, observe...)
		if textOf(t, r, fp+": process, fence 2, occurrence 4 since "); r.code != 0 {
			t.Fatalf("events observe after the window: %+v, want exit 0, process at fence 2", r)
		}
		r = runCLI(t, "events", "record", fp, "--fence", "1", "--classification", "late", "--server", url)
		if r.code != exitStale || r.stdout != "" || strings.Count(r.stderr, "\n") != 1 {
			t.Fatalf("events record at the lapsed fence: %+v, want exit 4", r)
		}
		if rec, err := log.Get(ctx, db, fp); err != nil || rec.Classification == "late" {
			t.Fatalf("a stale record wrote: %+v, %v", rec, err)
		}
	})
}

// TestInboxCommandsOnBothEngines drives inbox deliver and inbox list with
// --server against a live server per engine: a signed delivery forwarded
// with --payload or with --payload-file (- reads stdin, every byte kept)
// is recorded once however often it is delivered (exit 0); a body that is
// not the one signed or a source the server has no secret for exits 1, a
// missing header 2, recording nothing; list pages by --after and --limit,
// with --format json one object per event with the members of the API's.
func TestInboxCommandsOnBothEngines(t *testing.T) {
	t.Parallel()
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		srv := httptest.NewServer(server.New(db, server.Options{InboxSecrets: map[string][]string{"stripe": {secret}}}).Handler())
		defer srv.Close()
		url := srv.URL
		// deliver returns the arguments of inbox deliver of body as id,
		// signed now.
		deliver := func(id string, body []byte) []string {
			t.Helper()
			now := time.Now()
			sig, err := inbox.Sign(secret, id, now, body)
			if err != nil {
				t.Fatal(err)
			}
			return []string{"inbox", "deliver", "stripe", "--webhook-id", id, "--webhook-timestamp", strconv.FormatInt(now.Unix(), 10), "--webhook-signature", sig, "--server", url}
		}
		first := `{"type":"invoice.paid"}`
		for range 2 { // the second is a duplicate: recorded once
			r := runCLI(t, append(deliver("evt_1", []byte(first)), "--payload", first, "--format", "json")...)
			if m := jsonOf(t, r, "POST /v1/inbox/{source}"); r.code != 0 || m["source"] != "stripe" || m["webhook-id"] != "evt_1" {
				t.Fatalf("inbox deliver: %+v", r)
			}
		}
		text := "plain text, signed with its newline\n"
		r := runCLIWithStdin(t, text, append(deliver("evt_2", []byte(text)), "--payload-file", "-")...)
		if textOf(t, r, "stripe: delivered evt_2 ("); r.code != 0 {
			t.Fatalf("inbox deliver --payload-file -: %+v", r)
		}
		file := filepath.Join(t.TempDir(), "body")
		if err := os.WriteFile(file, []byte(first), 0o600); err != nil {
			t.Fatal(err)
		}
		if r := runCLI(t, append(deliver("evt_3", []byte(first)), "--payload-file", file)...); r.code != 0 {
			t.Fatalf("inbox deliver --payload-file FILE: %+v", r)
		}
		for _, c := range []struct {
			args   []string
			code   int
			stderr string
		}{
			{append(deliver("evt_4", []byte(first)), "--payload", `{"type":"forged"}`), exitUnreached, "signature"},
			{append(deliver("evt_4", []byte(first)), "--payload", first, "--webhook-signature", ""), exitUsage, "webhook-signature"},
			{append(deliver("evt_4", []byte(first)), "--payload", first, "--payload-file", file), exitUsage, "payload"},
			{append(append([]string{"inbox", "deliver", "github"}, deliver("evt_4", []byte(first))[3:]...), "--payload", first), exitUnreached, "github"},
			{[]string{"inbox", "list", "stripe", "--after", "-1", "--server", url}, exitUsage, "after"},
			{[]string{"inbox", "list", "stripe", "--limit", "1001", "--server", url}, exitUsage, "limit"},
		} {
			r := runCLI(t, c.args...)
			if r.code != c.code || r.stdout != "" || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, c.stderr) {
				t.Errorf("%v: %+v; want exit %d, one line on stderr with %q", c.args, r, c.code, c.stderr)
			}
		}

		r = runCLI(t, "inbox", "list", "stripe", "--server", url, "--format", "json")
		evs := jsonLinesOf(t, r, "GET /v1/inbox/{source} events")
		if r.code != 0 || len(evs) != 3 {
			t.Fatalf("inbox list: %+v, want the 3 deliveries, each once", r)
		}
		for i, want := range []struct {
			id      string
			payload any
		}{{"evt_1", map[string]any{"type": "invoice.paid"}}, {"evt_2", text}, {"evt_3", map[string]any{"type": "invoice.paid"}}} {
			if e := evs[i]; e["seq"] != float64(i+1) || e["id"] != want.id || e["status"] != "processed" || e["received_at"] == "" || !jsonEqual(e["payload"], want.payload) {
				t.Errorf("event %d: %v, want %s with payload %#v", i+1, e, want.id, want.payload)
			}
		}
		r = runCLI(t, "inbox", "list", "stripe", "--after", "1", "--limit", "1", "--server", url, "--format", "json")
		if evs := jsonLinesOf(t, r, "GET /v1/inbox/{source} events"); r.code != 0 || len(evs) != 1 || evs[0]["id"] != "evt_2" {
			t.Fatalf("inbox list --after 1 --limit 1: %+v, want evt_2 alone", r)
		}
		if r := runCLI(t, "inbox", "list", "stripe", "--after", "3", "--server", url, "--format", "json"); r.code != 0 || r.stdout != "" {
			t.Fatalf("inbox list past the last: %+v, want nothing", r)
		}
		r = runCLI(t, "inbox", "list", "stripe", "--limit", "2", "--server", url)
		lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
		if r.code != 0 || len(lines) != 3 || !strings.HasPrefix(lines[0], "SEQ") || !strings.HasPrefix(lines[1], "1 ") || !strings.Contains(lines[2], "evt_2") {
			t.Fatalf("inbox list, text: %+v, want a header and 2 rows", r)
		}
	})
}

// jsonEqual reports whether a and b encode to the same JSON.
func jsonEqual(a, b any) bool {
	x, errx := json.Marshal(a)
	y, erry := json.Marshal(b)
	return errx == nil && erry == nil && string(x) == string(y)
}
