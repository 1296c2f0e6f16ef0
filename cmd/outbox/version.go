package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/ncruces/go-sqlite3"
)

func init() {
	commands["version"] = command{
		summary: "print the outbox module's version, the Go version and the SQLite version",
		run:     runVersion,
	}
}

const versionAbout = `
Prints the version of the outbox module this binary was built from (with its VCS revision when
the build recorded one), the Go version that built it and the version of the SQLite compiled into
it. "outbox --version" does the same.`

func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("version", "outbox version", versionAbout)
	pos, code, done := parseFlags(fs, args, stderr)
	if done {
		return code
	}
	if len(pos) != 0 {
		return usageError(stderr, "outbox version", "takes no arguments")
	}
	sqliteVersion, err := sqliteVersion()
	if err != nil {
		return failErr(stderr, exitUsage, "version", err)
	}
	fmt.Fprintf(stdout, "outbox %s\ngo %s\nsqlite %s\n", moduleVersion(), runtime.Version(), sqliteVersion)
	return exitOK
}

// moduleVersion is the outbox library's version as the build recorded it: a tagged version when
// installed with `go install …@version`, "(devel)" when built from a checkout.
func moduleVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown)"
	}
	v := bi.Main.Version
	for _, d := range bi.Deps {
		if d.Path == "github.com/textmachine/outbox" && d.Replace == nil && d.Version != "" {
			v = d.Version
		}
	}
	if v == "" {
		v = "(devel)"
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" {
			v += " " + s.Value
		}
	}
	return v
}

func sqliteVersion() (string, error) {
	c, err := sqlite3.Open(":memory:")
	if err != nil {
		return "", err
	}
	defer c.Close()
	st, _, err := c.Prepare(`SELECT sqlite_version()`)
	if err != nil {
		return "", err
	}
	defer st.Close()
	if !st.Step() {
		return "", st.Err()
	}
	return st.ColumnText(0), nil
}
