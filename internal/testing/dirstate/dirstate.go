// SPDX-License-Identifier: Apache-2.0

// Package dirstate snapshots a directory, so that a test can say an operation left it as it found
// it: no file created, removed or changed; and copies a file into one. It imports nothing of the project, so that the outbox
// package's own tests can use it as well as every other package's.
package dirstate

import (
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// Snapshot maps the name of every entry of dir to a SHA-256 digest of its bytes; compare two
// snapshots with cmp.Diff. A subdirectory, or an entry that cannot be read, fails the test.
func Snapshot(t testing.TB, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = fmt.Sprintf("%x", sha256.Sum256(b))
	}
	return out
}

// CopyFile copies the file from to the path to, created or truncated with mode: a test's copy of a
// book, or of its own binary to run from a directory it then makes read-only.
func CopyFile(t testing.TB, from, to string, mode os.FileMode) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
