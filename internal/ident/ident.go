// Package ident quotes SQL identifiers that come from input or from a
// catalogue: the one function through which such names reach SQL text.
package ident

import (
	"strings"

	"github.com/racefree/racefree"
)

// Quote returns name in double quotes, with embedded double quotes doubled:
// the quoting rule of both PostgreSQL and SQLite. It accepts any name of 1
// to 63 bytes without NUL or control characters; anything else is an
// *racefree.InputError.
func Quote(name string) (string, error) {
	if name == "" {
		return "", racefree.Invalid("identifier", "empty")
	}
	if len(name) > 63 {
		return "", racefree.Invalid("identifier", "%q is longer than 63 bytes", name)
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return "", racefree.Invalid("identifier", "%q contains a control character", name)
		}
	}
	return `"` + strings.ReplaceAll(name, `"`, `""`) + `"`, nil
}
