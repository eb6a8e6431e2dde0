package server

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"
	"time"
)

// TestSessionSeal: a session cookie opens to its credential until its
// expiry and not from then on; a cookie changed in any byte, or sealed
// under another secret, never opens; the CSRF token differs per session.
func TestSessionSeal(t *testing.T) {
	t.Parallel()
	d := newDashboard(bytes.Repeat([]byte{1}, 32))
	now := time.Now()
	c := d.seal("rfk_key", now.Add(time.Hour))
	if strings.Contains(c, "rfk_key") {
		t.Fatalf("the cookie %q holds the key in clear", c)
	}
	if got, ok := d.open(c, now); !ok || got != "rfk_key" {
		t.Fatalf("open before expiry: %q, %v", got, ok)
	}
	if _, ok := d.open(c, now.Add(time.Hour)); ok {
		t.Fatal("a session opened at its expiry")
	}
	if _, ok := d.open(d.seal("rfk_key", now.Add(-time.Millisecond)), now); ok {
		t.Fatal("an expired session opened")
	}
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		t.Fatal(err)
	}
	for i := range raw {
		b := bytes.Clone(raw)
		b[i] ^= 1
		if _, ok := d.open(base64.RawURLEncoding.EncodeToString(b), now); ok {
			t.Fatalf("a cookie changed at byte %d opened", i)
		}
	}
	if _, ok := newDashboard(bytes.Repeat([]byte{2}, 32)).open(c, now); ok {
		t.Fatal("a cookie opened under another secret")
	}
	if d.csrf(c) == d.csrf(d.seal("rfk_key", now.Add(time.Hour))) {
		t.Fatal("two sessions share a CSRF token")
	}
}
