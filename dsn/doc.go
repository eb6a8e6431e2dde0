// Package dsn opens a racefree database by data source name, choosing the
// engine from the scheme. It links both engines; a program that needs only
// one imports racefree/sqlite or racefree/postgres directly.
package dsn
