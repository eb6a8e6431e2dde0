package testdb

import "os"

// LongEnv names the environment variable that asks for the long mode of
// the tests that repeat a fault many times (kills, restarts, rounds of
// load): RACEFREE_LONG=1. CI runs the default, short mode; the long mode's
// figures are the README's.
const LongEnv = "RACEFREE_LONG"

// Scale returns short, or long in the long mode (RACEFREE_LONG=1).
func Scale(short, long int) int {
	if os.Getenv(LongEnv) == "1" {
		return long
	}
	return short
}
