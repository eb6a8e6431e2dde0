package reliability

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/racefree/racefree/audit"
	"github.com/racefree/racefree/inbox"
	"github.com/racefree/racefree/internal/testing/testdb"
)

const (
	webhookSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	quotaRate     = 25
	leaseKeys     = 3
	leaseTTLMs    = 150
	// quotaWindowMs is the longest window (366 days): windows are aligned
	// to the epoch, and one that rolled over during a run would admit a
	// second limit's worth.
	quotaWindowMs = 366 * 24 * 3600 * 1000
)

// keyringText is an audit keyring with one fresh MAC key.
func keyringText() string {
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	return "mac k1 " + base64.StdEncoding.EncodeToString(key) + "\n"
}

// auditKeyring writes a fresh keyring file and returns the serve flag that
// loads it.
func auditKeyring(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "audit.keys")
	if err := os.WriteFile(path, []byte(keyringText()), 0o600); err != nil {
		t.Fatal(err)
	}
	return "--audit-keys=" + path
}

// testKeyring returns a fresh keyring, for a server in the test's process.
func testKeyring(t testing.TB) *audit.Keyring {
	t.Helper()
	k, err := audit.ParseKeyring(keyringText())
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// claimAck is one acknowledged acquire of a lease.
type claimAck struct {
	key, holder string
	fence       int64
	sent, acked time.Time
}

// ledger is the log of every acknowledged answer of a load run.
type ledger struct {
	mu           sync.Mutex
	ops          int
	claims       []claimAck
	seqs         []int64
	quotaAllowed int
	quotaDenied  int
	outbox       map[int64]bool
	processed    map[string]int // fingerprint → answers with process: true
	inboxAcked   map[string]bool
	auditSeqs    []int64
	unexpected   []string
}

func newLedger() *ledger {
	return &ledger{outbox: map[int64]bool{}, processed: map[string]int{}, inboxAcked: map[string]bool{}}
}

func (l *ledger) oddity(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.unexpected = append(l.unexpected, fmt.Sprintf(format, args...))
}

// load is the workload: one operation of every primitive in turn, each
// sent with its own Idempotency-Key (a webhook with its own webhook-id)
// and retried until its answer is definitive, so that an operation whose
// reply a kill lost is settled by its retry.
func load(t testing.TB, in *instance, l *ledger, client, i int) {
	key := fmt.Sprintf("c%d-op%d", client, i)
	holder := fmt.Sprintf("client-%d", client)
	switch i % 7 {
	case 0:
		lease := fmt.Sprintf("lease-%d", i/7%leaseKeys)
		sent := time.Now()
		a := settle(t, "POST", in.url("/v1/claims/"+lease), fmt.Sprintf(`{"holder":%q,"ttl_ms":%d}`, holder, leaseTTLMs), key)
		switch {
		case a.code == 200:
			l.mu.Lock()
			l.claims = append(l.claims, claimAck{lease, holder, a.int("fence"), sent, time.Now()})
			l.mu.Unlock()
		case a.problem() != "held":
			l.oddity("acquire %s: %d %v", lease, a.code, a.body)
		}
	case 1:
		a := settle(t, "POST", in.url("/v1/sequences/acme/invoice/next"), `{"n":1}`, key)
		if a.code != 200 {
			l.oddity("sequence next: %d %v", a.code, a.body)
			return
		}
		l.mu.Lock()
		l.seqs = append(l.seqs, a.int("first"))
		l.mu.Unlock()
	case 2:
		a := settle(t, "POST", in.url("/v1/quotas/plan/consume"), fmt.Sprintf(`{"n":1,"policy":{"kind":"window","rate":%d,"per_ms":%d}}`, quotaRate, quotaWindowMs), key)
		l.mu.Lock()
		switch {
		case a.code == 200:
			l.quotaAllowed++
		case a.code == 429:
			l.quotaDenied++
		default:
			l.unexpected = append(l.unexpected, fmt.Sprintf("quota consume: %d %v", a.code, a.body))
		}
		l.mu.Unlock()
	case 3:
		a := settle(t, "POST", in.url("/v1/outbox"), fmt.Sprintf(`{"topic":"orders","key":%q,"payload":{"op":%q}}`, holder, key), key)
		if a.code != 200 {
			l.oddity("outbox enqueue: %d %v", a.code, a.body)
			return
		}
		l.mu.Lock()
		l.outbox[a.int("id")] = true
		l.mu.Unlock()
	case 4:
		fp := fmt.Sprintf("fp-%d", i/7%5)
		a := settle(t, "POST", in.url("/v1/events"), fmt.Sprintf(`{"source":"api","level":"error","message":"m","fingerprint":%q,"window_ms":3600000}`, fp), key)
		if a.code != 200 {
			l.oddity("observe: %d %v", a.code, a.body)
			return
		}
		if a.body["process"] == true {
			l.mu.Lock()
			l.processed[fp]++
			l.mu.Unlock()
		}
	case 5:
		// Each webhook is delivered twice, as senders redeliver.
		id := "evt_" + key
		body := fmt.Sprintf(`{"type":"invoice.paid","op":%q}`, key)
		for range 2 {
			now := time.Now()
			sig, err := inbox.Sign(webhookSecret, id, now, []byte(body))
			if err != nil {
				t.Error(err)
				return
			}
			a := settle(t, "POST", in.url("/v1/inbox/billing"), body, "",
				"webhook-id", id, "webhook-timestamp", strconv.FormatInt(now.Unix(), 10), "webhook-signature", sig)
			if a.code/100 != 2 {
				l.oddity("webhook %s: %d %v", id, a.code, a.body)
				return
			}
		}
		l.mu.Lock()
		l.inboxAcked[id] = true
		l.mu.Unlock()
	case 6:
		a := settle(t, "POST", in.url("/v1/audit"), fmt.Sprintf(`{"scope":"ledger","actor":%q,"action":"op","subject":%q}`, holder, key), key)
		if a.code != 200 {
			l.oddity("audit append: %d %v", a.code, a.body)
			return
		}
		l.mu.Lock()
		l.auditSeqs = append(l.auditSeqs, a.int("seq"))
		l.mu.Unlock()
	}
	l.mu.Lock()
	l.ops++
	l.mu.Unlock()
}

// TestKilledServerLosesNothing drives every primitive from several clients
// while the server is SIGKILLed at random moments and restarted, then
// checks every acknowledged answer against the others and against the
// database: nothing acknowledged is lost, no invariant broke, and a lease
// whose server died is free again once its TTL has passed.
func TestKilledServerLosesNothing(t *testing.T) {
	t.Parallel()
	clients, kills := 4, testdb.Scale(3, 40)
	testdb.EachDSN(t, func(t *testing.T, dsn string) {
		in := startServe(t, dsn, "--inbox-secret", "billing="+webhookSecret, auditKeyring(t))
		l := newLedger()
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						if i >= 14 { // every operation ran at least twice
							return
						}
					default:
					}
					load(t, in, l, c, i)
				}
			}()
		}
		start := time.Now()
		for range kills {
			time.Sleep(time.Duration(50+mrand.IntN(250)) * time.Millisecond) // a random moment under load
			in.kill()
			in.start()
		}
		// A lease whose holder's server died mid-tenure: held until its
		// TTL runs out, then won again by another holder.
		doomed := settle(t, "POST", in.url("/v1/claims/orphan"), `{"holder":"doomed","ttl_ms":300}`, "orphan")
		in.kill()
		in.start()
		expires, err := time.Parse(time.RFC3339Nano, fmt.Sprint(doomed.body["expires_at"]))
		if err != nil || doomed.code != 200 {
			t.Fatalf("orphan acquire: %d %v %v", doomed.code, doomed.body, err)
		}
		var heirAt time.Time
		for deadline := time.Now().Add(10 * time.Second); ; {
			a := call(context.Background(), "POST", in.url("/v1/claims/orphan"), `{"holder":"heir","ttl_ms":60000}`)
			if a.code == 200 {
				heirAt = time.Now()
				if a.int("fence") != doomed.int("fence")+1 {
					t.Errorf("heir's fence %d after the doomed holder's %d", a.int("fence"), doomed.int("fence"))
				}
				break
			}
			if a.code != 409 || time.Now().After(deadline) {
				t.Fatalf("orphan lease not recovered: %d %v %v", a.code, a.body, a.err)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if heirAt.Before(expires) {
			t.Errorf("heir took the lease at %v, before it expired at %v", heirAt, expires)
		}
		// The lease is free at its expiry; what comes after is this
		// poll's own lateness (10 ms apart, each a request to a restarted
		// server on a machine the whole suite shares), so the bound is
		// loose: a lease that waited for a reaper or a second TTL would
		// still be seconds past it.
		if late := heirAt.Sub(expires); late > 5*time.Second {
			t.Errorf("lease recovered %v after its TTL, want within 5s", late)
		}
		close(stop)
		wg.Wait()
		t.Logf("%d operations acknowledged in %v across %d kills; orphan lease recovered %v after its expiry",
			l.ops, time.Since(start).Round(time.Millisecond), kills+1, heirAt.Sub(expires).Round(time.Millisecond))
		checkLedger(t, in, dsn, l)
	})
}

