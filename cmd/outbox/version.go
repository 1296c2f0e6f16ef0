// SPDX-License-Identifier: Apache-2.0

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

// libraryPath is the module whose version the command reports: the library every command works on.
const libraryPath = "github.com/textmachine/outbox"

// moduleVersion is the version line's first field or fields, read from what the build recorded.
func moduleVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown)"
	}
	return versionOf(bi)
}

// versionOf names the release the binary was built from, with its VCS revision when the build
// stamped one (see buildVersion): "v0.1.0", "(devel) (revision abc…, modified)".
func versionOf(bi *debug.BuildInfo) string {
	v, rev, modified := buildVersion(bi)
	if rev != "" {
		v += " (revision " + rev
		if modified {
			v += ", modified"
		}
		v += ")"
	}
	return v
}

// buildVersion reads the release the binary was built from: the library's version as the build
// selected it (what `go install …/cmd/outbox@v0.1.0` records, and what a program that imports the
// command's packages from a newer library would record), else the command module's own version
// (which the go command derives from the VCS tag of a checkout), else "(devel)"; and the VCS
// revision when the build stamped one (a build inside a git clone, not from a module zip), with
// whether the tree had uncommitted changes, so that a "(devel)" binary still says what it is.
// `outbox version` prints them, and outbox_build_info carries them.
func buildVersion(bi *debug.BuildInfo) (version, revision string, modified bool) {
	for _, d := range bi.Deps {
		if d.Path != libraryPath {
			continue
		}
		if d.Replace != nil {
			d = d.Replace
		}
		if released(d.Version) {
			version = d.Version
		}
	}
	if version == "" && released(bi.Main.Version) {
		version = bi.Main.Version
	}
	if version == "" {
		version = "(devel)"
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	return version, revision, modified
}

// released reports whether v is a version the go command resolved, rather than the placeholder of
// a module built from a directory (a workspace module or a local replacement).
func released(v string) bool {
	return v != "" && v != "(devel)"
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
