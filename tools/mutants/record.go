package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
)

// record copies the go test -json stream in to the file path, for a later
// run's -baseline, and writes to out what go test would have printed
// without -json: each package's result line and what the package printed
// outside its tests, and the output of every test that failed. Lines that
// are not JSON (go's own complaints on stderr) go to out as they are.
func record(in io.Reader, path string, out io.Writer) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	held := map[testID]*strings.Builder{} // output of tests still running
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
	for sc.Scan() {
		line := sc.Bytes()
		if _, err := f.Write(append(line, '\n')); err != nil {
			f.Close()
			return err
		}
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil || e.Action == "" {
			fmt.Fprintf(out, "%s\n", line)
			continue
		}
		id := testID{e.Package, e.Test}
		switch {
		case e.Action == "build-output":
			io.WriteString(out, e.Output)
		case e.Action == "output" && e.Test == "":
			if !strings.HasPrefix(e.Output, "=== ") && e.Output != "PASS\n" && e.Output != "FAIL\n" {
				io.WriteString(out, e.Output)
			}
		case e.Action == "output" && strings.HasPrefix(e.Output, "=== "):
			// === RUN, PAUSE, CONT: go test prints them only with -v.
		case e.Action == "output":
			b := held[id]
			if b == nil {
				b = new(strings.Builder)
				held[id] = b
			}
			b.WriteString(e.Output)
		case e.Action == "fail" && e.Test != "":
			if b := held[id]; b != nil {
				io.WriteString(out, b.String())
			}
			delete(held, id)
		case e.Action == "fail":
			// A test binary that crashed or timed out ends tests that
			// never report their own end: show what they printed.
			for t, b := range held {
				if t.pkg == e.Package {
					io.WriteString(out, b.String())
					delete(held, t)
				}
			}
		case e.Action == "pass" || e.Action == "skip":
			delete(held, id)
		}
	}
	if err := sc.Err(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// readBaseline parses a go test -json file that -record wrote.
func readBaseline(path string) (*testRun, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	r := newTestRun()
	sink := &jsonSink{run: r}
	sink.Write(data)
	sink.flush()
	return r, nil
}
