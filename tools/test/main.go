// Command test runs racefree's tests and says, before and after, which
// engines they ran on: SQLite always, PostgreSQL only when one answers.
//
//	go run ./tools/test                 # go test ./...
//	go run ./tools/test -race ./claim   # flags and packages go to go test
//
// The PostgreSQL half of every test connects to TEST_DATABASE_URL. When it
// is unset, this command tries postgres://postgres@127.0.0.1:5432/postgres
// (a local server with trust authentication, as on a developer's machine
// or in CI) and uses it when it answers; otherwise the PostgreSQL half is
// skipped, and the command says so at the start and at the end, where a
// plain `go test ./...` would say it only under -v.
// RACEFREE_REQUIRE_POSTGRES=1 (set by CI) makes an unreachable PostgreSQL
// an error instead: exit 1 before any test runs.
//
// Its own lines go to standard error, so that `-json` output on standard
// output stays a clean stream. The exit code is go test's.
package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

const localURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	dbURL, fromEnv := os.Getenv("TEST_DATABASE_URL"), true
	if dbURL == "" {
		dbURL, fromEnv = localURL, false
	}
	engines := "SQLite and PostgreSQL (" + redact(dbURL) + ")"
	if err := reachable(dbURL); err != nil {
		why := fmt.Sprintf("PostgreSQL at %s does not answer (%s)", redact(dbURL), strings.Join(strings.Fields(err.Error()), " "))
		if os.Getenv("RACEFREE_REQUIRE_POSTGRES") == "1" {
			fmt.Fprintf(os.Stderr, "test: %s, and RACEFREE_REQUIRE_POSTGRES=1 requires it\n", why)
			return 1
		}
		if !fromEnv {
			why = "no TEST_DATABASE_URL, and " + why
		}
		engines = "SQLite only: the PostgreSQL half is SKIPPED; " + why + ". Set TEST_DATABASE_URL to run it"
		dbURL = ""
	}
	fmt.Fprintf(os.Stderr, "test: engines: %s\n", engines)

	if len(args) == 0 || !hasPackage(args) {
		args = append(args, "./...")
	}
	args = slowestFirst(args)
	cmd := exec.Command("go", append([]string{"test"}, args...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), "TEST_DATABASE_URL="+dbURL)
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		fmt.Fprintf(os.Stderr, "test: %v\n", err)
		return 1
	}
	verdict := "passed"
	if code != 0 {
		verdict = "FAILED"
	}
	fmt.Fprintf(os.Stderr, "test: %s; engines: %s\n", verdict, engines)
	return code
}

// slowest are the packages whose tests take longest (under -race, CI's
// record), longest first. go test runs the packages in the order it is
// given them, as many at a time as there are cores (two in CI): started
// last, as ./... orders them, the longest ran on alone after the others
// were done, and the run ended a few minutes later than it needed to.
var slowest = []string{
	"internal/testing/reliability",
	"outbox",
	"cmd/racefree",
	"server",
	"tools/mutants",
	"quota",
	"rlscheck",
	"tenant",
	"audit",
	"claim",
}

// modulePath is the module's import path: the packages of slowest are
// under it.
const modulePath = "github.com/racefree/racefree"

// slowestFirst returns args with "./..." replaced by the module's packages
// (go list), those of slowest first, in its order, and the others as go
// list gives them. Any other pattern is left as it is. When go list fails,
// args are returned unchanged, for go test to report what is wrong.
func slowestFirst(args []string) []string {
	i := slices.Index(args, "./...")
	if i < 0 {
		return args
	}
	out, err := exec.Command("go", "list", "./...").Output()
	if err != nil {
		return args
	}
	pkgs := strings.Fields(string(out))
	rank := func(p string) int {
		for r, s := range slowest {
			if p == path.Join(modulePath, s) {
				return r
			}
		}
		return len(slowest)
	}
	slices.SortStableFunc(pkgs, func(a, b string) int { return rank(a) - rank(b) })
	return slices.Concat(args[:i], pkgs, args[i+1:])
}

// reachable reports whether a PostgreSQL session opens at u and answers.
func reachable(u string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return conn.Ping(ctx)
}

// hasPackage reports whether args name a package (an argument that is not
// a flag and not a flag's value). Only the common forms are recognised:
// a package starts with "." or contains no "=" and follows a flag that
// takes no value.
func hasPackage(args []string) bool {
	for i, a := range args {
		if a == "" || a[0] == '-' {
			continue
		}
		if i > 0 && takesValue(args[i-1]) {
			continue
		}
		return true
	}
	return false
}

// takesValue reports whether flag, written without "=", consumes the next
// argument as its value.
func takesValue(flag string) bool {
	switch flag {
	case "-run", "-skip", "-timeout", "-count", "-p", "-parallel", "-bench", "-benchtime",
		"-coverprofile", "-cpuprofile", "-memprofile", "-o", "-tags", "-exec", "-cpu",
		"-blockprofile", "-mutexprofile", "-outputdir", "-shuffle", "-fuzz", "-fuzztime",
		"--run", "--timeout", "--count", "--tags":
		return true
	}
	return false
}

// redact hides a password in u for printing, in each place the driver
// reads one: a URL's user part (postgres://u:secret@h/db), its query
// (?password=secret), and a keyword/value string (host=h password=secret,
// the value quoted or not). A URL that does not parse is masked as text.
func redact(u string) string {
	const mask = "xxxxx"
	if p, err := url.Parse(u); err == nil && p.Scheme != "" {
		if _, ok := p.User.Password(); ok {
			p.User = url.UserPassword(p.User.Username(), mask)
		}
		if q := p.Query(); q.Has("password") {
			q.Set("password", mask)
			p.RawQuery = q.Encode()
		}
		return p.String()
	}
	u = userPassword.ReplaceAllString(u, "${1}"+mask+"@")
	return keywordPassword.ReplaceAllString(u, "${1}"+mask)
}

var (
	// userPassword is the user part's password of a URL url.Parse refused.
	userPassword = regexp.MustCompile(`(://[^:/@]*:)[^@]*@`)
	// keywordPassword is password=… in a keyword/value string, or in the
	// query of a URL url.Parse refused: a quoted value to its closing
	// quote, or a bare one to the next space or '&'.
	keywordPassword = regexp.MustCompile(`(?i)(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&]*)`)
)
