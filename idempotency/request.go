package idempotency

import "net/http"

// ParseKey returns the Idempotency-Key of h, read exactly as Middleware
// reads it; present is false when h has none. Handlers that call DoTx
// themselves (racefree's own server routes) use it so that a key means the
// same on every route.
func ParseKey(h http.Header) (key string, present bool, err error) {
	raw, present := h[Header]
	if !present {
		return "", false, nil
	}
	key, err = parseKey(raw)
	return key, true, err
}

// RequestFingerprint returns the fingerprint Middleware gives r with body.
func RequestFingerprint(r *http.Request, body []byte) string { return requestFingerprint(r, body) }

// DefaultScope returns the scope Middleware gives r by default.
func DefaultScope(r *http.Request) string { return defaultScope(r) }
