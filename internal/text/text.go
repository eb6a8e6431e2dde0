// Package text holds the checks of text that racefree's libraries and its
// HTTP server share, so that both layers refuse the same input.
package text

import "strings"

// HasNUL reports whether s holds a NUL byte, anywhere: SQLite stores one
// inside text and PostgreSQL refuses it (SQLSTATE 22021), so racefree
// refuses it before either engine sees it.
func HasNUL(s string) bool {
	return strings.IndexByte(s, 0) >= 0
}
