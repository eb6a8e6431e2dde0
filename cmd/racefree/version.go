package main

import (
	"encoding/json"
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/racefree/racefree"
	"github.com/spf13/cobra"
)

func versionCmd() *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "version [--format json]",
		Short: "Print the module version, the VCS revision it was built from and the Go version",
		Long: `version prints the module version ("(devel)" for a build from a checkout
without -buildvcs), the VCS revision and whether the tree had uncommitted
changes ("modified"), as the Go toolchain recorded them in the binary, and
the Go version. racefree --version prints the same line.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFormat(format); err != nil {
				return usage(err)
			}
			v := buildVersion(readBuildInfo())
			if format == "json" {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(v)
			}
			fmt.Fprintln(cmd.OutOrStdout(), v)
			return nil
		},
	}
	formatFlag(cmd, &format, "output: text (one line) or json ({module, version, revision, time, modified, go})")
	return cmd
}

// versionInfo is what the Go toolchain recorded about a build.
type versionInfo struct {
	Module   string `json:"module"`
	Version  string `json:"version"`            // v1.2.3, a pseudo-version, or (devel)
	Revision string `json:"revision,omitempty"` // the full VCS revision; "" without -buildvcs
	Time     string `json:"time,omitempty"`     // the revision's commit time
	Modified bool   `json:"modified"`           // the tree had uncommitted changes
	Go       string `json:"go"`
}

// readBuildInfo returns the binary's build information, or nil.
func readBuildInfo() *debug.BuildInfo {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return nil
	}
	return bi
}

// buildVersion reads bi, which is nil when the binary carries no build
// information.
func buildVersion(bi *debug.BuildInfo) versionInfo {
	if bi == nil {
		return versionInfo{Module: "github.com/racefree/racefree", Version: "unknown"}
	}
	v := versionInfo{Module: bi.Main.Path, Version: bi.Main.Version, Go: bi.GoVersion}
	if v.Version == "" {
		v.Version = "(devel)" // a test binary records no main module version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.time":
			v.Time = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

// String is the one line of racefree version: "racefree VERSION (revision
// REV[, modified], TIME; GO)", or "no VCS revision" for a build without
// -buildvcs.
func (v versionInfo) String() string {
	var b strings.Builder
	b.WriteString("racefree " + v.Version + " (")
	if v.Revision == "" {
		b.WriteString("no VCS revision: built without -buildvcs")
	} else {
		b.WriteString("revision " + v.Revision)
		if v.Modified {
			b.WriteString(", modified")
		}
		if v.Time != "" {
			b.WriteString(", " + v.Time)
		}
	}
	if v.Go != "" {
		b.WriteString("; " + v.Go)
	}
	b.WriteString(")")
	return b.String()
}

// checkFormat refuses a --format other than text or json.
func checkFormat(format string) error {
	if format != "text" && format != "json" {
		return racefree.Invalid("format", "%q: want text or json", format)
	}
	return nil
}

// jsonOutput checks --format before anything is sent or opened and
// reports whether it asks for JSON; another value is a usage error (exit
// 2).
func jsonOutput(format string) (bool, error) {
	if err := checkFormat(format); err != nil {
		return false, usage(err)
	}
	return format == "json", nil
}

// formatFlag adds --format (text or json) to cmd.
func formatFlag(cmd *cobra.Command, format *string, usage string) {
	cmd.Flags().StringVar(format, "format", "text", usage)
}
