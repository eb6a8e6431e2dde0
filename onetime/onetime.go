package onetime

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/query"
	"github.com/racefree/racefree/internal/reaper"
	"github.com/racefree/racefree/internal/send"
	"github.com/racefree/racefree/internal/wire"
	"github.com/racefree/racefree/tenant"
)

//go:embed sql
var sqlFiles embed.FS

// Limits on input. Anything outside them is rejected with a
// *racefree.InputError before the database is touched.
const (
	MaxPurposeBytes = 128
	MaxSubjectBytes = 256
	MaxTokenBytes   = 512
	MinTTL          = time.Millisecond
	MaxTTL          = 366 * 24 * time.Hour
	MaxGrace        = time.Hour
	MinSecretBytes  = 32
)

// Outcome says what Consume or Rotate did with a token.
type Outcome int

// Outcomes. Consumed, Rotated and Replayed hand the caller what it asked
// for; the others refuse.
const (
	// Consumed: this call redeemed the code. No other call ever gets
	// Consumed for it.
	Consumed Outcome = iota + 1
	// Rotated: this call retired the token and issued its successor.
	Rotated
	// Replayed: the token was rotated within the grace window and its
	// successor is still live; this call hands back that same successor.
	Replayed
	// AlreadyUsed: the code was redeemed before.
	AlreadyUsed
	// Reused: the refresh token had been retired by an earlier rotation;
	// this call revoked its whole family.
	Reused
	// Revoked: the code, or the token's family, was revoked.
	Revoked
	// Expired: the token's lifetime is over (from its exact expiry
	// millisecond).
	Expired
	// Unknown: no such token (for a code: none of this purpose).
	Unknown
)

var outcomeNames = [...]string{"", "consumed", "rotated", "replayed", "already_used", "reused", "revoked", "expired", "unknown"}

// String returns the outcome's name as the HTTP API spells it, e.g.
// "already_used".
func (o Outcome) String() string {
	if o < 1 || int(o) >= len(outcomeNames) {
		return fmt.Sprintf("Outcome(%d)", int(o))
	}
	return outcomeNames[o]
}

// Options configures a Store. A nil *Options means all defaults.
type Options struct {
	// Grace is how long after a rotation a retry with the rotated token
	// gets the same successor back instead of revoking the family.
	// Defaults to 0: every retry is reuse. At most MaxGrace; more than 0
	// needs Secret.
	Grace time.Duration
	// Secret derives successors (HMAC-SHA256), at least MinSecretBytes
	// bytes. Every instance sharing the database must use the same one for
	// a grace-window retry to be served by any of them. Defaults to a
	// random secret of this Store's own, which is enough with a Grace of 0.
	Secret []byte
}

// Store represents one-time codes and refresh-token families. Every call
// runs for the tenant its context names ([tenant.With]; [tenant.Default] when
// none): a token issued for one tenant is unknown to every other. It is
// safe for concurrent use and keeps no state besides its configuration, so
// any number of Stores, in any number of processes, may share a database.
type Store struct {
	db     *racefree.DB
	q      query.Set
	grace  time.Duration
	secret []byte
}

// New returns a Store over db. It does no I/O. It rejects options out of
// range with an *racefree.InputError.
func New(db *racefree.DB, opts *Options) (*Store, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Grace < 0 || o.Grace > MaxGrace {
		return nil, racefree.Invalid("Grace", "must be between 0 and %s, got %s", MaxGrace, o.Grace)
	}
	if o.Grace%time.Millisecond != 0 {
		return nil, racefree.Invalid("Grace", "must be a whole number of milliseconds, got %s", o.Grace)
	}
	switch {
	case len(o.Secret) == 0 && o.Grace > 0:
		return nil, racefree.Invalid("Secret", "is required with a Grace above 0, and must be the same on every instance")
	case len(o.Secret) == 0:
		o.Secret = make([]byte, MinSecretBytes)
		_, _ = rand.Read(o.Secret) // never fails (crypto/rand)
	case len(o.Secret) < MinSecretBytes:
		return nil, racefree.Invalid("Secret", "must be at least %d bytes, got %d", MinSecretBytes, len(o.Secret))
	}
	return &Store{db: db, q: query.MustLoad(sqlFiles, "sql", db.Engine()), grace: o.Grace,
		secret: append([]byte(nil), o.Secret...)}, nil
}

