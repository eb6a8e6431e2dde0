package inbox_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/inbox"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// Secrets of at least 16 bytes, "whsec_" + base64.
const (
	secretA = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	secretB = "whsec_c2Vjb25kLXNlY3JldC1mb3Itcm90YXRpb24="
)

// verifierAt returns a verifier of secretA whose clock stands at at.
func verifierAt(t *testing.T, at time.Time) *inbox.Verifier {
	t.Helper()
	v, err := inbox.NewVerifier([]string{secretA}, &inbox.VerifierOptions{Clock: racefree.NewManualClock(at)})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// signed returns the headers of a delivery of body signed with secret at t.
func signed(t testing.TB, secret, id string, at time.Time, body string) http.Header {
	t.Helper()
	sig, err := inbox.Sign(secret, id, at, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	h.Set("webhook-id", id)
	h.Set("webhook-timestamp", strconv.FormatInt(at.Unix(), 10))
	h.Set("webhook-signature", sig)
	return h
}

// TestVerifyStandardWebhooksVector checks the test vector of the Standard
// Webhooks specification's reference libraries.
func TestVerifyStandardWebhooksVector(t *testing.T) {
	t.Parallel()
	at := time.Unix(1614265330, 0)
	v, err := inbox.NewVerifier([]string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, &inbox.VerifierOptions{Clock: racefree.NewManualClock(at)})
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	h.Set("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek")
	h.Set("webhook-timestamp", "1614265330")
	h.Set("webhook-signature", "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
	id, err := v.Verify(h, []byte(`{"test": 2432232314}`))
	if err != nil || id != "msg_p5jXN8AQM9LWM0D4loKWxJek" {
		t.Fatalf("Verify: %q, %v", id, err)
	}
}

func TestVerify(t *testing.T) {
	t.Parallel()
	clock := racefree.NewManualClock(t0)
	v, err := inbox.NewVerifier([]string{secretA, secretB}, &inbox.VerifierOptions{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	const body = `{"type":"invoice.paid"}`
	other := "whsec_" + "b3RoZXItc2VjcmV0LW5vdC1jb25maWd1cmVk"
	for _, c := range []struct {
		name string
		h    http.Header
		body string
		ok   bool
	}{
		{"first secret", signed(t, secretA, "e1", t0, body), body, true},
		{"second secret (rotation)", signed(t, secretB, "e1", t0, body), body, true},
		{"5 minutes old", signed(t, secretA, "e1", t0.Add(-5*time.Minute), body), body, true},
		{"5 minutes ahead", signed(t, secretA, "e1", t0.Add(5*time.Minute), body), body, true},
		{"5 minutes 1 second old", signed(t, secretA, "e1", t0.Add(-5*time.Minute-time.Second), body), body, false},
		{"5 minutes 1 second ahead", signed(t, secretA, "e1", t0.Add(5*time.Minute+time.Second), body), body, false},
		{"unknown secret", signed(t, other, "e1", t0, body), body, false},
		{"tampered body", signed(t, secretA, "e1", t0, body), body + " ", false},
		{"no headers", http.Header{}, body, false},
	} {
		_, err := v.Verify(c.h, []byte(c.body))
		if got := err == nil; got != c.ok {
			t.Errorf("%s: verified %v (%v), want %v", c.name, got, err, c.ok)
		}
		if err != nil && !errors.Is(err, inbox.ErrSignature) {
			t.Errorf("%s: %v does not match ErrSignature", c.name, err)
		}
	}

	// Several signatures, one valid among unknown versions and garbage.
	h := signed(t, secretB, "e2", t0, body)
	bad := signed(t, other, "e2", t0, body).Get("webhook-signature")
	h.Set("webhook-signature", "v2,abc "+bad+" v1,!!! "+h.Get("webhook-signature"))
	if _, err := v.Verify(h, []byte(body)); err != nil {
		t.Errorf("list of signatures: %v", err)
	}
	// The id and timestamp are signed too.
	h = signed(t, secretA, "e3", t0, body)
	h.Set("webhook-id", "e4")
	if _, err := v.Verify(h, []byte(body)); err == nil {
		t.Error("a changed webhook-id verified")
	}
}

// TestVerifyFollowsTheReferenceLibraries pins the cases where racefree
// once differed from the Standard Webhooks reference libraries (the
// official Go library and svix's): signatures are separated by single
// spaces only, compared as canonical base64 text, and the timestamp is
// signed as the integer it denotes, not as the header's text. Where the
// libraries are lenient (a signed timestamp), racefree is stricter.
func TestVerifyFollowsTheReferenceLibraries(t *testing.T) {
	t.Parallel()
	at := time.Unix(1796032020, 0)
	v := verifierAt(t, at)
	const body = `{"type":"invoice.paid"}`
	good := signed(t, secretA, "e1", at, body)
	sig := good.Get("webhook-signature")
	other := signed(t, secretB, "e1", at, body).Get("webhook-signature")
	// A genuine signature re-encoded: the last base64 digit before "="
	// carries two padding bits that a loose decoder ignores.
	last := strings.IndexByte(sig, '=') - 1
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	reencoded := sig[:last] + string(alphabet[strings.IndexByte(alphabet, sig[last])^1]) + sig[last+1:]
	// A sender that signs over the header's text "01796032020".
	textMAC := func() string {
		key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(secretA, "whsec_"))
		m := hmac.New(sha256.New, key)
		m.Write([]byte("e1.01796032020." + body))
		return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
	}()
	with := func(ts, sigs string) http.Header {
		h := good.Clone()
		h.Set("webhook-timestamp", ts)
		h.Set("webhook-signature", sigs)
		return h
	}
	for _, c := range []struct {
		name string
		h    http.Header
		ok   bool
	}{
		{"genuine", good, true},
		{"space-separated list", with("1796032020", other+" "+sig), true},
		{"TAB-separated list", with("1796032020", other+"\t"+sig), false},
		{"TAB after the signature", with("1796032020", sig+"\t"), false},
		{"re-encoded signature", with("1796032020", reencoded), false},
		{"signature without padding", with("1796032020", strings.TrimSuffix(sig, "=")), false},
		{"leading zero, signed as the integer", with("01796032020", sig), true},
		{"leading zero, signed as the text", with("01796032020", textMAC), false},
		{"plus sign", with("+1796032020", sig), false},
		{"fractional seconds", with("1796032020.0", sig), false},
		{"empty signature list entry", with("1796032020", " "+sig), true},
		{"v1 with a third field", with("1796032020", sig+",x"), false},
		{"genuine bytes under another version", with("1796032020", "v2"+strings.TrimPrefix(sig, "v1")), false},
		{"version without a signature", with("1796032020", "v1,"), false},
		{"signature without a version", with("1796032020", strings.TrimPrefix(sig, "v1,")), false},
		{"empty timestamp", with("", sig), false},
		{"timestamp beyond int64", with("99999999999999999999", sig), false},
		{"no webhook-id", func() http.Header { h := good.Clone(); h.Del("webhook-id"); return h }(), false},
		{"no webhook-signature", func() http.Header { h := good.Clone(); h.Del("webhook-signature"); return h }(), false},
	} {
		_, err := v.Verify(c.h, []byte(body))
		if got := err == nil; got != c.ok {
			t.Errorf("%s: verified %v (%v), want %v", c.name, got, err, c.ok)
		}
		if err != nil && !errors.Is(err, inbox.ErrSignature) {
			t.Errorf("%s: %v does not match ErrSignature", c.name, err)
		}
	}
	if reencoded == sig {
		t.Fatal("the re-encoding did not change the text")
	}
	if b1, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(reencoded, "v1,")); !bytes.Equal(b1, mustDecode(t, strings.TrimPrefix(sig, "v1,"))) {
		t.Fatal("the re-encoded signature does not decode to the genuine bytes: the case tests nothing")
	}
}

func mustDecode(t *testing.T, s string) []byte {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestNewVerifierRejectsBadSecrets(t *testing.T) {
	t.Parallel()
	for _, tol := range []time.Duration{time.Second - 1, 24*time.Hour + 1, -time.Minute} {
		if _, err := inbox.NewVerifier([]string{secretA}, &inbox.VerifierOptions{Tolerance: tol}); !errors.Is(err, racefree.ErrInvalidInput) {
			t.Errorf("Tolerance %s: %v, want ErrInvalidInput", tol, err)
		}
	}
	for _, tol := range []time.Duration{time.Second, 24 * time.Hour} {
		if _, err := inbox.NewVerifier([]string{secretA}, &inbox.VerifierOptions{Tolerance: tol}); err != nil {
			t.Errorf("Tolerance %s: %v, want accepted", tol, err)
		}
	}
	for _, s := range [][]string{nil, {"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, {"whsec_not base64!"}, {"whsec_c2hvcnQ="}} {
		if _, err := inbox.NewVerifier(s, nil); !errors.Is(err, racefree.ErrInvalidInput) {
			t.Errorf("NewVerifier(%q): %v, want ErrInvalidInput", s, err)
		}
	}
}

func TestHandler(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		b := setup(t, db, nil)
		v, err := inbox.NewVerifier([]string{secretA}, nil)
		if err != nil {
			t.Fatal(err)
		}
		fail := map[string]error{"transient": errors.New("db down"), "permanent": inbox.Permanent(errors.New("unknown type"))}
		h := &inbox.Handler{Inbox: b.in, Source: "stripe", Verifier: v, MaxBody: 64,
			Process: func(ctx context.Context, tx *sql.Tx, d inbox.Delivery) error {
				if err := b.effect(ctx, d.ID)(tx); err != nil {
					return err
				}
				return fail[d.ID]
			}}
		post := func(hdr http.Header, body string) (int, string) {
			req := httptest.NewRequest("POST", "/", strings.NewReader(body))
			req.Header = hdr
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			raw, _ := io.ReadAll(rec.Body)
			// RFC 9110: a 401 carries a challenge, and only a 401 does.
			if got, want := rec.Header().Get("WWW-Authenticate"), map[bool]string{true: `Standard-Webhooks realm="stripe"`}[rec.Code == 401]; got != want {
				t.Errorf("%d with WWW-Authenticate %q, want %q", rec.Code, got, want)
			}
			return rec.Code, string(raw)
		}
		now := time.Now()
		for _, c := range []struct {
			name string
			hdr  http.Header
			body string
			want int
		}{
			{"new", signed(t, secretA, "e1", now, `{}`), `{}`, 204},
			{"duplicate", signed(t, secretA, "e1", now, `{}`), `{}`, 204},
			{"stale", signed(t, secretA, "e2", now.Add(-6*time.Minute), `{}`), `{}`, 401},
			{"bad signature", signed(t, secretB, "e2", now, `{}`), `{}`, 401},
			{"too large", signed(t, secretA, "e3", now, strings.Repeat("x", 65)), strings.Repeat("x", 65), 413},
			{"transient failure", signed(t, secretA, "transient", now, `{}`), `{}`, 500},
			{"permanent failure", signed(t, secretA, "permanent", now, `{}`), `{}`, 204},
			{"event ID longer than the inbox takes", signed(t, secretA, strings.Repeat("i", inbox.MaxEventIDLen+1), now, `{}`), `{}`, 400},
		} {
			if code, body := post(c.hdr, c.body); code != c.want {
				t.Errorf("%s: %d %s, want %d", c.name, code, body, c.want)
			} else if code >= 400 && !strings.Contains(body, `"urn:racefree:problem:`) {
				t.Errorf("%s: body %s is not a problem document", c.name, body)
			}
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		if rec.Code != 405 || rec.Header().Get("Allow") != "POST" {
			t.Errorf("GET: %d, Allow %q; want 405 with Allow: POST", rec.Code, rec.Header().Get("Allow"))
		}
		got := b.effects(t)
		if got["e1"] != 1 || got["e2"] != 0 || got["e3"] != 0 || got["transient"] != 0 || got["permanent"] != 0 {
			t.Fatalf("effects %v, want only e1 once", got)
		}
		// The transient failure left no record: its redelivery is processed.
		delete(fail, "transient")
		if code, body := post(signed(t, secretA, "transient", now, `{}`), `{}`); code != 204 || b.effects(t)["transient"] != 1 {
			t.Fatalf("redelivery after a transient failure: %d %s", code, body)
		}
	})
}
