// Package reliability holds racefree's reliability suite, tests only: the
// racefree binary killed and restarted under load, PostgreSQL cut off and
// replies to COMMIT lost on the wire, hostile input, and, in each case, a
// check from the log of every acknowledged answer and from the database
// itself that nothing acknowledged was lost and no invariant broke.
//
// The default mode (what go test runs, CI included) is bounded to a few
// seconds per test; RACEFREE_LONG=1 runs the same tests with bigger counts.
package reliability