// Code represents an issued one-time code. Token is its only copy: racefree
// stores its hash.
type Code struct {
	Token     string
	Purpose   string
	Subject   string
	IssuedAt  time.Time
	ExpiresAt time.Time // the code is live while now < ExpiresAt
}

// Redemption says what Consume did. Subject, IssuedAt and ExpiresAt are
// set when the code exists (Consumed, AlreadyUsed, Revoked, Expired);
// UsedAt when it was redeemed.
type Redemption struct {
	Outcome   Outcome
	Subject   string
	IssuedAt  time.Time
	ExpiresAt time.Time
	UsedAt    time.Time
}

// Issue issues a one-time code for subject, for purpose (such as
// "password-reset"), live for ttl. It returns the token, which is 256
// random bits from crypto/rand in URL-safe base64 without padding; only
// its SHA-256 is stored. exec may be the caller's transaction: the code
// then exists only if it commits. Purposes (1 to MaxPurposeBytes) and
// subjects (1 to MaxSubjectBytes) must be UTF-8 without a NUL byte, and
// ttl between MinTTL and MaxTTL in whole milliseconds; anything else is an
// *racefree.InputError and writes nothing.
func (s *Store) Issue(ctx context.Context, exec racefree.Executor, purpose, subject string, ttl time.Duration) (*Code, error) {
	if err := racefree.CheckText("purpose", purpose, MaxPurposeBytes); err != nil {
		return nil, err
	}
	if err := checkSubjectTTL(subject, ttl); err != nil {
		return nil, err
	}
	token := newToken()
	var issued, expires int64
	err := send.Run(ctx, s.db, exec, func(exec racefree.Executor) error {
		return exec.QueryRowContext(ctx, s.q.Get("issue"), tenant.From(ctx), hash(token), purpose, subject, ttl.Milliseconds(), wire.Of(s.db).ClockArg()).
			Scan(&issued, &expires)
	})
	if err != nil {
		return nil, fmt.Errorf("onetime issue: %w", wire.Of(s.db).InterpretError(err))
	}
	return &Code{Token: token, Purpose: purpose, Subject: subject,
		IssuedAt: racefree.FromMillis(issued), ExpiresAt: racefree.FromMillis(expires)}, nil
}

// Consume redeems the code token of purpose, once.
//
// It is one conditional UPDATE that marks the code used where it is
// unused, unrevoked and unexpired (live while now < ExpiresAt), and the
// row it returns decides: of any number of concurrent Consumes of one
// code, in any number of processes, exactly one gets Consumed. Every other
// call gets AlreadyUsed, Revoked, Expired or Unknown (no code of this
// purpose, which includes a code of another purpose or tenant), read after
// the UPDATE only to explain the refusal. A refusal writes nothing and is
// not an error: the error is non-nil only for bad input (an
// *racefree.InputError) or a failure of the database, after which the
// outcome is unknown.
//
// On PostgreSQL with synchronous_standby_names set, a refusal read from
// the code's row (AlreadyUsed, Revoked, Expired) locks it FOR KEY SHARE,
// so that its COMMIT, and the answer, wait until the synchronous standby
// has the row: the redemption it reports may be on the primary alone
// (its commit's wait for the standby cancelled), and "already used" then
// speaks of a redemption a failover would lose. In the caller's
// transaction it is the caller's COMMIT that waits.
//
// exec may be the caller's transaction: the redemption then commits or
// rolls back with the caller's own writes, and a concurrent Consume waits
// for it (PostgreSQL: the row lock; SQLite: the write lock).
func (s *Store) Consume(ctx context.Context, exec racefree.Executor, purpose, token string) (Redemption, error) {
	if err := racefree.CheckText("purpose", purpose, MaxPurposeBytes); err != nil {
		return Redemption{}, err
	}
	if err := racefree.CheckText("token", token, MaxTokenBytes); err != nil {
		return Redemption{}, err
	}
	h := hash(token)
	var r Redemption
	err := send.Run(ctx, s.db, exec, func(exec racefree.Executor) error {
		var issued, expires, usedAt int64
		r = Redemption{}
		err := exec.QueryRowContext(ctx, s.q.Get("consume"), tenant.From(ctx), h, purpose, wire.Of(s.db).ClockArg()).
			Scan(&r.Subject, &issued, &expires, &usedAt)
		switch {
		case err == nil:
			r.Outcome, r.IssuedAt, r.ExpiresAt, r.UsedAt = Consumed, racefree.FromMillis(issued), racefree.FromMillis(expires), racefree.FromMillis(usedAt)
		case errors.Is(err, sql.ErrNoRows):
			r, err = s.explainCode(ctx, exec, h, purpose)
		}
		return err
	})
	if err != nil {
		return Redemption{}, fmt.Errorf("onetime consume: %w", wire.Of(s.db).InterpretError(err))
	}
	return r, nil
}

