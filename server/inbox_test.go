package server_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/inbox"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/server"
)

const (
	secret  = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	rotated = "whsec_c2Vjb25kLXNlY3JldC1mb3Itcm90YXRpb24="
)

// webhook returns the signature headers of body, as do() takes them.
func webhook(t *testing.T, secret, id string, at time.Time, body string) []string {
	t.Helper()
	sig, err := inbox.Sign(secret, id, at, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return []string{"webhook-id", id, "webhook-timestamp", strconv.FormatInt(at.Unix(), 10), "webhook-signature", sig}
}

func TestInboxReceivesAndLists(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{Token: "tok", InboxMaxBody: 1024,
			InboxSecrets: map[string][]string{"stripe": {secret, rotated}, "github": {secret}}}).Handler()
		now := time.Now()
		auth := []string{"Authorization", "Bearer tok"}
		for _, c := range []struct {
			name, source, id, body string
			secret                 string
			at                     time.Time
			want                   int
		}{
			{"new, no bearer token needed", "stripe", "evt_1", `{"n":1}`, secret, now, 204},
			{"duplicate", "stripe", "evt_1", `{"n":1}`, secret, now, 204},
			{"rotated secret", "stripe", "evt_2", `not json`, rotated, now, 204},
			{"same id, other source", "github", "evt_1", `{"n":3}`, secret, now, 204},
			{"stale", "stripe", "evt_3", `{}`, secret, now.Add(-10 * time.Minute), 401},
			{"wrong secret for the source", "github", "evt_4", `{}`, rotated, now, 401},
			{"unknown source", "paypal", "evt_5", `{}`, secret, now, 404},
			{"too large", "stripe", "evt_6", strings.Repeat("x", 1025), secret, now, 413},
		} {
			code, body, hdr := do(t, h, "POST", "/v1/inbox/"+c.source, c.body, webhook(t, c.secret, c.id, c.at, c.body)...)
			if code != c.want {
				t.Errorf("%s: %d %v, want %d", c.name, code, body, c.want)
			}
			if code >= 400 && hdr.Get("Content-Type") != "application/problem+json" {
				t.Errorf("%s: content type %q", c.name, hdr.Get("Content-Type"))
			}
		}
		if code, body, _ := do(t, h, "GET", "/v1/inbox/stripe", ""); code != 401 {
			t.Fatalf("listing without the bearer token: %d %v", code, body)
		}
		code, body, _ := do(t, h, "GET", "/v1/inbox/stripe?limit=1", "", auth...)
		evs, _ := body["events"].([]any)
		if code != 200 || len(evs) != 1 || body["next"] != "1" {
			t.Fatalf("first page: %d %v", code, body)
		}
		ev := evs[0].(map[string]any)
		if ev["id"] != "evt_1" || ev["seq"] != float64(1) || ev["status"] != "processed" || ev["payload"].(map[string]any)["n"] != float64(1) {
			t.Fatalf("first event: %v", ev)
		}
		at, err := time.Parse(time.RFC3339, ev["received_at"].(string))
		if err != nil || !strings.HasSuffix(ev["received_at"].(string), "Z") || len(ev["received_at"].(string)) != len("2006-01-02T15:04:05.000Z") || time.Since(at).Abs() > time.Minute {
			t.Fatalf("received_at %v (%v)", ev["received_at"], err)
		}
		code, body, _ = do(t, h, "GET", "/v1/inbox/stripe?after=1", "", auth...)
		evs, _ = body["events"].([]any)
		if code != 200 || len(evs) != 1 || evs[0].(map[string]any)["payload"] != "not json" || body["next"] != "2" {
			t.Fatalf("second page: %d %v", code, body)
		}
		code, body, _ = do(t, h, "GET", "/v1/inbox/stripe?after=2", "", auth...)
		if evs, _ = body["events"].([]any); code != 200 || len(evs) != 0 || body["next"] != "2" {
			t.Fatalf("past the end: %d %v", code, body)
		}
		for _, q := range []string{"after=x", "after=-1", "limit=0", "limit=1001", "limit=x"} {
			if code, body, _ := do(t, h, "GET", "/v1/inbox/stripe?"+q, "", auth...); code != 400 {
				t.Errorf("?%s: %d %v, want 400", q, code, body)
			}
		}
		if code, _, _ := do(t, h, "GET", "/v1/inbox/paypal", "", auth...); code != 404 {
			t.Errorf("listing an unknown source: %d", code)
		}
	})
}

func TestParseInboxSecrets(t *testing.T) {
	t.Parallel()
	got, err := server.ParseInboxSecrets([]string{"stripe=" + secret, " stripe=" + rotated, "gh=" + secret, ""})
	if err != nil || len(got["stripe"]) != 2 || len(got["gh"]) != 1 {
		t.Fatalf("%v, %v", got, err)
	}
	for _, bad := range []string{"stripe", "=" + secret, "a/b/c=" + secret, "/b=" + secret, "a b/c=" + secret, "a/=" + secret,
		"s=whsec_!!", "s=" + strings.TrimPrefix(secret, "whsec_")} {
		if _, err := server.ParseInboxSecrets([]string{bad}); !errors.Is(err, racefree.ErrInvalidInput) {
			t.Errorf("%q: %v, want ErrInvalidInput", bad, err)
		}
	}
	// A tenant's source: "tenant/source", with the default tenant's
	// written plainly; one secret cannot name two tenants of a source.
	got, err = server.ParseInboxSecrets([]string{"acme/stripe=" + secret, "default/stripe=" + rotated, "globex/gh=" + secret})
	if err != nil || len(got["acme/stripe"]) != 1 || len(got["stripe"]) != 1 || len(got["globex/gh"]) != 1 || len(got) != 3 {
		t.Fatalf("tenants' sources: %v, %v", got, err)
	}
	for _, shared := range [][]string{{"acme/stripe=" + secret, "globex/stripe=" + secret}, {"stripe=" + secret, "acme/stripe=" + secret}} {
		if _, err := server.ParseInboxSecrets(shared); !errors.Is(err, racefree.ErrInvalidInput) {
			t.Errorf("%q: %v, want ErrInvalidInput (a shared secret)", shared, err)
		}
	}
}
