package audit

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"testing"
)

// TestScopeKeysAreDerivedPerScope proves that each scope's HMAC key is
// HKDF-SHA256 (RFC 5869, no salt) of the keyring's mac key with the scope
// in the info, computed here by hand from HMAC: a key of one scope is not
// the mac key and says nothing about another scope's.
func TestScopeKeysAreDerivedPerScope(t *testing.T) {
	secret := bytes.Repeat([]byte{7}, 32)
	ring, err := ParseKeyring("mac k1 " + base64.StdEncoding.EncodeToString(secret))
	if err != nil {
		t.Fatal(err)
	}
	hkdf := func(info string) []byte {
		extract := hmac.New(sha256.New, make([]byte, sha256.Size)) // no salt: HashLen zeros
		extract.Write(secret)
		expand := hmac.New(sha256.New, extract.Sum(nil))
		expand.Write([]byte(info))
		expand.Write([]byte{1})
		return expand.Sum(nil)
	}
	keys := map[string][]byte{}
	for _, scope := range []string{"s", "t", "orders"} {
		got, ok := ring.scopeKey("k1", scope)
		if !ok {
			t.Fatalf("scopeKey(k1, %q): no key", scope)
		}
		if want := hkdf("racefree audit v1 scope " + scope); !bytes.Equal(got, want) {
			t.Errorf("scope %q: key %x, want HKDF-SHA256(mac key, info %q) = %x", scope, got, "racefree audit v1 scope "+scope, want)
		}
		if bytes.Equal(got, secret) {
			t.Errorf("scope %q: the scope key is the mac key itself", scope)
		}
		for other, k := range keys {
			if bytes.Equal(k, got) {
				t.Errorf("scopes %q and %q share a key", other, scope)
			}
		}
		keys[scope] = got
	}
	if _, ok := ring.scopeKey("k2", "s"); ok {
		t.Error("scopeKey(k2): a key the keyring lacks was derived")
	}
}