// explainCode reads why consume matched no row. It decides nothing.
func (s *Store) explainCode(ctx context.Context, exec racefree.Executor, h []byte, purpose string) (Redemption, error) {
	var (
		r                    Redemption
		issued, expires, now int64
		used, revoked        sql.NullInt64
	)
	err := exec.QueryRowContext(ctx, s.q.Get("explain_code"), tenant.From(ctx), h, purpose, wire.Of(s.db).ClockArg()).
		Scan(&r.Subject, &issued, &expires, &used, &revoked, &now)
	if errors.Is(err, sql.ErrNoRows) {
		return Redemption{Outcome: Unknown}, nil
	}
	if err != nil {
		return Redemption{}, err
	}
	if err := s.durable(ctx, exec, "durable_code", tenant.From(ctx), h, purpose); err != nil {
		return Redemption{}, err
	}
	r.IssuedAt, r.ExpiresAt = racefree.FromMillis(issued), racefree.FromMillis(expires)
	switch {
	case used.Valid:
		r.Outcome, r.UsedAt = AlreadyUsed, racefree.FromMillis(used.Int64)
	case revoked.Valid:
		r.Outcome = Revoked
	case now >= expires:
		r.Outcome = Expired
	default:
		// Live and unused, yet the UPDATE matched nothing: not reachable at
		// READ COMMITTED, where the UPDATE waits for any transaction that
		// holds the row. Refused all the same; say so as already used.
		r.Outcome = AlreadyUsed
	}
	return r, nil
}

