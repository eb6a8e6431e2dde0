package server

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/racefree/racefree/claim"
)

// claimFields is the struct encoding/json writes a claim answer from: the
// reference claimJSON must write byte for byte.
type claimFields struct {
	Key       string `json:"key"`
	Holder    string `json:"holder"`
	Fence     int64  `json:"fence"`
	ClaimedAt string `json:"claimed_at"`
	ExpiresAt string `json:"expires_at"`
	Live      bool   `json:"live"`
	Count     int64  `json:"count"`
	FirstSeen string `json:"first_seen"`
	LastSeen  string `json:"last_seen"`
}

// TestClaimJSONIsWhatEncodingJSONWrites checks that a claim answer, as
// writeJSON sends it and as an Idempotency-Key stores it (json.Marshal),
// is byte for byte what encoding/json writes for the struct of its fields
// with formatTime's times: text that must be escaped (quotes, backslashes,
// control characters, <, > and &, U+2028, invalid UTF-8) and text that
// need not (multi-byte UTF-8, DEL excepted), zero times and times in other
// zones, integers at their bounds.
func TestClaimJSONIsWhatEncodingJSONWrites(t *testing.T) {
	t.Parallel()
	texts := []string{"", "w", "k/1", "a b", "é😀", "<&>", `"`, `\`, "\n\t\r\b\f", "\x00\x01\x1f", "\x7f", "\u2028\u2029",
		"a<b", "a>b", "a&b", "\xff", "\xc3", "a\xc3(b", "~!#$%^*()_+={}[]|:;',.?/`", "</script>"}
	zone := time.FixedZone("x", -5*3600-30*60)
	times := []time.Time{{}, time.UnixMilli(1_700_000_000_123), time.UnixMilli(1).In(zone), time.Date(9999, 12, 31, 23, 59, 59, 999_999_999, time.UTC)}
	ints := []int64{0, 1, -1, 1<<63 - 1, -1 << 63}
	n := 0
	for i, key := range texts {
		for j, holder := range texts {
			c := &claim.Claim{Key: key, Holder: holder, Fence: ints[(i+j)%len(ints)], Count: ints[(i*3+j)%len(ints)], Live: (i+j)%2 == 0,
				ClaimedAt: times[i%len(times)], ExpiresAt: times[j%len(times)], FirstSeen: times[(i+j)%len(times)], LastSeen: times[(i+2*j)%len(times)]}
			ref := claimFields{Key: c.Key, Holder: c.Holder, Fence: c.Fence, ClaimedAt: formatTime(c.ClaimedAt), ExpiresAt: formatTime(c.ExpiresAt),
				Live: c.Live, Count: c.Count, FirstSeen: formatTime(c.FirstSeen), LastSeen: formatTime(c.LastSeen)}
			var want bytes.Buffer
			if err := json.NewEncoder(&want).Encode(ref); err != nil {
				t.Fatal(err)
			}
			rec := httptest.NewRecorder()
			writeJSON(rec, 200, toClaimJSON(c))
			if got := rec.Body.String(); got != want.String() {
				t.Fatalf("writeJSON of %+v:\n got %q\nwant %q", ref, got, want.String())
			}
			stored, err := json.Marshal(toClaimJSON(c))
			if want := bytes.TrimSuffix(want.Bytes(), []byte("\n")); err != nil || !bytes.Equal(stored, want) {
				t.Fatalf("json.Marshal of %+v: %q, %v\nwant %q", ref, stored, err, want)
			}
			n++
		}
	}
	t.Logf("%d claims", n)
}
