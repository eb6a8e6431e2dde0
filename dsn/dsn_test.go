package dsn_test

import (
	"errors"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/dsn"
)

func TestParse(t *testing.T) {
	t.Parallel()
	for in, want := range map[string][2]string{
		"sqlite:racefree.db":      {racefree.SQLite, "racefree.db"},
		"sqlite:///var/lib/r.db":  {racefree.SQLite, "/var/lib/r.db"},
		"postgres://u@h/db":       {racefree.Postgres, "postgres://u@h/db"},
		"postgresql://u@h/db?x=1": {racefree.Postgres, "postgresql://u@h/db?x=1"},
	} {
		engine, addr, err := dsn.Parse(in)
		if err != nil || engine != want[0] || addr != want[1] {
			t.Errorf("Parse(%q) = %q, %q, %v; want %q, %q", in, engine, addr, err, want[0], want[1])
		}
	}
	for _, in := range []string{"", "racefree.db", "mysql://x", "sqlite:"} {
		if _, _, err := dsn.Parse(in); !errors.Is(err, racefree.ErrInvalidInput) {
			t.Errorf("Parse(%q): got %v, want ErrInvalidInput", in, err)
		}
	}
}
