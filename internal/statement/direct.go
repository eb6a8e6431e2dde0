package statement

import (
	"bytes"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"time"
)

// Rows are the rows Statement.Rows reads: *sql.Rows under Run, the
// driver's rows under Direct.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
}

// Direct runs st through ds, a statement prepared on a driver's connection
// (sql.Conn.Raw), with nothing of database/sql around it: no *sql.Rows,
// no lock of the connection per call, and no goroutine watching a context
// that cannot end. It reports what Run reports for the same statement:
// found is false only for a Dest statement that returned no row, and the
// error that ended the rows midway is its error.
//
// Its arguments go to the driver as database/sql would send them to a
// driver that checks none itself (driver.DefaultParameterConverter), and
// their number must be the statement's. Its rows are read with Assign,
// which refuses the destinations it does not know rather than convert
// them otherwise than Rows.Scan: such a statement fails, and its caller
// runs it again through database/sql.
//
// The caller holds the connection (inside sql.Conn.Raw) for as long as
// Direct runs.
func Direct(ctx context.Context, ds driver.Stmt, st Statement) (found bool, err error) {
	args, err := driverArgs(ds, st.Args)
	if err != nil {
		return false, err
	}
	if st.Rows == nil && st.Dest == nil {
		ec, ok := ds.(driver.StmtExecContext)
		if !ok {
			return false, fmt.Errorf("racefree: the driver's statement %T has no ExecContext", ds)
		}
		res, err := ec.ExecContext(ctx, args)
		if err != nil {
			return false, err
		}
		*st.Affected, err = res.RowsAffected()
		return true, err
	}
	qc, ok := ds.(driver.StmtQueryContext)
	if !ok {
		return false, fmt.Errorf("racefree: the driver's statement %T has no QueryContext", ds)
	}
	dr, err := qc.QueryContext(ctx, args)
	if err != nil {
		return false, err
	}
	// Closed once only, as *sql.Rows closes a driver's rows: the SQLite
	// driver's Close finalizes a statement it did not keep, and a second
	// Close would finalize it again.
	closed := false
	defer func() {
		if !closed {
			_ = dr.Close()
		}
	}()
	r := &directRows{rows: dr, vals: make([]driver.Value, len(dr.Columns()))}
	if found, err = read(r, st); err != nil {
		return false, err
	}
	if r.err != nil {
		return found, r.err // the driver's Close would report it again
	}
	closed = true
	if err := dr.Close(); err != nil {
		return false, err
	}
	return found, nil
}

// driverArgs converts args as database/sql does for a driver that checks
// none itself: driver.Valuer and the kinds of Go's basic types become the
// driver's values; a count other than the statement's is an error.
func driverArgs(ds driver.Stmt, args []any) ([]driver.NamedValue, error) {
	if n := ds.NumInput(); n >= 0 && n != len(args) {
		return nil, fmt.Errorf("sql: expected %d arguments, got %d", n, len(args))
	}
	nv := make([]driver.NamedValue, len(args))
	for i, a := range args {
		v, err := driver.DefaultParameterConverter.ConvertValue(a)
		if err != nil {
			return nil, fmt.Errorf("sql: converting argument $%d type: %w", i+1, err)
		}
		nv[i] = driver.NamedValue{Ordinal: i + 1, Value: v}
	}
	return nv, nil
}

// directRows reads a driver's rows as *sql.Rows reads them, for
// Statement.Rows: Next stops at the end or at an error, which err keeps;
// Scan reads the row Next found, as often as it is called.
type directRows struct {
	rows driver.Rows
	vals []driver.Value
	on   bool // Next found a row
	err  error
}

func (r *directRows) Next() bool {
	r.on = false
	if r.err != nil {
		return false
	}
	if err := r.rows.Next(r.vals); err != nil {
		if !errors.Is(err, io.EOF) {
			r.err = err
		}
		return false
	}
	r.on = true
	return true
}

func (r *directRows) Scan(dest ...any) error {
	if !r.on {
		return errors.New("sql: Scan called without calling Next")
	}
	if len(dest) != len(r.vals) {
		return fmt.Errorf("sql: expected %d destination arguments in Scan, not %d", len(r.vals), len(dest))
	}
	for i, d := range dest {
		if err := Assign(d, r.vals[i]); err != nil {
			return fmt.Errorf("sql: Scan error on column index %d: %w", i, err)
		}
	}
	return nil
}

// Assign stores src, a value a driver returned, in dest, as database/sql's
// Rows.Scan stores it, for the destinations racefree's statements read:
// *int64 from an integer, *float64 from a float, *bool from a bool or the
// integers 0 and 1, *string from text or bytes, *[]byte from bytes, text
// or NULL (a copy: the driver may reuse its own), *time.Time from a time,
// *any from anything (bytes copied), and an sql.Scanner (sql.NullInt64 and
// its kin) from anything, through its Scan. Every other pair is an error,
// where Rows.Scan might convert (text into *int64, say) or fail: a caller
// that meets it runs the statement through database/sql instead, which
// then decides.
func Assign(dest, src any) error {
	switch d := dest.(type) {
	case *int64:
		if v, ok := src.(int64); ok {
			*d = v
			return nil
		}
	case *float64:
		if v, ok := src.(float64); ok {
			*d = v
			return nil
		}
	case *bool:
		switch v := src.(type) {
		case bool:
			*d = v
			return nil
		case int64:
			if v == 0 || v == 1 {
				*d = v == 1
				return nil
			}
		}
	case *string:
		switch v := src.(type) {
		case string:
			*d = v
			return nil
		case []byte:
			*d = string(v)
			return nil
		}
	case *[]byte:
		switch v := src.(type) {
		case []byte:
			*d = bytes.Clone(v)
			return nil
		case string:
			*d = []byte(v)
			return nil
		case nil:
			*d = nil
			return nil
		}
	case *time.Time:
		if v, ok := src.(time.Time); ok {
			*d = v
			return nil
		}
	case *any:
		if v, ok := src.([]byte); ok {
			*d = bytes.Clone(v)
		} else {
			*d = src
		}
		return nil
	case sql.Scanner:
		return d.Scan(src)
	}
	return fmt.Errorf("racefree: no direct scan of %T into %T", src, dest)
}
