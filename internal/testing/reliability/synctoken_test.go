package reliability

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree/onetime"
)

// TestTokenAnswersWaitForTheSynchronousStandby: a one-time code or a
// refresh token is refused (or a rotation replayed) only on the strength
// of a commit that is on the synchronous standby (invariant 15), on a
// primary with a synchronous standby (testdb.NewCluster,
// synchronous_standby_names = '*'). A redemption, a revocation of codes,
// a rotation and a revocation of families each COMMIT while the standby
// is gone; the wait ends without it (the backend terminated, as a fast
// shutdown of an old primary terminates every backend), and each is
// committed on the primary alone.
//
// The calls that read those rows must not answer then: "already used"
// or "revoked" about a change a failover loses lets the token work again
// after it, and a replayed successor would not exist. Consume's refusal
// locks the code (onetime/sql/postgres/durable_code.sql), alone and in
// the caller's transaction, Rotate's refusal the family
// (durable_refresh.sql), and a grace-window retry rewrites the family in
// reuse's UPDATE, so each COMMIT waits for the standby past the change it
// reports: each is seen waiting (SyncRep) instead of answering. Once the
// standby is back each answers, and after a failover to that standby
// every change is there. Without the locks (mutants 978, 979, 980) the
// refusals answer at once.
func TestTokenAnswersWaitForTheSynchronousStandby(t *testing.T) {
	c, p := syncCluster(t)
	db := c.Primary.Open(t, nil)
	st, err := onetime.New(db, &onetime.Options{Grace: 10 * time.Minute, Secret: []byte(strings.Repeat("s", onetime.MinSecretBytes))})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	issue := func(subject string) string {
		code, err := st.Issue(ctx, db, "login", subject, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return code.Token
	}
	family := func(subject string) string {
		r, err := st.IssueRefresh(ctx, db, subject, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return r.Token
	}
	used, usedInTx, revoked := issue("used"), issue("used in tx"), issue("revoked")
	rotated, revokedFamily := family("rotated"), family("revoked")
	c.WaitStreaming(t)
	c.Standby.Stop(t)

	type result struct {
		outcome onetime.Outcome
		err     error
	}
	consume := func(token string) func(context.Context) (onetime.Outcome, error) {
		return func(ctx context.Context) (onetime.Outcome, error) {
			r, err := st.Consume(ctx, db, "login", token)
			return r.Outcome, err
		}
	}
	rotate := func(token string) func(context.Context) (onetime.Outcome, error) {
		return func(ctx context.Context) (onetime.Outcome, error) {
			r, err := st.Rotate(ctx, db, token)
			return r.Outcome, err
		}
	}
	run := func(op func(context.Context) (onetime.Outcome, error)) <-chan result {
		out := make(chan result, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			o, err := op(ctx)
			out <- result{o, err}
		}()
		return out
	}
	firsts := []<-chan result{
		run(consume(used)),
		run(consume(usedInTx)),
		run(func(ctx context.Context) (onetime.Outcome, error) {
			_, err := st.RevokeCodes(ctx, db, "login", "revoked")
			return 0, err
		}),
		run(rotate(rotated)),
		run(func(ctx context.Context) (onetime.Outcome, error) {
			_, err := st.RevokeFamilies(ctx, db, "revoked")
			return 0, err
		}),
	}
	// End the first calls' waits for the standby until each change is
	// committed on the primary alone.
	const changes = `(SELECT count(*) FROM racefree_onetime_codes WHERE used_at IS NOT NULL) = 2
		AND (SELECT count(*) FROM racefree_onetime_codes WHERE revoked_at IS NOT NULL) = 1
		AND (SELECT count(*) FROM racefree_refresh_families WHERE generation = 2) = 1
		AND (SELECT count(*) FROM racefree_refresh_families WHERE revoked_at IS NOT NULL) = 1`
	waitRow(t, p, `SELECT count(pg_terminate_backend(pid)) >= 0 AND `+changes+`
		FROM pg_stat_activity WHERE wait_event = 'SyncRep'`)
	for _, first := range firsts {
		<-first // an error, or done: the commit's wait was ended
	}

	retries := []struct {
		name string
		op   func(context.Context) (onetime.Outcome, error)
		want onetime.Outcome
	}{
		{"a used code", consume(used), onetime.AlreadyUsed},
		{"a used code in the caller's transaction", func(ctx context.Context) (o onetime.Outcome, err error) {
			err = db.InTx(ctx, func(tx *sql.Tx) error {
				r, err := st.Consume(ctx, tx, "login", usedInTx)
				o = r.Outcome
				return err
			})
			return o, err
		}, onetime.AlreadyUsed},
		{"a revoked code", consume(revoked), onetime.Revoked},
		{"a rotation retried in the grace window", rotate(rotated), onetime.Replayed},
		{"a token of a revoked family", rotate(revokedFamily), onetime.Revoked},
	}
	var answers []<-chan result
	for i, r := range retries {
		answer := run(r.op)
		answers = append(answers, answer)
		waitsForTheStandby(t, p, r.name, answer, i+1)
	}

	c.Standby.Start(t)
	for i, answer := range answers {
		if r := <-answer; r.err != nil || r.outcome != retries[i].want {
			t.Errorf("%s, once the standby is back: %v, %v, want %v", retries[i].name, r.outcome, r.err, retries[i].want)
		}
	}
	c.Primary.Kill(t)
	c.Promote(t)
	var ok bool
	if err := c.Primary.DB(t).QueryRow(`SELECT ` + changes).Scan(&ok); err != nil || !ok {
		t.Errorf("after the failover: every change answered about is there: %v, %v, want true", ok, err)
	}
}
