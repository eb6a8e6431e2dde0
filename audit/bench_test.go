package audit

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/cputime"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/internal/wire"
	"github.com/racefree/racefree/tenant"
)

// BenchmarkAppend measures appends per second from 16 goroutines, each
// append in its own transaction, to 1 scope and spread over 16, in three
// shapes, each on a database of its own: Append ("chained"); the previous
// release's shape on the same schema ("previous": the head row's upsert
// takes the number, then the insert's trigger writes the head again with
// the MAC); and that numbering with an unchained insert, no MAC and no
// trigger ("unchained"), the baseline the chain costs against. The shapes
// take turns of AUDIT_BENCH_TURN (default 500ms), AUDIT_BENCH_TURNS times
// (default 6), so that a shared machine's changing load weighs on all of
// them alike; run it with -benchtime 1x. It reports each shape's appends/s
// and chained/unchained and previous/unchained as percentages.
func BenchmarkAppend(b *testing.B) {
	turn, turns := 500*time.Millisecond, 6
	if v, err := time.ParseDuration(os.Getenv("AUDIT_BENCH_TURN")); err == nil {
		turn = v
	}
	if v, err := strconv.Atoi(os.Getenv("AUDIT_BENCH_TURNS")); err == nil {
		turns = v
	}
	modes := []string{"previous", "chained", "unchained"}
	for _, engine := range testdb.Engines {
		for _, scopes := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/scopes=%d", engine, scopes), func(b *testing.B) {
				ctx := context.Background()
				e := Entry{Actor: "alice", Action: "limit.raise", Subject: "account/7", Data: []byte(`{"to":500}`)}
				appenders := map[string]func(scope string) error{}
				for _, mode := range modes {
					db := testdb.Open(b, testdb.NewDSN(b, engine), nil)
					l := newLog(b, db, ring(b, "k1"))
					switch mode {
					case "chained":
						appenders[mode] = func(scope string) error { _, err := l.Append(ctx, db, scope, e); return err }
					case "previous":
						appenders[mode] = func(scope string) error {
							return l.inTx(ctx, db, func(tx *sql.Tx) error {
								_, err := l.appendShaped(ctx, tx, tenant.Default, scope, e, shapeUpsert)
								return err
							})
						}
					default:
						chainOff(b, db) // no MAC, and no trigger setting the head's MAC
						appenders[mode] = func(scope string) error {
							return db.InTx(ctx, func(tx *sql.Tx) error { return unchained(ctx, l, tx, scope, e) })
						}
					}
				}
				counts := map[string]int64{}
				spent := map[string]time.Duration{}
				for range b.N {
					for range turns {
						for _, mode := range modes {
							n, d := appendFor(b, turn, scopes, appenders[mode])
							counts[mode] += n
							spent[mode] += d
						}
					}
				}
				rate := func(mode string) float64 { return float64(counts[mode]) / spent[mode].Seconds() }
				for _, mode := range modes {
					b.ReportMetric(rate(mode), mode+"-appends/s")
				}
				b.ReportMetric(100*rate("chained")/rate("unchained"), "chained/unchained-%")
				b.ReportMetric(100*rate("previous")/rate("unchained"), "previous/unchained-%")
			})
		}
	}
}

// appendFor runs append from 16 goroutines, spread over scopes, for d and
// returns how many appends completed and how long they took.
func appendFor(b *testing.B, d time.Duration, scopes int, append func(scope string) error) (int64, time.Duration) {
	var (
		n    atomic.Int64
		wg   sync.WaitGroup
		stop atomic.Bool
	)
	start := time.Now()
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				if err := append("s" + strconv.Itoa(int(n.Add(1))%scopes)); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	time.Sleep(d) // the turn's length, not a wait for another goroutine's state
	stop.Store(true)
	wg.Wait()
	return n.Load(), time.Since(start)
}

// unchained numbers e as Append does and inserts it with a constant MAC,
// with the chaining trigger off.
func unchained(ctx context.Context, l *Log, tx *sql.Tx, scope string, e Entry) error {
	var (
		seq, at int64
		prev    []byte
		key     string
	)
	if err := tx.QueryRowContext(ctx, l.q.Get("next"), tenant.Default, scope, l.ring.current, wire.Of(l.db).ClockArg()).Scan(&seq, &prev, &key, &at); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, l.q.Get("insert"), tenant.Default, scope, seq, at, e.Actor, e.Action, e.Subject, e.Data, key, []byte{}, []byte{})
	return err
}

