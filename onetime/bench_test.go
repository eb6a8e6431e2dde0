package onetime_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/onetime"
)

// clients are the goroutines each benchmark runs with: one, and 8 (4 per
// CPU on a 2-CPU machine).
var clients = []struct {
	name        string
	parallelism int // per CPU; 0: one goroutine
}{{"1-client", 0}, {"8-clients", 4}}

// BenchmarkConsume measures redemptions per second, each of its own code
// (issued before the timer starts), on each engine.
func BenchmarkConsume(b *testing.B) {
	for _, engine := range testdb.Engines {
		for _, c := range clients {
			b.Run(engine+"/"+c.name, func(b *testing.B) {
				db := testdb.Open(b, testdb.NewDSN(b, engine), nil)
				s := newStore(b, db, nil)
				ctx := context.Background()
				codes := make([]string, b.N)
				for i := range codes {
					code, err := s.Issue(ctx, db, "login", "u", time.Hour)
					if err != nil {
						b.Fatal(err)
					}
					codes[i] = code.Token
				}
				var next atomic.Int64
				consume := func() {
					r, err := s.Consume(ctx, db, "login", codes[next.Add(1)-1])
					if err != nil || r.Outcome != onetime.Consumed {
						b.Errorf("%v %v", r.Outcome, err)
					}
				}
				b.ResetTimer()
				run(b, c.parallelism, consume)
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "consumes/s")
			})
		}
	}
}

// BenchmarkRotate measures rotations per second on each engine: one
// client rotating one family (each rotation presents the previous one's
// successor), or 8 clients each rotating a family of its own.
func BenchmarkRotate(b *testing.B) {
	for _, engine := range testdb.Engines {
		for _, c := range clients {
			b.Run(engine+"/"+c.name, func(b *testing.B) {
				db := testdb.Open(b, testdb.NewDSN(b, engine), nil)
				s := newStore(b, db, nil)
				ctx := context.Background()
				b.ResetTimer()
				run(b, c.parallelism, nil, func() func() {
					r, err := s.IssueRefresh(ctx, db, "u", time.Hour)
					if err != nil {
						b.Error(err) // in a goroutine of RunParallel: no Fatal
						return func() {}
					}
					tok := r.Token
					return func() {
						rot, err := s.Rotate(ctx, db, tok)
						if err != nil || rot.Outcome != onetime.Rotated {
							b.Errorf("%v %v", rot.Outcome, err)
							return
						}
						tok = rot.Next.Token
					}
				})
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rotations/s")
			})
		}
	}
}

// run calls op b.N times, from one goroutine or in parallel. With
// perClient, each goroutine gets an op of its own.
func run(b *testing.B, parallelism int, op func(), perClient ...func() func()) {
	mk := func() func() {
		if len(perClient) > 0 {
			return perClient[0]()
		}
		return op
	}
	if parallelism == 0 {
		f := mk()
		for range b.N {
			f()
		}
		return
	}
	b.SetParallelism(parallelism)
	b.RunParallel(func(pb *testing.PB) {
		f := mk()
		for pb.Next() {
			f()
		}
	})
}
