package wire_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/racefree/racefree/internal/wire"
)

// A second round from outside of what PostgreSQL's errors mean to racefree
// (unavailable.go): pure judgements of an error's SQLSTATE and of a
// driver's own marks, which need no database.

// sqlState is an error with a SQLSTATE, as pgconn.PgError has.
type sqlState string

func (s sqlState) Error() string    { return "ERROR: (SQLSTATE " + string(s) + ")" }
func (s sqlState) SQLState() string { return string(s) }

// TestEdges2EveryCodeOfClasses08And57IsUnavailable: every SQLSTATE of
// class 08 (connection exception: 08000, 08003 no connection, 08006
// connection failure, 08001 and 08004 refused, 08P01 protocol violation)
// and of class 57 (operator intervention: 57000, 57P01 admin shutdown,
// 57P02 crash shutdown, 57P03 cannot connect now, 57P04 database
// dropped) is unavailable, bare or wrapped, but 57014 query_canceled, the
// answer to a cancel, is not, and neither is a statement's own failure.
func TestEdges2EveryCodeOfClasses08And57IsUnavailable(t *testing.T) {
	t.Parallel()
	for _, code := range []string{"08000", "08003", "08006", "08001", "08004", "08P01", "57000", "57P01", "57P02", "57P03", "57P04"} {
		if !wire.UnavailableSQLState(code) {
			t.Errorf("UnavailableSQLState(%s) = false; want true", code)
		}
		if err := fmt.Errorf("racefree: %w", sqlState(code)); !wire.PostgresUnavailable(err) {
			t.Errorf("PostgresUnavailable(%v) = false; want true", err)
		}
	}
	for _, code := range []string{"57014", "40001", "40P01", "23505", "25006"} {
		if wire.UnavailableSQLState(code) || wire.PostgresUnavailable(sqlState(code)) {
			t.Errorf("SQLSTATE %s taken for unavailable; want a statement's own failure", code)
		}
	}
}

// safeToRetry is an error its driver marks safe to retry, or not, as
// pgconn's errors are.
type safeToRetry bool

func (s safeToRetry) Error() string     { return fmt.Sprintf("driver error (safe to retry: %v)", bool(s)) }
func (s safeToRetry) SafeToRetry() bool { return bool(s) }

// TestEdges2OnlyWhatTheDriverSaysIsSafeToRetryIsLost: an error its driver
// marks safe to retry (nothing was sent) is a lost connection, bare or
// wrapped; one whose mark says it is not safe to retry (something was
// sent, an answer may have come) is not, for its SafeToRetry method
// alone.
func TestEdges2OnlyWhatTheDriverSaysIsSafeToRetryIsLost(t *testing.T) {
	t.Parallel()
	for _, err := range []error{safeToRetry(true), fmt.Errorf("racefree: %w", safeToRetry(true))} {
		if !wire.ConnectionLost(err) || !wire.PostgresUnavailable(err) {
			t.Errorf("ConnectionLost(%v) = %v; want true: nothing was sent", err, wire.ConnectionLost(err))
		}
	}
	for _, err := range []error{safeToRetry(false), fmt.Errorf("racefree: %w", safeToRetry(false)), errors.New("plain")} {
		if wire.ConnectionLost(err) || wire.PostgresUnavailable(err) {
			t.Errorf("ConnectionLost(%v) = true; want false: the driver does not say the connection was lost", err)
		}
	}
}