// RevokeCodes revokes every live code of (purpose, subject), such as the
// older links when a new password-reset link is sent, and returns how many
// it revoked. Consume refuses a revoked code with Revoked. Used and
// expired codes are left as they are.
func (s *Store) RevokeCodes(ctx context.Context, exec racefree.Executor, purpose, subject string) (int64, error) {
	if err := racefree.CheckText("purpose", purpose, MaxPurposeBytes); err != nil {
		return 0, err
	}
	if err := racefree.CheckText("subject", subject, MaxSubjectBytes); err != nil {
		return 0, err
	}
	var n int64
	err := send.Run(ctx, s.db, exec, func(exec racefree.Executor) error {
		res, err := exec.ExecContext(ctx, s.q.Get("revoke_codes"), tenant.From(ctx), purpose, subject, wire.Of(s.db).ClockArg())
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("onetime revoke: %w", wire.Of(s.db).InterpretError(err))
	}
	return n, nil
}

// Refresh represents a live refresh token. Token is its only copy:
// racefree stores its hash.
type Refresh struct {
	Token      string
	Subject    string
	ExpiresAt  time.Time // the token is live while now < ExpiresAt
	Generation int64     // 1 for a family's first token, +1 per rotation
}

// Rotation says what Rotate did. Next is the successor when the outcome
// is Rotated or Replayed, and nil otherwise.
type Rotation struct {
	Outcome Outcome
	Next    *Refresh
}

// IssueRefresh starts a refresh-token family for subject and returns its
// first token, live for ttl; each successor lives ttl from its rotation.
// Only the token's SHA-256 is stored. exec may be the caller's
// transaction. Bad input is an *racefree.InputError and writes nothing.
func (s *Store) IssueRefresh(ctx context.Context, exec racefree.Executor, subject string, ttl time.Duration) (*Refresh, error) {
	if err := checkSubjectTTL(subject, ttl); err != nil {
		return nil, err
	}
	token := newToken()
	r := &Refresh{Token: token, Subject: subject}
	var expires int64
	err := send.Run(ctx, s.db, exec, func(exec racefree.Executor) error {
		return exec.QueryRowContext(ctx, s.q.Get("issue_refresh"), tenant.From(ctx), hash(token), subject, ttl.Milliseconds(), wire.Of(s.db).ClockArg()).
			Scan(&expires, &r.Generation)
	})
	if err != nil {
		return nil, fmt.Errorf("onetime issue refresh: %w", wire.Of(s.db).InterpretError(err))
	}
	r.ExpiresAt = racefree.FromMillis(expires)
	return r, nil
}

// Rotate exchanges the refresh token for its successor, once.
//
// When token is its family's live token, Rotate retires it and makes the
// successor the family's live token, by one conditional UPDATE of the
// family's row, and answers Rotated: of concurrent Rotates of one token
// exactly one rotates, and a family never has two live tokens.
//
// When token was retired by an earlier rotation, it is either a retry of
// the family's latest rotation within Options.Grace, while that successor
// is still live, which answers Replayed with the same successor (never a
// second one), or reuse (RFC 9700 §4.14.2): Rotate then revokes the whole
// family and answers Reused, and every token of the family, the live one
// included, is refused from then on. With the default Grace of 0 every
// retry is reuse, and so are the losers of concurrent rotations of one
// token. Otherwise the outcome is Revoked, Expired (from the exact
// millisecond of expiry) or Unknown, and nothing is written. On
// PostgreSQL with synchronous_standby_names set every answer but Unknown
// commits only once the synchronous standby has the family's row as read:
// Rotated, Replayed and Reused write it, and Revoked and Expired lock it
// FOR KEY SHARE (see Consume).
//
// The rotation and the retirement, and the reuse detection and the
// revocation, each commit together. exec may be the caller's transaction
// (READ COMMITTED on PostgreSQL); return Rotate's error, not its outcome,
// from it, so that a revocation commits. Given the *racefree.DB (or its
// *sql.DB), Rotate runs its statements in a transaction of its own. The
// error is non-nil only for bad input (an *racefree.InputError) or a
// failure of the database, after which the outcome is unknown: retry
// within the grace window.
func (s *Store) Rotate(ctx context.Context, exec racefree.Executor, token string) (Rotation, error) {
	if err := racefree.CheckText("token", token, MaxTokenBytes); err != nil {
		return Rotation{}, err
	}
	h := hash(token)
	next := s.successor(tenant.From(ctx), h)
	nh := hash(next)
	var rot Rotation
	err := send.Run(ctx, s.db, exec, func(exec racefree.Executor) error {
		return s.atomically(ctx, exec, func(exec racefree.Executor) error {
			var err error
			rot, err = s.rotate(ctx, exec, h, next, nh)
			return err
		})
	})
	if err != nil {
		return Rotation{}, fmt.Errorf("onetime rotate: %w", wire.Of(s.db).InterpretError(err))
	}
	return rot, nil
}

func (s *Store) rotate(ctx context.Context, exec racefree.Executor, h []byte, next string, nh []byte) (Rotation, error) {
	t := tenant.From(ctx)
	r := &Refresh{Token: next}
	var expires int64
	var err error
	if s.db.Engine() == racefree.Postgres {
		err = exec.QueryRowContext(ctx, s.q.Get("rotate"), t, h, nh, wire.Of(s.db).ClockArg()).Scan(&r.Subject, &expires, &r.Generation)
	} else {
		var (
			family    []byte
			rotatedAt int64
		)
		err = exec.QueryRowContext(ctx, s.q.Get("rotate"), t, h, nh, wire.Of(s.db).ClockArg()).
			Scan(&r.Subject, &expires, &r.Generation, &family, &rotatedAt)
		if err == nil {
			_, err = exec.ExecContext(ctx, s.q.Get("retire"), t, h, family, rotatedAt)
		}
	}
	if err == nil {
		r.ExpiresAt = racefree.FromMillis(expires)
		return Rotation{Outcome: Rotated, Next: r}, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return Rotation{}, err
	}
	var grace bool
	err = exec.QueryRowContext(ctx, s.q.Get("reuse"), t, h, nh, s.grace.Milliseconds(), wire.Of(s.db).ClockArg()).
		Scan(&grace, &r.Subject, &expires, &r.Generation)
	switch {
	case err == nil && grace:
		r.ExpiresAt = racefree.FromMillis(expires)
		return Rotation{Outcome: Replayed, Next: r}, nil
	case err == nil:
		return Rotation{Outcome: Reused}, nil
	case errors.Is(err, sql.ErrNoRows):
		return s.explainRefresh(ctx, exec, h)
	default:
		return Rotation{}, err
	}
}

// explainRefresh reads why rotate and reuse matched no row. It decides
// nothing.
func (s *Store) explainRefresh(ctx context.Context, exec racefree.Executor, h []byte) (Rotation, error) {
	var (
		head, revoked bool
		expires, now  int64
	)
	err := exec.QueryRowContext(ctx, s.q.Get("explain_refresh"), tenant.From(ctx), h, wire.Of(s.db).ClockArg()).Scan(&head, &revoked, &expires, &now)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return Rotation{Outcome: Unknown}, nil
	case err != nil:
		return Rotation{}, err
	}
	if err := s.durable(ctx, exec, "durable_refresh", tenant.From(ctx), h); err != nil {
		return Rotation{}, err
	}
	switch {
	case revoked:
		return Rotation{Outcome: Revoked}, nil
	case head && now >= expires:
		return Rotation{Outcome: Expired}, nil
	}
	// A live head that rotate did not match: rotated, or revoked, by a
	// transaction this one cannot see yet.
	return Rotation{Outcome: Revoked}, nil
}