// checkLedger checks the acknowledged answers against each other and
// against what the restarted server and its database hold.
func checkLedger(t *testing.T, in *instance, dsn string, l *ledger) {
	t.Helper()
	for _, u := range l.unexpected {
		t.Errorf("unexpected answer: %s", u)
	}
	ctx := context.Background()

	// Claims: one holder per fence, fences never go backwards.
	byFence := map[string]string{}
	maxFence := map[string]int64{}
	for _, a := range l.claims {
		fk := fmt.Sprintf("%s#%d", a.key, a.fence)
		if h, ok := byFence[fk]; ok && h != a.holder {
			t.Errorf("%s fence %d acknowledged to %s and to %s", a.key, a.fence, h, a.holder)
		}
		byFence[fk] = a.holder
		maxFence[a.key] = max(maxFence[a.key], a.fence)
		for _, b := range l.claims {
			if b.key == a.key && b.sent.After(a.acked) && b.fence < a.fence {
				t.Errorf("%s: fence went backwards: %d acknowledged, then %d", a.key, a.fence, b.fence)
			}
		}
	}
	for key, f := range maxFence {
		a := call(ctx, "GET", in.url("/v1/claims/"+key), "")
		if a.code != 200 || a.int("fence") < f {
			t.Errorf("claim %s at the end: %d %v; want fence >= %d", key, a.code, a.body, f)
		}
	}

	// Sequences: the acknowledged numbers are exactly 1..n, and the next
	// one is n+1.
	sort.Slice(l.seqs, func(i, j int) bool { return l.seqs[i] < l.seqs[j] })
	for i, n := range l.seqs {
		if n != int64(i+1) {
			t.Errorf("acknowledged sequence numbers %v: want 1..%d with no duplicate or gap", l.seqs, len(l.seqs))
			break
		}
	}
	if a := settle(t, "POST", in.url("/v1/sequences/acme/invoice/next"), `{"n":1}`, "final"); a.int("first") != int64(len(l.seqs)+1) {
		t.Errorf("next number after %d acknowledged: %d %v", len(l.seqs), a.code, a.body)
	}

	// Quota: no over-admission, and no charge lost or counted twice.
	if want := min(quotaRate, l.quotaAllowed+l.quotaDenied); l.quotaAllowed != want {
		t.Errorf("quota: %d charges allowed, %d denied; want exactly %d allowed", l.quotaAllowed, l.quotaDenied, want)
	}

	// Events: each fingerprint processed once.
	for fp, n := range l.processed {
		if n != 1 {
			t.Errorf("fingerprint %s processed %d times", fp, n)
		}
	}

	db := testdb.Open(t, dsn, nil)
	// Outbox: every acknowledged message is stored, and nothing else.
	var stored int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM racefree_outbox`).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if stored != len(l.outbox) {
		t.Errorf("outbox holds %d messages, %d acknowledged", stored, len(l.outbox))
	}
	for id := range l.outbox {
		var n int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM racefree_outbox WHERE id = $1`, id).Scan(&n); err != nil || n != 1 {
			t.Errorf("acknowledged outbox message %d: %d rows, %v", id, n, err)
		}
	}

	// Inbox: each acknowledged webhook once, numbered without gaps.
	a := call(ctx, "GET", in.url("/v1/inbox/billing?limit=1000"), "")
	events, _ := a.body["events"].([]any)
	seen := map[string]bool{}
	for i, e := range events {
		ev, _ := e.(map[string]any)
		id, _ := ev["id"].(string)
		if seen[id] {
			t.Errorf("webhook %s received twice", id)
		}
		seen[id] = true
		if s, _ := ev["seq"].(float64); int(s) != i+1 {
			t.Errorf("webhook %s has seq %v at position %d", id, ev["seq"], i+1)
		}
	}
	for id := range l.inboxAcked {
		if !seen[id] {
			t.Errorf("acknowledged webhook %s is missing", id)
		}
	}

	// Audit: the acknowledged entries are 1..n, all listed, and the chain
	// verifies.
	sort.Slice(l.auditSeqs, func(i, j int) bool { return l.auditSeqs[i] < l.auditSeqs[j] })
	for i, n := range l.auditSeqs {
		if n != int64(i+1) {
			t.Errorf("acknowledged audit entries %v: want 1..%d", l.auditSeqs, len(l.auditSeqs))
			break
		}
	}
	if a := call(ctx, "GET", in.url("/v1/audit?scope=ledger&limit=1000"), ""); len(a.body["entries"].([]any)) != len(l.auditSeqs) {
		t.Errorf("audit lists %d entries, %d acknowledged", len(a.body["entries"].([]any)), len(l.auditSeqs))
	}
	if a := call(ctx, "GET", in.url("/v1/audit/verify?scope=ledger"), ""); a.code != 200 || a.body["intact"] != true {
		t.Errorf("audit verify at the end: %d %v", a.code, a.body)
	}
}
