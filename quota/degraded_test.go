package quota_test

import (
	"context"
	"database/sql"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/quota"
)

// lostReply is an executor whose charge statements run to their commit
// and whose replies are lost: the caller sees its deadline pass, as when
// a connection is cut after the commit or a timeout fires while the reply
// is on its way. Other statements pass through.
type lostReply struct{ *racefree.DB }

func (e lostReply) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if !strings.Contains(query, "INSERT INTO racefree_quotas") {
		return e.DB.QueryContext(ctx, query, args...)
	}
	if rows, err := e.DB.QueryContext(ctx, query, args...); err == nil {
		for rows.Next() {
		}
		rows.Close()
	}
	expired, cancel := context.WithDeadline(context.Background(), time.Unix(0, 0))
	defer cancel()
	return e.DB.QueryContext(expired, `SELECT 1`)
}

func (e lostReply) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if !strings.Contains(query, "INSERT INTO racefree_quotas") {
		return e.DB.QueryRowContext(ctx, query, args...)
	}
	if rows, err := e.DB.QueryContext(ctx, query, args...); err == nil {
		for rows.Next() {
		}
		rows.Close()
	}
	expired, cancel := context.WithDeadline(context.Background(), time.Unix(0, 0))
	defer cancel()
	return e.DB.QueryRowContext(expired, `SELECT 1`)
}

// TestADegradedDecisionMayHaveCharged: a charge whose reply was lost is
// Degraded, under FailClosed (denied, ErrUnavailable) and FailOpen
// (admitted) alike, and its units were charged: a degraded decision says
// the outcome is unknown, not that nothing was charged.
func TestADegradedDecisionMayHaveCharged(t *testing.T) {
	t.Parallel()
	eachOnAClock(t, func(t *testing.T, db *racefree.DB, l *quota.Limiter, clock *racefree.ManualClock) {
		ctx := context.Background()
		open := gcra
		open.OnUnavailable = quota.FailOpen
		d, err := l.Consume(ctx, lostReply{db}, "k", 2, gcra)
		if !errors.Is(err, racefree.ErrUnavailable) || d.Allowed || !d.Degraded {
			t.Fatalf("fail closed, reply lost: %+v, %v; want denied, Degraded, ErrUnavailable", d, err)
		}
		if d, err = l.Consume(ctx, lostReply{db}, "k", 2, open); err != nil || !d.Allowed || !d.Degraded {
			t.Fatalf("fail open, reply lost: %+v, %v; want admitted, Degraded", d, err)
		}
		if d := consume(t, l, db, "k", 1, gcra); !d.Allowed || d.Remaining != 0 {
			t.Fatalf("after two degraded charges of 2 whose replies were lost: %+v; want the 4 units charged, 0 remaining", d)
		}
	})
}

// TestDegradedDocsSayTheChargeMayHaveBeenMade: the doc comments of
// FailClosed, FailOpen and Decision.Degraded say that a degraded charge
// may have been charged, and none promises that nothing was.
func TestDegradedDocsSayTheChargeMayHaveBeenMade(t *testing.T) {
	t.Parallel()
	f, err := parser.ParseFile(token.NewFileSet(), "quota.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	docs := map[string]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.ValueSpec:
			for _, id := range n.Names {
				docs[id.Name] = n.Doc.Text()
			}
		case *ast.Field:
			for _, id := range n.Names {
				docs[id.Name] = n.Doc.Text()
			}
		}
		return true
	})
	for _, name := range []string{"FailClosed", "FailOpen", "Degraded"} {
		doc := strings.Join(strings.Fields(docs[name]), " ")
		if !strings.Contains(doc, "may have been charged") {
			t.Errorf("the doc of %s does not say a degraded charge may have been charged: %q", name, doc)
		}
		for _, promise := range []string{"Nothing is charged", "nothing was charged", "charge nothing", "nothing charged"} {
			if strings.Contains(doc, promise) {
				t.Errorf("the doc of %s promises %q: %q", name, promise, doc)
			}
		}
	}
}
