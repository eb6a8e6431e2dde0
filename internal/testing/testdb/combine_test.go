package testdb_test

import (
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/internal/wire"
)

// TestOpenCombinerFromTheEnvironment checks what RACEFREE_COMBINE does to
// the databases Open opens: unset the combiner is on (the library's
// default), 0 turns it off and 1 on wherever the Config left it at
// CombineDefault, and a Config that asks for CombineOn or CombineOff keeps
// it. (t.Setenv: not parallel.)
func TestOpenCombinerFromTheEnvironment(t *testing.T) {
	for _, c := range []struct {
		env    string
		policy racefree.CombinePolicy
		want   bool
	}{
		{"", racefree.CombineDefault, true},
		{"", racefree.CombineOff, false},
		{"0", racefree.CombineDefault, false},
		{"0", racefree.CombineOn, true},
		{"1", racefree.CombineDefault, true},
		{"1", racefree.CombineOff, false},
	} {
		t.Setenv("RACEFREE_COMBINE", c.env)
		db := testdb.Open(t, testdb.NewDSN(t, racefree.SQLite), &racefree.Config{Combine: c.policy})
		if got := wire.Of(db).Combining(); got != c.want {
			t.Errorf("RACEFREE_COMBINE=%q, Combine %d: combining %v, want %v", c.env, c.policy, got, c.want)
		}
	}
}
