package wire

import (
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"strings"
)

// PostgresUnavailable reports whether err is what racefree calls
// unavailable on PostgreSQL (racefree.ErrUnavailable: try again later,
// and an outcome unknown for a write that commits by itself), without
// linking a driver, so that the postgres engine and a package given only
// a *sql.DB judge alike:
//   - an error with a SQLSTATE (a SQLState method, as pgconn.PgError has)
//     is unavailable when UnavailableSQLState says so;
//   - any other is unavailable when ConnectionLost says so.
//
// A context's end is neither: its caller judges it.
func PostgresUnavailable(err error) bool {
	var st interface{ SQLState() string }
	if errors.As(err, &st) {
		return UnavailableSQLState(st.SQLState())
	}
	return ConnectionLost(err)
}

// UnavailableSQLState reports whether a PostgreSQL SQLSTATE says that the
// connection or the server went away rather than that the statement
// failed: class 08 (connection exception) and class 57 (operator
// intervention: a shutdown, a terminated backend, a server starting up),
// but not 57014 query_canceled, which is the answer to a cancel (the
// statement failed and committed nothing).
func UnavailableSQLState(code string) bool {
	return strings.HasPrefix(code, "08") || strings.HasPrefix(code, "57") && code != "57014"
}

// ConnectionLost reports whether err came from the connection rather than
// from an answer of the server: a network error (net.Error), the
// connection's end in the middle of a reply (io.EOF,
// io.ErrUnexpectedEOF), a closed or bad connection (net.ErrClosed,
// driver.ErrBadConn, sql.ErrConnDone), or an error its driver marks safe
// to retry because nothing was sent (a SafeToRetry method that says so,
// as pgconn's errors have).
func ConnectionLost(err error) bool {
	var ne net.Error
	var retry interface{ SafeToRetry() bool }
	return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) || errors.Is(err, driver.ErrBadConn) || errors.Is(err, sql.ErrConnDone) ||
		errors.As(err, &retry) && retry.SafeToRetry()
}
