//go:build racefree_mutants

package query

import (
	"encoding/json"
	"fmt"
	"os"
)

// MutantsEnv names the environment variable through which the mutation
// runner hands a test binary built with the racefree_mutants tag the file
// of its overlay: a JSON object from the SHA-256 (hex) of an embedded text
// to the text that replaces it.
const MutantsEnv = "RACEFREE_MUTANT_SQL"

func init() {
	path := os.Getenv(MutantsEnv)
	if path == "" {
		return
	}
	data, err := os.ReadFile(path)
	if err == nil {
		err = json.Unmarshal(data, &mutated)
	}
	if err != nil {
		// A mutant that silently did not apply would survive for nothing.
		fmt.Fprintf(os.Stderr, "%s: %v\n", MutantsEnv, err)
		os.Exit(3)
	}
}
