package main

import (
	"io"
	"net"
	"net/url"
	"os/exec"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree/internal/testing/testdb"
)

// TestOutside2EdgesFlagValuesAreNotPackages: the value of each flag of go
// test that takes one, written apart from it, is not a package: -timeout
// 30m, -p 1, -tags integration, -coverprofile c.out, alone or together,
// leave the command to add ./...; a package after them is one.
func TestOutside2EdgesFlagValuesAreNotPackages(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool
	}{
		{[]string{"-timeout", "30m"}, false},
		{[]string{"-race", "-timeout", "30m"}, false},
		{[]string{"-p", "1"}, false},
		{[]string{"-p", "1", "-race"}, false},
		{[]string{"-tags", "integration"}, false},
		{[]string{"-coverprofile", "c.out"}, false},
		{[]string{"-race", "-timeout", "30m", "-p", "1", "-tags", "integration", "-coverprofile", "c.out"}, false},
		{[]string{"-timeout", "30m", "./claim"}, true},
		{[]string{"-p", "1", "./claim"}, true},
	} {
		if got := hasPackage(c.args); got != c.want {
			t.Errorf("hasPackage(%q) = %v, want %v", c.args, got, c.want)
		}
	}
}

// TestOutside2EdgesPlainRunIsOrderedToo: "./..." alone, as the README's
// plain `go run ./tools/test` gives it (the command adds it as the only
// argument), is expanded like "./..." after flags: slowest first, in its
// order, then every other package in go list's own order.
func TestOutside2EdgesPlainRunIsOrderedToo(t *testing.T) {
	t.Chdir("../..")
	out, err := exec.Command("go", "list", "./...").Output()
	if err != nil {
		t.Fatal(err)
	}
	listed := strings.Fields(string(out))
	got := slowestFirst([]string{"./..."})
	if len(got) != len(listed) {
		t.Fatalf("slowestFirst([./...]) = %q: %d arguments, want go list's %d packages", got, len(got), len(listed))
	}
	for i, s := range slowest {
		if want := path.Join(modulePath, s); got[i] != want {
			t.Errorf("package %d: %s, want %s (slowest[%d])", i, got[i], want, i)
		}
	}
	var others []string
	for _, p := range listed {
		if !slices.Contains(slowest, strings.TrimPrefix(strings.TrimPrefix(p, modulePath), "/")) {
			others = append(others, p)
		}
	}
	if rest := got[len(slowest):]; !slices.Equal(rest, others) {
		t.Errorf("the packages not in slowest: %q, want them in go list's order %q", rest, others)
	}
}

// withPassword returns u with a password in it: its own, or a made-up one
// (a server that trusts the user never asks for it).
func withPassword(t *testing.T, u string) (string, string) {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	user := "postgres"
	if p.User != nil {
		user = p.User.Username()
		if pw, ok := p.User.Password(); ok {
			return u, pw
		}
	}
	const pw = "s3cret-racefree-pw"
	p.User = url.UserPassword(user, pw)
	return p.String(), pw
}

// TestOutside2EdgesTheTestCommandsLinesOnAGivenURL: the lines never show
// TEST_DATABASE_URL's password, whether PostgreSQL answers or not; a
// TEST_DATABASE_URL given that does not answer is named as given, never
// as missing; and RACEFREE_REQUIRE_POSTGRES other than 1 (0 here) requires
// nothing: the SQLite half runs and passes.
func TestOutside2EdgesTheTestCommandsLinesOnAGivenURL(t *testing.T) {
	t.Parallel()
	down, pw := withPassword(t, unreachable)
	r := runCommand(t, []string{"TEST_DATABASE_URL=" + down, "RACEFREE_REQUIRE_POSTGRES=0"}, "-count=1", "./...")
	if r.code != 0 || len(r.urls) != 2 || r.urls["a"] != "" {
		t.Errorf("PostgreSQL down, RACEFREE_REQUIRE_POSTGRES=0: exit %d, packages run %q; want exit 0, both run without a URL", r.code, r.urls)
	}
	if !strings.Contains(r.stderr, "the PostgreSQL half is SKIPPED") {
		t.Errorf("PostgreSQL down: standard error does not say its half was skipped")
	}
	if strings.Contains(r.stderr, pw) || !strings.Contains(r.stderr, "xxxxx@") {
		t.Errorf("PostgreSQL down: standard error shows the password, or not the URL redacted")
	}
	if strings.Contains(r.stderr, "no TEST_DATABASE_URL") {
		t.Errorf("PostgreSQL down at the TEST_DATABASE_URL given: standard error says there is none")
	}

	up, pw := withPassword(t, testdb.PostgresURL(t))
	r = runCommand(t, []string{"TEST_DATABASE_URL=" + up}, "-count=1", "./...")
	if r.code != 0 || r.urls["a"] != up {
		t.Fatalf("PostgreSQL up: exit %d, package a saw %q; want exit 0 and the URL as given", r.code, r.urls["a"])
	}
	if strings.Contains(r.stderr, pw) || !strings.Contains(r.stderr, "test: passed; engines: SQLite and PostgreSQL (") {
		t.Errorf("PostgreSQL up: standard error shows the password, or does not say both engines passed")
	}
}

