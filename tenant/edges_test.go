package tenant_test

import (
	"errors"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/tenant"
)

// TestCheckAtEachCharacterBound tries every end of each character range
// a tenant id may hold, and the character just outside it, alone and after
// a letter: 'a' 'z' 'A' 'Z' '0' '9' pass anywhere; '`' '{' '@' '[' '/'
// never; ':' '-' '_' '.' pass only after the first byte.
func TestCheckAtEachCharacterBound(t *testing.T) {
	t.Parallel()
	for _, c := range "azAZ09" {
		for _, id := range []string{string(c), "x" + string(c), string(c) + "x"} {
			if err := tenant.Check(id); err != nil {
				t.Errorf("Check(%q) = %v; want nil", id, err)
			}
		}
	}
	for _, c := range "`{@[/;" {
		for _, id := range []string{string(c), "x" + string(c)} {
			if err := tenant.Check(id); !errors.Is(err, racefree.ErrInvalidInput) {
				t.Errorf("Check(%q) = %v; want an InputError", id, err)
			}
		}
	}
	for _, c := range ":-_." {
		if err := tenant.Check("x" + string(c)); err != nil {
			t.Errorf("Check(%q) = %v; want nil", "x"+string(c), err)
		}
		if err := tenant.Check(string(c) + "x"); !errors.Is(err, racefree.ErrInvalidInput) {
			t.Errorf("Check(%q) = %v; want an InputError (not a letter or digit first)", string(c)+"x", err)
		}
	}
}
