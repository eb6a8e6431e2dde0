package inbox

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/racefree/racefree"
)

// ErrSignature means a delivery's Standard Webhooks signature headers are
// missing, malformed, stale, or match none of the secrets. The concrete
// error says which.
var ErrSignature = errors.New("inbox: webhook signature rejected")

// DefaultTolerance is how far webhook-timestamp may be from the verifier's
// clock, either way.
const DefaultTolerance = 5 * time.Minute

// secretPrefix starts every Standard Webhooks secret.
const secretPrefix = "whsec_"

// VerifierOptions configures a Verifier. A nil *VerifierOptions means all
// defaults.
type VerifierOptions struct {
	// Tolerance is how far webhook-timestamp may be from now, either way.
	// Defaults to DefaultTolerance, 5 minutes.
	Tolerance time.Duration
	// Clock is the source of now. Defaults to the process clock: the
	// signature is checked before the database is involved.
	Clock racefree.Clock
}

// Verifier checks Standard Webhooks signatures
// (https://www.standardwebhooks.com): an HMAC-SHA256, keyed with a secret,
// over "<webhook-id>.<webhook-timestamp>.<body>", sent base64-encoded as
// "v1,<signature>" in webhook-signature, which may list several
// signatures separated by single spaces. A delivery passes when any signature matches
// any of the Verifier's secrets (several secrets allow rotation) and its
// timestamp is within the tolerance. Comparisons take constant time.
type Verifier struct {
	keys      [][]byte
	tolerance time.Duration
	clock     racefree.Clock
}

// NewVerifier returns a Verifier for secrets, each "whsec_" followed by
// the base64 of a key of at least 16 bytes. It does no I/O. It rejects an empty list, a
// secret without the prefix or with bad base64, and a bad tolerance, with
// [racefree.ErrInvalidInput].
func NewVerifier(secrets []string, opts *VerifierOptions) (*Verifier, error) {
	var o VerifierOptions
	if opts != nil {
		o = *opts
	}
	if len(secrets) == 0 {
		return nil, racefree.Invalid("secrets", "at least one is required")
	}
	v := &Verifier{tolerance: o.Tolerance, clock: o.Clock}
	switch {
	case v.tolerance == 0:
		v.tolerance = DefaultTolerance
	case v.tolerance < time.Second || v.tolerance > 24*time.Hour:
		return nil, racefree.Invalid("Tolerance", "must be between 1s and 24h, got %s", v.tolerance)
	}
	for i, s := range secrets {
		key, err := decodeSecret(s)
		if err != nil {
			return nil, racefree.Invalid(fmt.Sprintf("secrets[%d]", i), "%v", err)
		}
		v.keys = append(v.keys, key)
	}
	return v, nil
}

func decodeSecret(s string) ([]byte, error) {
	b64, ok := strings.CutPrefix(s, secretPrefix)
	if !ok {
		return nil, errors.New(`must start with "whsec_"`)
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, errors.New(`"whsec_" must be followed by base64`)
	}
	if len(key) < 16 {
		return nil, errors.New("the key must be at least 16 bytes")
	}
	return key, nil
}

// Verify checks the signature headers of a delivery against body and
// returns its webhook-id, the event ID. Any failure matches ErrSignature.
//
// It follows the Standard Webhooks reference libraries, and is stricter
// where they are lenient: webhook-signature is split on single spaces only
// (a TAB is not a separator); each entry is "v1," followed by the
// signature in canonical standard base64, compared as text (a re-encoding
// of a genuine signature with other padding bits is refused);
// webhook-timestamp must be decimal digits (no sign), is read as an integer
// and signed as that integer re-formatted, so "01796032020" is the time
// 1796032020 and the sender must have signed "1796032020".
func (v *Verifier) Verify(header http.Header, body []byte) (string, error) {
	id, ts, sigs := header.Get("webhook-id"), header.Get("webhook-timestamp"), header.Get("webhook-signature")
	if id == "" || ts == "" || sigs == "" {
		return "", fmt.Errorf("%w: webhook-id, webhook-timestamp and webhook-signature are required", ErrSignature)
	}
	sec, err := parseTimestamp(ts)
	if err != nil {
		return "", fmt.Errorf("%w: webhook-timestamp is not Unix seconds", ErrSignature)
	}
	now := time.Now()
	if v.clock != nil {
		now = v.clock.Now()
	}
	if d := now.Sub(time.Unix(sec, 0)).Abs(); d > v.tolerance {
		return "", fmt.Errorf("%w: webhook-timestamp is %s away from now, beyond the tolerance of %s", ErrSignature, d.Round(time.Second), v.tolerance)
	}
	var sent [][]byte
	for _, f := range strings.Split(sigs, " ") {
		version, b64, ok := strings.Cut(f, ",")
		if !ok || version != "v1" {
			continue
		}
		sent = append(sent, []byte(b64))
	}
	signed := strconv.FormatInt(sec, 10)
	match := false
	for _, key := range v.keys {
		want := []byte(base64.StdEncoding.EncodeToString(mac(key, id, signed, body)))
		for _, sig := range sent {
			// No early return: the time taken does not tell which matched.
			if hmac.Equal(sig, want) {
				match = true
			}
		}
	}
	if !match {
		return "", fmt.Errorf("%w: no v1 signature matches", ErrSignature)
	}
	return id, nil
}

// parseTimestamp reads webhook-timestamp: decimal digits only, as an int64.
func parseTimestamp(ts string) (int64, error) {
	for i := 0; i < len(ts); i++ {
		if ts[i] < '0' || ts[i] > '9' {
			return 0, errors.New("not decimal digits")
		}
	}
	return strconv.ParseInt(ts, 10, 64)
}

// Sign returns the webhook-signature value ("v1,<base64>") a sender with
// secret puts on a delivery of body with event ID id at time t. Senders and
// tests use it; webhook-timestamp is then strconv.FormatInt(t.Unix(), 10).
func Sign(secret, id string, t time.Time, body []byte) (string, error) {
	key, err := decodeSecret(secret)
	if err != nil {
		return "", racefree.Invalid("secret", "%v", err)
	}
	return "v1," + base64.StdEncoding.EncodeToString(mac(key, id, strconv.FormatInt(t.Unix(), 10), body)), nil
}

func mac(key []byte, id, ts string, body []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(id))
	h.Write([]byte{'.'})
	h.Write([]byte(ts))
	h.Write([]byte{'.'})
	h.Write(body)
	return h.Sum(nil)
}
