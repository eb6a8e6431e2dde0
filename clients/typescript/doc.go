// Package typescript holds the Go side of racefree's TypeScript client
// (this directory's npm package): the test that keeps openapi.json, the
// copy its types are generated from, equal to the document the server
// serves, and the test that runs the client's Node tests (npm test)
// against live racefree serve processes on SQLite and PostgreSQL.
package typescript