// durable makes a refusal read from a row another transaction committed
// (explain_code's, explain_refresh's) commit only once a synchronous
// standby has that row, on PostgreSQL while synchronous_standby_names is
// set: the statement named (durable_code.sql, durable_refresh.sql) locks
// the row FOR KEY SHARE, so exec's transaction (on the pool, the
// statement's own) has an xid and WAL, and its COMMIT waits for the
// standby past the commit it read. Elsewhere it does nothing.
func (s *Store) durable(ctx context.Context, exec racefree.Executor, name string, args ...any) error {
	if s.db.Engine() != racefree.Postgres {
		return nil
	}
	rows, err := exec.QueryContext(ctx, s.q.Get(name), args...)
	if err != nil {
		return fmt.Errorf("lock the row read: %w", err)
	}
	return rows.Close()
}

// RevokeFamilies revokes every refresh-token family of subject ("sign out
// everywhere") and returns how many it revoked. Rotate refuses every token
// of a revoked family with Revoked.
func (s *Store) RevokeFamilies(ctx context.Context, exec racefree.Executor, subject string) (int64, error) {
	if err := racefree.CheckText("subject", subject, MaxSubjectBytes); err != nil {
		return 0, err
	}
	var n int64
	err := send.Run(ctx, s.db, exec, func(exec racefree.Executor) error {
		res, err := exec.ExecContext(ctx, s.q.Get("revoke_families"), tenant.From(ctx), subject, wire.Of(s.db).ClockArg())
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("onetime revoke families: %w", wire.Of(s.db).InterpretError(err))
	}
	return n, nil
}

// atomically runs fn so that its statements commit together. On
// PostgreSQL each of Rotate's statements is atomic by itself and fn runs
// on exec as given. On SQLite, given the pool, fn runs in a transaction of
// its own; given anything else (the caller's transaction), on it.
func (s *Store) atomically(ctx context.Context, exec racefree.Executor, fn func(exec racefree.Executor) error) error {
	if s.db.Engine() == racefree.SQLite {
		switch exec.(type) {
		case *racefree.DB, *sql.DB:
			return s.db.InTx(ctx, func(tx *sql.Tx) error { return fn(tx) })
		}
	}
	return fn(exec)
}

// successor derives the successor of tenant t's token whose hash is
// parent: HMAC-SHA256 of the tenant and parent under the Store's secret,
// so that a retry within the grace window gets the same one without it
// being stored.
func (s *Store) successor(t string, parent []byte) string {
	m := hmac.New(sha256.New, s.secret)
	m.Write([]byte("racefree onetime successor\x00"))
	m.Write([]byte(t))
	m.Write([]byte{0})
	m.Write(parent)
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// newToken returns 256 random bits, URL-safe base64 without padding.
func newToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b)
}

