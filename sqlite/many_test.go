package sqlite_test

import (
	"context"
	"math"
	"path/filepath"
	"testing"

	"github.com/racefree/racefree/sqlite"
)

// TestEdgesBindManyReadsBackAsBound: every argument BindMany puts in its
// JSON array (?1) comes back from ->> as the value and type that binding
// it as a parameter gives (text with quotes, backslashes, control
// characters and other scripts, the extreme integers, floats, bools,
// NULL), and ?2 gives each operation's place by the hex of its key,
// whatever bytes the key holds. A value JSON cannot carry unchanged is an
// error: text with a NUL byte or not UTF-8, a NaN, a []byte.
func TestEdgesBindManyReadsBackAsBound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, err := sqlite.NewEngine(filepath.Join(t.TempDir(), "m.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer e.SQL().Close()
	values := []any{`quote " backslash \ slash /`, "tab\tnewline\n\x01\x1f end", "é 日本 🙂", "", int64(math.MaxInt64),
		int64(math.MinInt64), 42, int64(-7), 1.5, 2.0, -1e-300, true, false, nil}
	keys := []string{"claim\x00ns\x00k", `"quoted"`, `back\slash`, "é", "$.x[0]"}
	args := make([][]any, len(keys))
	for i := range args {
		args[i] = values
	}
	bound, err := e.BindMany(keys, args)
	if err != nil {
		t.Fatal(err)
	}
	for i := range keys {
		for k, v := range values {
			var gotType, wantType string
			var got, want any
			if err := e.SQL().QueryRowContext(ctx, `SELECT typeof(?1 ->> ('$['||?2||']['||?3||']')), ?1 ->> ('$['||?2||']['||?3||']')`,
				bound[0], i, k).Scan(&gotType, &got); err != nil {
				t.Fatal(err)
			}
			if err := e.SQL().QueryRowContext(ctx, `SELECT typeof(?1), ?1`, v).Scan(&wantType, &want); err != nil {
				t.Fatal(err)
			}
			if gotType != wantType || got != want {
				t.Errorf("operation %d, argument %d (%#v): ->> gives %s %#v, a parameter %s %#v", i, k, v, gotType, got, wantType, want)
			}
		}
		var place int64
		if err := e.SQL().QueryRowContext(ctx, `SELECT ?1 ->> ('$."' || hex(?2) || '"')`, bound[1], keys[i]).Scan(&place); err != nil || place != int64(i+1) {
			t.Errorf("key %q: place %d, %v; want %d", keys[i], place, err, i+1)
		}
	}
	for _, bad := range []any{"nul \x00 byte", "not utf-8 \xff", math.NaN(), math.Inf(1), []byte("b")} {
		if _, err := e.BindMany([]string{"k"}, [][]any{{bad}}); err == nil {
			t.Errorf("%#v: BindMany took it, want an error", bad)
		}
	}
}
