package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The tests in this file keep every shell block of README.md and docs/*.md
// working: each racefree command in them names a real command with real
// flags, each go command a real package (and fuzz target or test), and
// each block that talks to a server with curl runs, for real, against a
// racefree serve started as the block starts it, answering every request
// with the status the block's comments promise.

// repoRoot is the repository's root, seen from this package's directory.
const repoRoot = "../.."

// A shellBlock is one ```sh block of a Markdown page.
type shellBlock struct {
	file  string      // relative to the repository's root
	line  int         // of the opening fence
	lines []shellLine // logical lines: a line ending in \ joined to the next
}

type shellLine struct {
	n    int // line number in the file
	text string
}

func (b shellBlock) String() string { return fmt.Sprintf("%s:%d", b.file, b.line) }

// docShellBlocks returns the ```sh blocks of README.md and docs/*.md.
func docShellBlocks(t *testing.T) []shellBlock {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages = append([]string{filepath.Join(repoRoot, "README.md")}, pages...)
	var blocks []shellBlock
	for _, p := range pages {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(repoRoot, p)
		var cur *shellBlock
		pending := ""
		for i, l := range strings.Split(string(data), "\n") {
			trimmed := strings.TrimSpace(l)
			switch {
			case cur == nil && (trimmed == "```sh" || trimmed == "```bash"):
				cur = &shellBlock{file: rel, line: i + 1}
			case cur != nil && trimmed == "```":
				blocks = append(blocks, *cur)
				cur = nil
			case cur != nil:
				if strings.HasSuffix(l, "\\") {
					pending += strings.TrimSuffix(l, "\\") + " "
					continue
				}
				cur.lines = append(cur.lines, shellLine{i + 1, pending + l})
				pending = ""
			}
		}
	}
	if len(blocks) < 20 {
		t.Fatalf("found only %d shell blocks in README.md and docs/*.md", len(blocks))
	}
	return blocks
}

// shellCommands splits one line of shell into its simple commands' words,
// with quotes removed, assignments before a command and redirections
// dropped, and $( … ) outside quotes taken as a command of its own. It
// knows as much shell as the docs use.
func shellCommands(line string) [][]string {
	var cmds [][]string
	var words []string
	var w strings.Builder
	inWord, skipNext := false, false
	endWord := func() {
		if !inWord {
			return
		}
		word := w.String()
		w.Reset()
		inWord = false
		switch {
		case skipNext:
			skipNext = false
		case len(words) == 0 && regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`).MatchString(word):
			// an assignment before the command, as in RACEFREE_X=1 racefree …
		case len(words) == 0 && (word == "if" || word == "then" || word == "else" || word == "fi" || word == "!" || word == "export"):
		default:
			words = append(words, word)
		}
	}
	endCmd := func() {
		endWord()
		if len(words) > 0 {
			cmds = append(cmds, words)
		}
		words = nil
	}
	rs := []rune(line)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case r == '\'':
			inWord = true
			j := i + 1
			for j < len(rs) && rs[j] != '\'' {
				w.WriteRune(rs[j])
				j++
			}
			i = j
		case r == '"':
			inWord = true
			j := i + 1
			for j < len(rs) && rs[j] != '"' {
				if rs[j] == '\\' && j+1 < len(rs) {
					j++
				}
				w.WriteRune(rs[j])
				j++
			}
			i = j
		case r == '#' && !inWord:
			endCmd()
			return cmds
		case r == ' ' || r == '\t':
			endWord()
		case r == '$' && i+1 < len(rs) && rs[i+1] == '(':
			// out=$(racefree …): the assignment's name is no command.
			w.Reset()
			inWord = false
			endCmd()
			i++
		case r == '|' || r == ';' || r == '&' || r == '(' || r == ')':
			endCmd()
		case r == '>' || r == '<':
			endWord()
			for i+1 < len(rs) && rs[i+1] == '>' {
				i++
			}
			skipNext = true
		default:
			if r == '2' && !inWord && i+1 < len(rs) && rs[i+1] == '>' {
				continue
			}
			inWord = true
			w.WriteRune(r)
		}
	}
	endCmd()
	return cmds
}

// racefreeArgs returns the arguments of words when they run racefree
// (racefree … or go run ./cmd/racefree …).
func racefreeArgs(words []string) ([]string, bool) {
	switch {
	case len(words) >= 1 && words[0] == "racefree":
		return words[1:], true
	case len(words) >= 3 && words[0] == "go" && words[1] == "run" && words[2] == "./cmd/racefree":
		return words[3:], true
	}
	return nil, false
}

// TestDocsRacefreeCommandsExist runs every racefree command of the docs
// with --help added: an unknown command, subcommand or flag fails it.
func TestDocsRacefreeCommandsExist(t *testing.T) {
	seen := 0
	for _, b := range docShellBlocks(t) {
		for _, l := range b.lines {
			for _, words := range shellCommands(l.text) {
				args, ok := racefreeArgs(words)
				if !ok {
					continue
				}
				seen++
				var clean []string
				for _, a := range args {
					// [--scope S]: an optional part of a synopsis.
					a = strings.TrimSuffix(strings.TrimPrefix(a, "["), "]")
					if shellVar.MatchString(a) {
						a = "1" // --fence "$fence": a value the docs compute
					}
					clean = append(clean, a)
				}
				r := runCLI(t, append(clean, "--help")...)
				where := fmt.Sprintf("%s:%d: racefree %s", b.file, l.n, strings.Join(args, " "))
				if r.code != 0 {
					t.Errorf("%s: exit %d: %s", where, r.code, strings.TrimSpace(r.stderr))
					continue
				}
				// A command with subcommands takes a further word as a
				// subcommand: cobra shows its help instead of failing.
				if strings.Contains(r.stdout, "Available Commands:") {
					for _, a := range clean {
						if strings.HasPrefix(a, "-") {
							break
						}
						if !strings.Contains(r.stdout, "racefree ") || !regexp.MustCompile(`(?m)^Usage:\n\s+racefree(\s\S+)*\s`+regexp.QuoteMeta(a)+`\s`).MatchString(r.stdout) {
							t.Errorf("%s: %q is no command of %s", where, a, usageLine(r.stdout))
							break
						}
					}
				}
			}
		}
	}
	if seen < 40 {
		t.Errorf("found only %d racefree commands in the docs", seen)
	}
}

var shellVar = regexp.MustCompile(`^\$(\{?[A-Za-z_][A-Za-z0-9_]*\}?)$`)

func usageLine(help string) string {
	if m := regexp.MustCompile(`(?m)^Usage:\n\s+(.*)$`).FindStringSubmatch(help); m != nil {
		return m[1]
	}
	return "racefree"
}

// TestDocsGoCommandsNameRealPackages checks each go run and go test of the
// docs: every package path exists (after the block's cd), every -fuzz
// target and every test a -run names is defined there.
func TestDocsGoCommandsNameRealPackages(t *testing.T) {
	seen := 0
	for _, b := range docShellBlocks(t) {
		base := repoRoot
		for _, l := range b.lines {
			for _, words := range shellCommands(l.text) {
				if len(words) == 2 && words[0] == "cd" {
					base = filepath.Join(repoRoot, words[1])
					continue
				}
				if len(words) < 2 || words[0] != "go" || (words[1] != "run" && words[1] != "test") {
					continue
				}
				if _, ok := racefreeArgs(words); ok {
					continue
				}
				seen++
				where := fmt.Sprintf("%s:%d: %s", b.file, l.n, strings.Join(words, " "))
				var dirs, funcs []string
				for i := 2; i < len(words); i++ {
					a := words[i]
					switch {
					case a == "." || strings.HasPrefix(a, "./"):
						d := strings.TrimSuffix(strings.TrimSuffix(a, "..."), "/")
						if strings.Contains(d, "<") { // ./<pkg>
							continue
						}
						dirs = append(dirs, d)
					case strings.HasPrefix(a, "-fuzz="):
						funcs = append(funcs, strings.TrimPrefix(a, "-fuzz="))
					case a == "-run" && i+1 < len(words):
						i++
						for _, n := range strings.Split(strings.Trim(words[i], "^$()"), "|") {
							if regexp.MustCompile(`^Test[A-Za-z0-9_]*$`).MatchString(n) {
								funcs = append(funcs, n)
							}
						}
					}
				}
				if words[1] == "run" && len(dirs) == 0 {
					t.Errorf("%s: go run of no package path", where)
				}
				for _, d := range dirs {
					if fi, err := os.Stat(filepath.Join(base, d)); err != nil || !fi.IsDir() {
						t.Errorf("%s: no package at %s", where, d)
					}
				}
				for _, f := range funcs {
					found := false
					for _, d := range dirs {
						tests, _ := filepath.Glob(filepath.Join(base, d, "*_test.go"))
						for _, tf := range tests {
							data, _ := os.ReadFile(tf)
							if bytes.Contains(data, []byte("func "+f)) { // -run is a regexp: a prefix selects
								found = true
							}
						}
					}
					if !found {
						t.Errorf("%s: no func %s in %v", where, f, dirs)
					}
				}
			}
		}
	}
	if seen < 10 {
		t.Errorf("found only %d go commands in the docs", seen)
	}
}

// statusComment is a comment that states a response's status: "# 200 …",
// "# 409 application/problem+json …", "# 204: …".
var statusComment = regexp.MustCompile(`^#\s*([1-5][0-9][0-9])\b`)

// TestDocsCurlBlocksRun runs each block of the docs that uses curl as a
// shell script against a real racefree serve: the one the block starts
// (with its flags, on a free port), or a plain serve started first on the
// embedded default. Every curl request must reach a route of the server,
// without a 5xx; where the block's comment states the status (and the
// command holds no … placeholder), the answer has exactly that status.
func TestDocsCurlBlocksRun(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("curl is not installed: the docs' curl blocks cannot run")
		}
		t.Skip("curl is not installed")
	}
	for _, b := range docShellBlocks(t) {
		uses := false
		for _, l := range b.lines {
			for _, words := range shellCommands(l.text) {
				uses = uses || words[0] == "curl"
			}
		}
		if !uses {
			continue
		}
		t.Run(strings.NewReplacer("/", "_", ".md", "").Replace(b.String()), func(t *testing.T) {
			t.Parallel()
			runCurlBlock(t, b)
		})
	}
}

// A curlCall is one curl request of a block and the status the docs say
// it gets (0: not stated).
type curlCall struct {
	line   int
	text   string
	status int
}

func runCurlBlock(t *testing.T, b shellBlock) {
	for _, tool := range []string{"openssl", "xxd", "base64"} {
		if strings.Contains(fmt.Sprint(b.lines), tool+" ") {
			if _, err := exec.LookPath(tool); err != nil {
				t.Fatalf("%s: needs %s", b, tool)
			}
		}
	}
	addr := freeAddr(t)
	dir := t.TempDir()
	var script strings.Builder
	fmt.Fprintf(&script, `racefree() { RACEFREE_TEST_AS_CLI=1 %q "$@"; }
curl() {
  n=$(( $(wc -l < statuses) + 1 ))
  command curl -sS -o "body.$n" -w '%%{http_code}\n' "$@" >> statuses 2>> curl.err || true
}
wait_ready() {
  for _ in $(seq 1 600); do command curl -sf -o /dev/null http://%s/readyz && return 0; sleep 0.05; done
  echo "serve never became ready" >&2; return 1
}
: > statuses
`, os.Args[0], addr)
	served := false
	for _, l := range b.lines {
		if strings.Contains(l.text, "racefree serve") {
			served = true
		}
	}
	if !served {
		fmt.Fprintf(&script, "racefree serve --addr %s > serve.log 2>&1 &\nwait_ready\n", addr)
	}
	var calls []curlCall
	for i, l := range b.lines {
		text := strings.NewReplacer("go run ./cmd/racefree", "racefree",
			"localhost:8080", addr, "127.0.0.1:8080", addr).Replace(l.text)
		if strings.Contains(text, "racefree serve") {
			text = strings.Replace(text, "racefree serve", "racefree serve --addr "+addr, 1)
			if strings.Contains(text, "&") {
				text = regexp.MustCompile(`&\s*sleep [0-9]+`).ReplaceAllString(text, "> serve.log 2>&1 & wait_ready")
			} else {
				// In the docs serve runs in a terminal of its own.
				if i := strings.Index(text, " # "); i >= 0 {
					text = text[:i]
				}
				text += " > serve.log 2>&1 & wait_ready"
			}
		}
		script.WriteString(text + "\n")
		for _, words := range shellCommands(l.text) {
			if words[0] != "curl" {
				continue
			}
			c := curlCall{line: l.n, text: strings.TrimSpace(l.text)}
			if !strings.Contains(l.text, "…") {
				c.status = statedStatus(b.lines[i:])
			}
			calls = append(calls, c)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script.String())
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "RACEFREE_DB=", "RACEFREE_ADDR=", "RACEFREE_TOKEN=", "RACEFREE_INBOX_SECRETS=")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// A file, not a pipe: the serve the block leaves running in the
	// background holds it open after the script ends.
	outFile, err := os.Create(filepath.Join(dir, "script.out"))
	if err != nil {
		t.Fatal(err)
	}
	defer outFile.Close()
	cmd.Stdout, cmd.Stderr = outFile, outFile
	cmd.WaitDelay = time.Second
	err = cmd.Start()
	if err == nil {
		err = cmd.Wait()
	}
	// The block's serve runs in the background: stop the whole group.
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	explain := func() string {
		log, _ := os.ReadFile(filepath.Join(dir, "serve.log"))
		out, _ := os.ReadFile(filepath.Join(dir, "script.out"))
		cerr, _ := os.ReadFile(filepath.Join(dir, "curl.err"))
		return fmt.Sprintf("\nscript:\n%s\noutput:\n%s\ncurl:\n%s\nserve's log:\n%s", script.String(), out, cerr, lastLines(string(log), 20))
	}
	if ctx.Err() != nil {
		t.Fatalf("%s: the block did not finish within 2 minutes (%v)%s", b, err, explain())
	}
	data, rerr := os.ReadFile(filepath.Join(dir, "statuses"))
	if rerr != nil {
		t.Fatal(rerr, explain())
	}
	got := strings.Fields(string(data))
	if len(got) != len(calls) {
		t.Fatalf("%s: %d curl requests ran, the block has %d (script: %v)%s", b, len(got), len(calls), err, explain())
	}
	for i, c := range calls {
		code, _ := strconv.Atoi(got[i])
		body, _ := os.ReadFile(filepath.Join(dir, "body."+strconv.Itoa(i+1)))
		where := fmt.Sprintf("%s:%d: %s", b.file, c.line, c.text)
		switch {
		case code == 0:
			t.Errorf("%s: no answer%s", where, explain())
		case code >= 500:
			t.Errorf("%s: %d %s", where, code, body)
		case bytes.Contains(body, []byte("problem:no-route")) || bytes.Contains(body, []byte("problem:method-not-allowed")):
			t.Errorf("%s: not a route of the server: %d %s", where, code, body)
		case c.status != 0 && code != c.status:
			t.Errorf("%s: %d, the docs say %d: %s", where, code, c.status, body)
		}
	}
}

// statedStatus returns the status that the comments of lines[0] state: its
// own trailing comment, or the comment lines right below it.
func statedStatus(lines []shellLine) int {
	if i := strings.Index(lines[0].text, " # "); i >= 0 {
		if m := statusComment.FindStringSubmatch(strings.TrimSpace(lines[0].text[i:])); m != nil {
			n, _ := strconv.Atoi(m[1])
			return n
		}
	}
	for _, l := range lines[1:] {
		s := strings.TrimSpace(l.text)
		if !strings.HasPrefix(s, "#") {
			break
		}
		if m := statusComment.FindStringSubmatch(s); m != nil {
			n, _ := strconv.Atoi(m[1])
			return n
		}
	}
	return 0
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func TestShellCommands(t *testing.T) {
	for _, c := range []struct {
		line string
		want string
	}{
		{`racefree audit keygen > audit.keys                 # connects to nothing`, `[[racefree audit keygen]]`},
		{`if out=$(racefree claim acquire nightly-report --holder "$(hostname)" --ttl 10m); then`, `[[racefree claim acquire nightly-report --holder $(hostname) --ttl 10m]]`},
		{`TEST_DATABASE_URL=x go test -race ./claim 2>&1 | tee log`, `[[go test -race ./claim] [tee log]]`},
		{`curl -s -XPOST localhost:8080/v1/x -d '{"a":"b c"}' # 204`, `[[curl -s -XPOST localhost:8080/v1/x -d {"a":"b c"}]]`},
		{`psql "$DATABASE_URL" -f rls-fix.sql && go run ./cmd/racefree rls-check --db "$DATABASE_URL"`, `[[psql $DATABASE_URL -f rls-fix.sql] [go run ./cmd/racefree rls-check --db $DATABASE_URL]]`},
	} {
		if got := fmt.Sprint(shellCommands(c.line)); got != c.want {
			t.Errorf("shellCommands(%q) = %s, want %s", c.line, got, c.want)
		}
	}
}
