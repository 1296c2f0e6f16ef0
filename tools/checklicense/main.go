// SPDX-License-Identifier: Apache-2.0

// Command checklicense fails when the repository's licence is not stated where the Go ecosystem
// looks for it:
//
//   - every module (each directory with a go.mod) holds a LICENSE identical to the root's, since a
//     module zip carries only its own directory's files and pkg.go.dev reads the licence from it;
//   - every hand-written Go and assembly file (.go, .s, .h) opens with the line
//     "// SPDX-License-Identifier: Apache-2.0" followed by a blank line, so that the line never
//     joins the package's doc comment. Files that declare themselves generated ("// Code generated
//     … DO NOT EDIT.", as sqlc writes into db/ and inbox/internal/db/) are left to their generator.
//
// It reads the files a commit would hold (those git tracks, and the untracked ones it does not
// ignore). With -fix it adds the missing lines and copies the missing LICENSE files instead of
// failing on them; a LICENSE that differs from the root's is reported, never overwritten.
//
// Usage, from tools/: GOWORK=off go run ./checklicense [-fix] REPO
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// spdxLine is the first line of every hand-written source file.
const spdxLine = "// SPDX-License-Identifier: Apache-2.0"

// generated is the line that marks a generated file (https://go.dev/s/generatedcode).
var generated = regexp.MustCompile(`^// Code generated .* DO NOT EDIT\.$`)

func main() {
	fix := flag.Bool("fix", false, "add the missing SPDX lines and LICENSE files instead of failing")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: checklicense [-fix] REPO")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	problems, fixed, err := run(flag.Arg(0), *fix)
	if err != nil {
		fmt.Fprintln(os.Stderr, "check-license:", err)
		os.Exit(1)
	}
	for _, f := range fixed {
		fmt.Println("fixed", f)
	}
	if len(problems) > 0 {
		fmt.Fprintln(os.Stderr, "check-license: the licence is not stated where it must be (make fix-license adds what is missing):")
		for _, p := range problems {
			fmt.Fprintln(os.Stderr, "\t"+p)
		}
		os.Exit(1)
	}
}

// run checks the files of the repository at repo and returns what is wrong, each as "path: why",
// and, with fix, the files it changed.
func run(repo string, fix bool) (problems, fixed []string, err error) {
	files, err := commitFiles(repo)
	if err != nil {
		return nil, nil, err
	}
	license, err := os.ReadFile(filepath.Join(repo, "LICENSE"))
	if err != nil {
		return nil, nil, fmt.Errorf("the repository has no LICENSE at its root: %w", err)
	}
	for _, f := range files {
		p := filepath.Join(repo, f)
		switch {
		case filepath.Base(f) == "go.mod" && !inTestdata(f):
			lf := filepath.Join(filepath.Dir(f), "LICENSE")
			have, err := os.ReadFile(filepath.Join(repo, lf))
			switch {
			case errors.Is(err, os.ErrNotExist) && fix:
				if err := os.WriteFile(filepath.Join(repo, lf), license, 0o644); err != nil {
					return nil, nil, err
				}
				fixed = append(fixed, filepath.ToSlash(lf))
			case errors.Is(err, os.ErrNotExist):
				problems = append(problems, filepath.ToSlash(lf)+": missing: the module's zip would carry no licence")
			case err != nil:
				return nil, nil, err
			case !bytes.Equal(have, license):
				problems = append(problems, filepath.ToSlash(lf)+": differs from the root's LICENSE")
			}
		case isSource(f) && !inTestdata(f):
			data, err := os.ReadFile(p)
			if err != nil {
				return nil, nil, err
			}
			why := checkSource(data)
			if why == "" {
				continue
			}
			if fix && (why == whyMissing || why == whyJoinsDoc) {
				fi, err := os.Stat(p)
				if err != nil {
					return nil, nil, err
				}
				if err := os.WriteFile(p, addSPDX(data), fi.Mode().Perm()); err != nil {
					return nil, nil, err
				}
				fixed = append(fixed, filepath.ToSlash(f))
				continue
			}
			problems = append(problems, filepath.ToSlash(f)+": "+why)
		}
	}
	sort.Strings(problems)
	return problems, fixed, nil
}

const (
	whyMissing  = "does not open with the line " + `"` + spdxLine + `"`
	whyJoinsDoc = "the SPDX line must be followed by a blank line, or it joins the doc comment below it"
	whyOther    = "names another licence than Apache-2.0"
)

// checkSource says what is wrong with a source file's licence line, or "" when nothing is.
func checkSource(data []byte) string {
	if isGenerated(data) {
		return ""
	}
	first, rest, _ := strings.Cut(string(data), "\n")
	first = strings.TrimSuffix(first, "\r")
	if strings.HasPrefix(first, "// SPDX-License-Identifier:") && first != spdxLine {
		return whyOther
	}
	if first != spdxLine {
		return whyMissing
	}
	second, _, _ := strings.Cut(rest, "\n")
	if strings.TrimSpace(second) != "" {
		return whyJoinsDoc
	}
	return ""
}

// addSPDX puts the licence line, and the blank line that keeps it out of any doc comment, above
// everything else (a build constraint may follow comments, so it stays in force), or adds the blank
// line below a licence line that lacks it.
func addSPDX(data []byte) []byte {
	if rest, ok := bytes.CutPrefix(data, []byte(spdxLine+"\n")); ok {
		return append([]byte(spdxLine+"\n\n"), rest...)
	}
	return append([]byte(spdxLine+"\n\n"), data...)
}

// isGenerated reports whether a "Code generated … DO NOT EDIT." line appears in the file's leading
// comments, where Go's convention puts it (before the package clause, or any code of an assembly
// file).
func isGenerated(data []byte) bool {
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSuffix(line, "\r")
		if generated.MatchString(line) {
			return true
		}
		if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "//") {
			return false
		}
	}
	return false
}

func isSource(f string) bool {
	switch filepath.Ext(f) {
	case ".go", ".s", ".h":
		return true
	}
	return false
}

// inTestdata reports whether f lies under a testdata directory, which the go command ignores: what
// is there is a test's input, not the project's source.
func inTestdata(f string) bool {
	for _, part := range strings.Split(filepath.ToSlash(f), "/") {
		if part == "testdata" {
			return true
		}
	}
	return false
}

// commitFiles lists, relative to repo, the regular files git tracks (and still exist) and the
// untracked ones it does not ignore.
func commitFiles(repo string) ([]string, error) {
	out, err := exec.Command("git", "-C", repo, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%v: %s", err, bytes.TrimSpace(ee.Stderr))
		}
		return nil, fmt.Errorf("git ls-files: %w", err)
	}
	seen := map[string]bool{}
	var files []string
	for _, f := range strings.Split(string(out), "\x00") {
		f = filepath.FromSlash(f)
		if f == "" || seen[f] {
			continue
		}
		seen[f] = true
		if fi, err := os.Lstat(filepath.Join(repo, f)); err == nil && fi.Mode().IsRegular() {
			files = append(files, f)
		}
	}
	return files, nil
}
