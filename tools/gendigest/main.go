// SPDX-License-Identifier: Apache-2.0

// Command gendigest records, and checks, what sqlc's generated code was generated from: the SHA-256
// of every file that goes into `sqlc generate` (sqlc.yaml, the queries and the migrations of the
// outbox and the inbox, and tools/go.mod and go.sum, which pin sqlc) and of every file in its output
// directories (db/, inbox/internal/db/). `make generate` writes the list to db/.inputs.sha256 after sqlc has
// run; `make check-generated` compares it first and builds and runs sqlc only when something
// differs, since building sqlc (cgo, its Postgres parser) is the longest step of a cold `make test`.
// A generated file edited by hand, a stray file in an output directory, a query, a migration or
// a new sqlc all change the list. CI runs sqlc whatever the list says (CI=true).
//
// The files are those a commit would hold (git ls-files: tracked, and untracked but not ignored),
// so a build artefact left in the tree does not count.
//
// Usage, from tools/: GOWORK=off go run ./gendigest [-write] REPO. Without -write it exits 0 when
// the recorded list is the current one, 1 (naming what differs) when it is not, 2 on an error.
package main

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// Record is where the list is kept, relative to the repository, beside the generated code.
const Record = "db/.inputs.sha256"

// What sqlc reads (the .sql files of these directories, and these files) and writes (every file of
// these directories).
var (
	sqlDirs  = []string{"queries", "migrations", "inbox/queries", "inbox/migrations"}
	outDirs  = []string{"db", "inbox/internal/db"}
	oneFiles = []string{"sqlc.yaml", "tools/go.mod", "tools/go.sum"}
)

const header = "# The files `make generate` generated db/ and inbox/internal/db/ from, and wrote there, with their SHA-256.\n" +
	"# Written by `make generate`; `make check-generated` runs sqlc only when they differ. Do not edit.\n"

func main() {
	write := flag.Bool("write", false, "write the record instead of checking it")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: gendigest [-write] REPO")
		os.Exit(2)
	}
	repo := flag.Arg(0)
	list, err := digests(repo)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gendigest:", err)
		os.Exit(2)
	}
	if *write {
		if err := os.WriteFile(filepath.Join(repo, Record), []byte(list), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "gendigest:", err)
			os.Exit(2)
		}
		return
	}
	old, err := os.ReadFile(filepath.Join(repo, Record))
	if errors.Is(err, os.ErrNotExist) {
		fmt.Printf("gendigest: no %s (make generate writes it)\n", Record)
		os.Exit(1)
	} else if err != nil {
		fmt.Fprintln(os.Stderr, "gendigest:", err)
		os.Exit(2)
	}
	if string(old) == list {
		return
	}
	fmt.Printf("gendigest: changed since %s was written:%s\n", Record, changed(string(old), list))
	os.Exit(1)
}

// wanted reports whether the file at the slash-separated path rel goes into sqlc or comes out of it.
func wanted(rel string) bool {
	if rel == Record {
		return false
	}
	for _, f := range oneFiles {
		if rel == f {
			return true
		}
	}
	dir := path.Dir(rel)
	for _, d := range outDirs {
		if dir == d || strings.HasPrefix(dir, d+"/") {
			return true
		}
	}
	for _, d := range sqlDirs {
		if dir == d && strings.HasSuffix(rel, ".sql") {
			return true
		}
	}
	return false
}

// digests lists "sha256  path" of every wanted file, in path order, under the header.
func digests(repo string) (string, error) {
	out, err := exec.Command("git", "-C", repo, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%v: %s", err, bytes.TrimSpace(ee.Stderr))
		}
		return "", fmt.Errorf("git ls-files: %w", err)
	}
	seen := map[string]bool{}
	var files []string
	for _, f := range strings.Split(string(out), "\x00") {
		if f == "" || seen[f] || !wanted(f) {
			continue
		}
		seen[f] = true
		if fi, err := os.Lstat(filepath.Join(repo, filepath.FromSlash(f))); err == nil && fi.Mode().IsRegular() {
			files = append(files, f)
		}
	}
	sort.Strings(files)
	var b strings.Builder
	b.WriteString(header)
	for _, f := range files {
		h := sha256.New()
		in, err := os.Open(filepath.Join(repo, filepath.FromSlash(f)))
		if err != nil {
			return "", err
		}
		_, err = io.Copy(h, in)
		in.Close()
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "%x  %s\n", h.Sum(nil), f)
	}
	return b.String(), nil
}

// changed names the files whose lines differ between the two lists.
func changed(old, cur string) string {
	index := func(list string) map[string]string {
		m := map[string]string{}
		for _, l := range strings.Split(list, "\n") {
			if sum, f, ok := strings.Cut(l, "  "); ok && !strings.HasPrefix(l, "#") {
				m[f] = sum
			}
		}
		return m
	}
	o, c := index(old), index(cur)
	var names []string
	for f, sum := range c {
		if o[f] != sum {
			names = append(names, f)
		}
	}
	for f := range o {
		if _, ok := c[f]; !ok {
			names = append(names, f+" (gone)")
		}
	}
	sort.Strings(names)
	if len(names) == 0 {
		return " " + Record + " itself"
	}
	return " " + strings.Join(names, ", ")
}
