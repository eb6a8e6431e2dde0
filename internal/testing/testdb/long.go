package testdb

import "os"

// LongEnv names the environment variable that asks for the long mode of
// the tests that repeat a fault many times (kills, restarts, rounds of
// load): RACEFREE_LONG=1. CI runs the default, short mode; the long mode's
// figures are those of docs/contributing.md.
const LongEnv = "RACEFREE_LONG"

// Long reports whether RACEFREE_LONG=1 asks for the long mode.
func Long() bool { return os.Getenv(LongEnv) == "1" }

// Scale returns short, or long in the long mode.
func Scale(short, long int) int {
	if Long() {
		return long
	}
	return short
}