// BenchmarkVerify measures Verify's rows per second over one scope of
// AUDIT_BENCH_ROWS entries (default 100,000; docs/performance.md's figures use
// 1,000,000), written in bulk once before the timer starts: in one stream
// ("single", VerifyOptions.Streams 1) and in parallel parts ("parallel",
// the default: GOMAXPROCS streams), three rounds of each in turn on the
// same chain, so that a shared machine's changing load weighs on both.
func BenchmarkVerify(b *testing.B) {
	rows := 100_000
	if v := os.Getenv("AUDIT_BENCH_ROWS"); v != "" {
		rows, _ = strconv.Atoi(v)
	}
	for _, engine := range testdb.Engines {
		b.Run(fmt.Sprintf("%s/rows=%d", engine, rows), func(b *testing.B) {
			db := testdb.Open(b, testdb.NewDSN(b, engine), nil)
			l := newLog(b, db, ring(b, "k1"))
			bulkChain(b, l, "s", rows)
			ctx := context.Background()
			for range 3 {
				for _, mode := range []struct {
					name    string
					streams int
				}{{"single", 1}, {"parallel", 0}} {
					b.Run(mode.name, func(b *testing.B) {
						cpu := cputime.Process()
						for range b.N {
							res, err := l.Verify(ctx, "s", &VerifyOptions{Streams: mode.streams})
							if err != nil || res.Break != nil || res.Rows != int64(rows) {
								b.Fatalf("%+v %v", res, err)
							}
						}
						reportRows(b, rows, cpu)
					})
				}
			}
		})
	}
}

// reportRows reports rows per second of wall time and per second of the
// process's CPU time since cpu (which a loaded machine changes less, though
// it counts the database server's work only on SQLite).
func reportRows(b *testing.B, rows int, cpu time.Duration) {
	b.ReportMetric(float64(rows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	b.ReportMetric(float64(rows)*float64(b.N)/(cputime.Process()-cpu).Seconds(), "rows/cpu-s")
}

// bulkChain writes a valid chain of n entries to scope, 50 to an INSERT.
func bulkChain(b testing.TB, l *Log, scope string, n int) {
	b.Helper()
	ctx := context.Background()
	key, _ := l.ring.scopeKey(l.ring.current, scope)
	m := newMacer(key)
	prev := []byte{}
	chainOff(b, l.db) // the chaining trigger refuses rows ahead of the head
	const batch = 50
	ph := func(i int) string {
		if l.db.Engine() == racefree.Postgres {
			return "$" + strconv.Itoa(i)
		}
		return "?" + strconv.Itoa(i)
	}
	err := l.db.InTx(ctx, func(tx *sql.Tx) error {
		for start := 1; start <= n; start += batch {
			var (
				vals []string
				args []any
			)
			for seq := start; seq < start+batch && seq <= n; seq++ {
				in := entryInput{tenant.Default, scope, int64(seq), prev, 1_700_000_000_000 + int64(seq), "alice", "limit.raise", "account/7", []byte(`{"to":500}`)}
				mac := bytes.Clone(m.sum(&in))
				var p []string
				for _, a := range []any{tenant.Default, scope, in.seq, in.at, in.actor, in.action, in.subject, in.data, l.ring.current, prev, mac} {
					args = append(args, a)
					p = append(p, ph(len(args)))
				}
				vals = append(vals, "("+strings.Join(p, ", ")+")")
				prev = mac
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO racefree_audit (tenant, scope, seq, at, actor, action, subject, data, key_id, prev_mac, mac) VALUES `+strings.Join(vals, ", "), args...); err != nil {
				return err
			}
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO racefree_audit_heads (tenant, scope, last_seq, last_mac, key_id, cp_n, cp_hash) VALUES (`+ph(1)+`, `+ph(2)+`, `+ph(3)+`, `+ph(4)+`, `+ph(5)+`, 0, `+ph(6)+`)`,
			tenant.Default, scope, n, prev, l.ring.current, []byte{})
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
}

// chainOff removes the trigger that chains the head to each entry.
func chainOff(b testing.TB, db *racefree.DB) {
	b.Helper()
	q := `DROP TRIGGER racefree_audit_chain`
	if db.Engine() == racefree.Postgres {
		q = `ALTER TABLE racefree_audit DISABLE TRIGGER racefree_audit_chain`
	}
	if _, err := db.ExecContext(context.Background(), q); err != nil {
		b.Fatal(err)
	}
}
