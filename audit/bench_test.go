package audit

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testdb"
	"github.com/racefree/racefree/tenant"
)

// BenchmarkAppend measures appends per second from 8 goroutines per CPU,
// each in its own transaction, to 1 scope and spread over 16: Append, and
// the same numbering (the head row's upsert) with an unchained insert, no
// MAC and no head update, as the baseline the chain costs against.
func BenchmarkAppend(b *testing.B) {
	for _, engine := range testdb.Engines {
		for _, scopes := range []int{1, 16} {
			for _, mode := range []string{"chained", "unchained"} {
				b.Run(fmt.Sprintf("%s/scopes=%d/%s", engine, scopes, mode), func(b *testing.B) {
					db := testdb.Open(b, testdb.NewDSN(b, engine), nil)
					l := newLog(b, db, ring(b, "k1"))
					if mode == "unchained" {
						chainOff(b, db) // no MAC, and no trigger setting the head's MAC
					}
					ctx := context.Background()
					e := Entry{Actor: "alice", Action: "limit.raise", Subject: "account/7", Data: []byte(`{"to":500}`)}
					var next atomic.Int64
					b.SetParallelism(8)
					b.ResetTimer()
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							scope := "s" + strconv.Itoa(int(next.Add(1))%scopes)
							var err error
							if mode == "chained" {
								_, err = l.Append(ctx, db, scope, e)
							} else {
								err = db.InTx(ctx, func(tx *sql.Tx) error { return unchained(ctx, l, tx, scope, e) })
							}
							if err != nil {
								b.Error(err)
								return
							}
						}
					})
					b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "appends/s")
				})
			}
		}
	}
}

// unchained numbers e as Append does and inserts it with a constant MAC,
// with the chaining trigger off.
func unchained(ctx context.Context, l *Log, tx *sql.Tx, scope string, e Entry) error {
	var (
		seq, at int64
		prev    []byte
		key     string
	)
	if err := tx.QueryRowContext(ctx, l.q.Get("next"), tenant.Default, scope, l.ring.current, l.db.ClockArg()).Scan(&seq, &prev, &key, &at); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, l.q.Get("insert"), tenant.Default, scope, seq, at, e.Actor, e.Action, e.Subject, e.Data, key, []byte{}, []byte{})
	return err
}

// BenchmarkVerify measures Verify's rows per second over one scope of
// AUDIT_BENCH_ROWS entries (default 100,000; the README's figures use
// 1,000,000), written in bulk once before the timer starts.
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
			b.ResetTimer()
			for range b.N {
				res, err := l.Verify(context.Background(), "s", nil)
				if err != nil || res.Break != nil || res.Rows != int64(rows) {
					b.Fatalf("%+v %v", res, err)
				}
			}
			b.ReportMetric(float64(rows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}

// bulkChain writes a valid chain of n entries to scope, 50 to an INSERT.
func bulkChain(b *testing.B, l *Log, scope string, n int) {
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
func chainOff(b *testing.B, db *racefree.DB) {
	b.Helper()
	q := `DROP TRIGGER racefree_audit_chain`
	if db.Engine() == racefree.Postgres {
		q = `ALTER TABLE racefree_audit DISABLE TRIGGER racefree_audit_chain`
	}
	if _, err := db.ExecContext(context.Background(), q); err != nil {
		b.Fatal(err)
	}
}
