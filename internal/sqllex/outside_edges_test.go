package sqllex_test

import (
	"testing"

	"github.com/racefree/racefree/internal/sqllex"
)

// TestEdgesAStringContinuesAcrossEveryLineBreak tries PostgreSQL's
// string continuation at its line breaks: a string, white space holding
// a line break, and another string are one string, and PostgreSQL counts
// a carriage return alone (an old Mac line ending) as a line break, as
// it does a newline and CR LF. Read as two strings, the text between
// them would be taken for SQL outside any string where PostgreSQL sees
// none: the check that only a select runs would judge other text than
// the engine runs. Without a line break, two strings stay two tokens.
func TestEdgesAStringContinuesAcrossEveryLineBreak(t *testing.T) {
	t.Parallel()
	for _, d := range []sqllex.Dialect{sqllex.Postgres, sqllex.PostgresNonConforming} {
		for _, c := range []struct {
			text string
			want []string
		}{
			{"'a'\r'b' c", []string{"'a'\r'b'", "c"}},
			{"'a' \r '; delete' c", []string{"'a' \r '; delete'", "c"}},
			{"E'a'\r'b' c", []string{"E'a'\r'b'", "c"}},
			{"'a'\n'b' c", []string{"'a'\n'b'", "c"}},
			{"'a'\r\n'b' c", []string{"'a'\r\n'b'", "c"}},
			{"'a' 'b'", []string{"'a'", "'b'"}},
		} {
			toks := sqllex.Tokens(d, c.text)
			var got []string
			for _, tok := range toks {
				got = append(got, tok.Text)
			}
			if len(got) != len(c.want) || got[0] != c.want[0] || got[len(got)-1] != c.want[len(c.want)-1] || toks[0].Kind != sqllex.Quoted {
				t.Errorf("%v: Tokens(%q) = %q, want %q (the first one quoted)", d, c.text, got, c.want)
			}
		}
	}
	// SQLite has no continuation: a carriage return between two strings
	// leaves them two.
	if toks := sqllex.Tokens(sqllex.SQLite, "'a'\r'b'"); len(toks) != 2 {
		t.Errorf("SQLite: Tokens(%q) = %+v, want two strings", "'a'\r'b'", toks)
	}
}
