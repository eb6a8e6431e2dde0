package onetime_test

import (
	"context"
	"testing"
	"time"

	"github.com/racefree/racefree/internal/testdb"
	"github.com/racefree/racefree/onetime"
)

// BenchmarkConsume measures redemptions per second, each of its own code
// (issued before the timer starts), from one goroutine, on each engine.
func BenchmarkConsume(b *testing.B) {
	for _, engine := range testdb.Engines {
		b.Run(engine, func(b *testing.B) {
			db := testdb.Open(b, testdb.NewDSN(b, engine), nil)
			s := newStore(b, db, nil)
			ctx := context.Background()
			codes := make([]string, b.N)
			for i := range codes {
				c, err := s.Issue(ctx, db, "login", "u", time.Hour)
				if err != nil {
					b.Fatal(err)
				}
				codes[i] = c.Token
			}
			b.ResetTimer()
			for i := range b.N {
				r, err := s.Consume(ctx, db, "login", codes[i])
				if err != nil || r.Outcome != onetime.Consumed {
					b.Fatalf("%v %v", r.Outcome, err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "consumes/s")
		})
	}
}

// BenchmarkRotate measures rotations per second along one family (each
// rotation presents the previous one's successor), from one goroutine, on
// each engine.
func BenchmarkRotate(b *testing.B) {
	for _, engine := range testdb.Engines {
		b.Run(engine, func(b *testing.B) {
			db := testdb.Open(b, testdb.NewDSN(b, engine), nil)
			s := newStore(b, db, nil)
			ctx := context.Background()
			r, err := s.IssueRefresh(ctx, db, "u", time.Hour)
			if err != nil {
				b.Fatal(err)
			}
			tok := r.Token
			b.ResetTimer()
			for range b.N {
				rot, err := s.Rotate(ctx, db, tok)
				if err != nil || rot.Outcome != onetime.Rotated {
					b.Fatalf("%v %v", rot.Outcome, err)
				}
				tok = rot.Next.Token
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rotations/s")
		})
	}
}
