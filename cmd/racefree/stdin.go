package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
)

// fromStdin is the argument that stands for a value read from standard
// input, as in docker login --password-stdin or kubectl apply -f -.
const fromStdin = "-"

// argOrStdin returns arg, the value of the argument name, or, when arg is
// "-", the one line standard input holds, without its trailing newline
// (\n or \r\n). It is the way to pass a value that begins with '-', which
// the command line would read as a flag, and to keep a token out of the
// process list and the shell's history. Empty input, more than one line or
// a line over max bytes is a usage error (exit 2) with one line on stderr,
// returned before anything is sent.
func argOrStdin(cmd *cobra.Command, name, arg string, max int) (string, error) {
	if arg != fromStdin {
		return arg, nil
	}
	// max bytes, \r\n, and one byte more to tell a longer line.
	data, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), int64(max)+3))
	if err != nil {
		return "", usage(fmt.Errorf("%s: reading standard input: %w", name, err))
	}
	line := strings.TrimSuffix(strings.TrimSuffix(string(data), "\n"), "\r")
	switch {
	case strings.Contains(line, "\n"):
		return "", usage(fmt.Errorf("%s: standard input holds more than one line; %s given as - is read from it, one line", name, strings.ToUpper(name)))
	case len(line) > max:
		return "", usage(fmt.Errorf("%s: the line on standard input is longer than %d bytes", name, max))
	case line == "":
		return "", usage(fmt.Errorf("%s: standard input is empty; %s given as - is read from it, one line", name, strings.ToUpper(name)))
	}
	return line, nil
}