// hash returns what is stored of a token: its SHA-256.
func hash(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

func checkSubjectTTL(subject string, ttl time.Duration) error {
	if err := racefree.CheckText("subject", subject, MaxSubjectBytes); err != nil {
		return err
	}
	if ttl < MinTTL || ttl > MaxTTL || ttl%time.Millisecond != 0 {
		return racefree.Invalid("ttl", "must be between %s and %s in whole milliseconds, got %s", MinTTL, MaxTTL, ttl)
	}
	return nil
}

// Reap deletes, for every tenant racefree has seen, one tenant at a time,
// the codes that expired at least grace ago, used or not, and the
// refresh-token families whose live token expired at least grace ago,
// with the tokens they retired, batch rows per statement (0: 1000), until
// none is left or ctx ends. It returns how many codes and families it
// deleted. Nothing it deletes could still be redeemed or rotated, so grace
// only decides how long a refusal is explained (Expired, AlreadyUsed,
// Revoked) before it becomes Unknown. Each batch is one tenant's and
// commits on its own ([send.Run]: on PostgreSQL in a short transaction
// that sets the tenant); on PostgreSQL a batch skips rows that a
// concurrent transaction holds locked, and re-checks the expiry on the
// row's latest version.
func (s *Store) Reap(ctx context.Context, grace time.Duration, batch int) (codes, families int64, err error) {
	if grace < 0 {
		return 0, 0, racefree.Invalid("grace", "must not be negative")
	}
	if batch <= 0 {
		batch = 1000
	}
	err = reaper.EachTenant(ctx, s.db, func(ctx context.Context) error {
		c, f, err := s.reap(ctx, grace, batch)
		codes, families = codes+c, families+f
		return err
	})
	if err != nil {
		return codes, families, fmt.Errorf("onetime reap: %w", err)
	}
	return codes, families, nil
}

// reap reaps the tenant ctx names.
func (s *Store) reap(ctx context.Context, grace time.Duration, batch int) (codes, families int64, err error) {
	for {
		var n int64
		err := send.Run(ctx, s.db, s.db, func(exec racefree.Executor) error {
			res, err := exec.ExecContext(ctx, s.q.Get("reap_codes"), tenant.From(ctx), grace.Milliseconds(), batch, wire.Of(s.db).ClockArg())
			if err != nil {
				return err
			}
			n, err = res.RowsAffected()
			return err
		})
		if err != nil {
			return codes, families, wire.Of(s.db).InterpretError(err)
		}
		codes += n
		if n < int64(batch) {
			break
		}
	}
	for {
		var n int64
		err := send.Run(ctx, s.db, s.db, func(exec racefree.Executor) error {
			return s.atomically(ctx, exec, func(exec racefree.Executor) error {
				n = 0
				t := tenant.From(ctx)
				if s.db.Engine() == racefree.Postgres {
					return exec.QueryRowContext(ctx, s.q.Get("reap_families"), t, grace.Milliseconds(), batch, wire.Of(s.db).ClockArg()).Scan(&n)
				}
				now := wire.Of(s.db).ClockArg()
				if now == nil {
					var ms int64
					if err := exec.QueryRowContext(ctx, s.q.Get("now")).Scan(&ms); err != nil {
						return err
					}
					now = ms
				}
				if _, err := exec.ExecContext(ctx, s.q.Get("reap_retired"), t, grace.Milliseconds(), batch, now); err != nil {
					return err
				}
				res, err := exec.ExecContext(ctx, s.q.Get("reap_families"), t, grace.Milliseconds(), batch, now)
				if err != nil {
					return err
				}
				n, err = res.RowsAffected()
				return err
			})
		})
		if err != nil {
			return codes, families, wire.Of(s.db).InterpretError(err)
		}
		families += n
		if n < int64(batch) {
			return codes, families, nil
		}
	}
}
