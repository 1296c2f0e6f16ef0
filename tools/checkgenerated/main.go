// SPDX-License-Identifier: Apache-2.0

// Command checkgenerated fails when a directory that sqlc generates into (db/, and any other `out`
// of sqlc.yaml) holds a file that sqlc does not generate: `sqlc diff` compares only the files it
// generates, so a hand-written or left-over file there would pass it, and be overwritten or go
// stale at the next `make generate`.
//
// It copies the files a commit would hold (those git tracks, and the untracked ones it does not
// ignore) into a temporary directory, dates them all in the past, and runs `sqlc generate` there
// with the copied sqlc.yaml: the files sqlc wrote are the generated ones, their directories the
// output directories, and any other file in those directories is reported. It reads sqlc.yaml
// through sqlc itself, so every output directory counts, however the configuration names it.
//
// Usage, from tools/: GOWORK=off go run ./checkgenerated REPO
package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: checkgenerated REPO")
		os.Exit(2)
	}
	strays, err := run(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "check-generated:", err)
		os.Exit(1)
	}
	if len(strays) > 0 {
		fmt.Fprintln(os.Stderr, "check-generated: sqlc does not generate these files in its output directories (move them out, or delete them):")
		for _, s := range strays {
			fmt.Fprintln(os.Stderr, "\t"+s)
		}
		os.Exit(1)
	}
}

// inputsRecord is the one file of an output directory that sqlc does not write and belongs there:
// the list of what the generated code was generated from (tools/gendigest, make generate).
const inputsRecord = "db/.inputs.sha256"

// past is the time every copied file is dated at; sqlc's output is dated now.
var past = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

func run(repo string) ([]string, error) {
	repo, err := filepath.Abs(repo)
	if err != nil {
		return nil, err
	}
	files, err := commitFiles(repo)
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "outbox-check-generated-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	for _, f := range files {
		if err := copyFile(filepath.Join(repo, f), filepath.Join(tmp, f)); err != nil {
			return nil, err
		}
	}
	cmd := exec.Command("go", "tool", "sqlc", "-f", filepath.Join(tmp, "sqlc.yaml"), "generate")
	cmd.Dir = filepath.Join(repo, "tools")
	// Without cgo, as the Makefile's SQLC builds it: go tool keeps one sqlc per build
	// configuration, and the cgo one is a build of libpg_query's C of its own, with the same output.
	cmd.Env = append(os.Environ(), "GOWORK=off", "CGO_ENABLED=0")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("sqlc generate: %v\n%s", err, out.String())
	}
	generated := map[string]bool{}
	outDirs := map[string]bool{}
	err = filepath.WalkDir(tmp, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if fi.ModTime().After(past) {
			rel, _ := filepath.Rel(tmp, p)
			generated[rel] = true
			outDirs[filepath.Dir(rel)] = true
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(outDirs) == 0 {
		return nil, errors.New("sqlc generate wrote nothing: cannot tell its output directories")
	}
	var strays []string
	for _, f := range files {
		if filepath.ToSlash(f) == inputsRecord {
			continue
		}
		for dir := range outDirs {
			if strings.HasPrefix(f, dir+string(filepath.Separator)) && !generated[f] {
				strays = append(strays, filepath.ToSlash(f))
				break
			}
		}
	}
	sort.Strings(strays)
	return strays, nil
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

func copyFile(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Chtimes(dst, past, past)
}