// TestOutside2EdgesTheTestCommandKeepsGoTestsStatus: go test's status 2
// (a flag's value it refuses) is the command's status, and its last line
// says FAILED.
func TestOutside2EdgesTheTestCommandKeepsGoTestsStatus(t *testing.T) {
	t.Parallel()
	r := runCommand(t, []string{"TEST_DATABASE_URL=" + unreachable}, "-count=x", "./...")
	if r.code != 2 || len(r.urls) != 0 {
		t.Errorf("-count=x: exit %d, %d packages ran; want go test's 2 and none", r.code, len(r.urls))
	}
	if !strings.Contains(r.stderr, "test: FAILED; engines:") {
		t.Errorf("-count=x: the last line does not say FAILED")
	}
}

// listen returns a TCP listener on a free local port, closed when the
// test ends, and handles each connection it accepts with handle.
func listen(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go handle(c)
		}
	}()
	return l.Addr().String()
}

// at returns u with its host and port replaced by addr.
func at(t *testing.T, u, addr string) string {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	p.Host = addr
	return p.String()
}

// TestOutside2EdgesTheTestCommandWaitsForPostgreSQLButNotForever: a
// PostgreSQL that takes half a second to answer (a proxy that holds the
// connection that long before it passes it on) is one that answers, and
// is handed to the tests; one that accepts the connection and never says
// a word is given up on after its 5 seconds (required here, so that the
// command ends there with status 1), not waited for.
func TestOutside2EdgesTheTestCommandWaitsForPostgreSQLButNotForever(t *testing.T) {
	t.Parallel()
	base := testdb.PostgresURL(t)
	p, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	upstream := p.Host
	if p.Port() == "" {
		upstream = net.JoinHostPort(p.Hostname(), "5432")
	}
	// The delay is what is tried (a slow server), not a wait for a state.
	slow := at(t, base, listen(t, func(c net.Conn) {
		defer c.Close()
		time.Sleep(500 * time.Millisecond)
		s, err := net.Dial("tcp", upstream)
		if err != nil {
			return
		}
		defer s.Close()
		go func() { _, _ = io.Copy(s, c) }()
		_, _ = io.Copy(c, s)
	}))
	r, _ := runWithin(t, 2*time.Minute, []string{"TEST_DATABASE_URL=" + slow}, "-count=1", "./...")
	if r.code != 0 || r.urls["a"] != slow || !strings.Contains(r.stderr, "test: engines: SQLite and PostgreSQL (") {
		t.Errorf("a PostgreSQL that answers in half a second: exit %d, package a saw %q; want exit 0, both engines, and the URL handed on", r.code, r.urls["a"])
	}

	silent := at(t, base, listen(t, func(c net.Conn) {
		defer c.Close()
		_, _ = io.Copy(io.Discard, c)
	}))
	r, took := runWithin(t, 45*time.Second, []string{"TEST_DATABASE_URL=" + silent, "RACEFREE_REQUIRE_POSTGRES=1"}, "-count=1", "./...")
	if r.code != 1 || len(r.urls) != 0 || !strings.Contains(r.stderr, "does not answer") {
		t.Errorf("a PostgreSQL that never answers, required: exit %d after %s, %d packages ran; want exit 1 before any test, saying it does not answer", r.code, took, len(r.urls))
	}
}
