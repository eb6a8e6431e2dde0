package query

import (
	"crypto/sha256"
	"encoding/hex"
)

// digest names a text in a mutation overlay: its SHA-256, in hex.
func digest(text string) string {
	sum := sha256.Sum256([]byte(text))
	return hex.EncodeToString(sum[:])
}
