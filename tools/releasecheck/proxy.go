// SPDX-License-Identifier: Apache-2.0

package main

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"
	"unicode"
)

// repoFiles lists what a tag would publish: the files git tracks, with their content in the working
// tree (so that the check tests what is about to be committed), and the untracked files that are
// not ignored. Deleted files, symbolic links and other irregular files are left out, as the go
// command leaves them out of a module zip.
func repoFiles(repo string) ([]string, error) {
	cmd := exec.Command("git", "-C", repo, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files: %w", exitError(err))
	}
	seen := map[string]bool{}
	var files []string
	for _, f := range strings.Split(string(out), "\x00") {
		if f == "" || seen[f] {
			continue
		}
		seen[f] = true
		fi, err := os.Lstat(filepath.Join(repo, filepath.FromSlash(f)))
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		files = append(files, f)
	}
	sort.Strings(files)
	return files, nil
}

// moduleFiles selects the files of the module in dir ("." for the root) as the module zip rules
// do: not those of a module nested in it (any directory below it with a go.mod), not those of a
// VCS directory, not vendored packages. It returns them relative to dir.
func moduleFiles(files []string, dir string) []string {
	prefix := ""
	if dir != "." {
		prefix = dir + "/"
	}
	var nested []string
	for _, f := range files {
		if path.Base(f) == "go.mod" && strings.HasPrefix(f, prefix) && path.Dir(f) != dir {
			nested = append(nested, path.Dir(f)+"/")
		}
	}
	var out []string
Files:
	for _, f := range files {
		if !strings.HasPrefix(f, prefix) {
			continue
		}
		for _, n := range nested {
			if strings.HasPrefix(f, n) {
				continue Files
			}
		}
		rel := strings.TrimPrefix(f, prefix)
		for _, elem := range strings.Split(path.Dir(rel), "/") {
			switch elem {
			case ".git", ".hg", ".svn", ".bzr":
				continue Files
			}
		}
		if vendored(rel) {
			continue
		}
		out = append(out, rel)
	}
	return out
}

// vendored reports whether name is a file of a vendored package (vendor/modules.txt is not, and
// stays in the zip).
func vendored(name string) bool {
	i := 0
	if strings.HasPrefix(name, "vendor/") {
		i = len("vendor/")
	} else if j := strings.Index(name, "/vendor/"); j >= 0 {
		i = j + len("/vendor/")
	} else {
		return false
	}
	return strings.Contains(name[i:], "/")
}

// serve writes the module in dir at version into the proxy directory in the GOPROXY protocol's
// layout: $module/@v/list, $version.info, $version.mod and $version.zip. The go command checks the
// zip against its rules (paths, sizes, case collisions) when it extracts it.
func serve(proxy, repo string, files []string, dir, modPath, version string) error {
	esc, err := escapePath(modPath)
	if err != nil {
		return err
	}
	vdir := filepath.Join(proxy, filepath.FromSlash(esc), "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return err
	}
	gomod, err := os.ReadFile(filepath.Join(repo, filepath.FromSlash(dir), "go.mod"))
	if err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, time.Now().UTC().Truncate(time.Second)})
	if err != nil {
		return err
	}
	var zbuf bytes.Buffer
	zw := zip.NewWriter(&zbuf)
	for _, rel := range moduleFiles(files, dir) {
		w, err := zw.Create(modPath + "@" + version + "/" + rel)
		if err != nil {
			return err
		}
		f, err := os.Open(filepath.Join(repo, filepath.FromSlash(dir), filepath.FromSlash(rel)))
		if err != nil {
			return err
		}
		_, err = io.Copy(w, f)
		f.Close()
		if err != nil {
			return err
		}
	}
	if err := zw.Close(); err != nil {
		return err
	}
	for name, data := range map[string][]byte{
		"list":            []byte(version + "\n"),
		version + ".info": info,
		version + ".mod":  gomod,
		version + ".zip":  zbuf.Bytes(),
	} {
		if err := os.WriteFile(filepath.Join(vdir, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// escapePath is the module cache's and the proxy protocol's case encoding: an upper-case letter is
// "!" and the letter in lower case.
func escapePath(p string) (string, error) {
	var b strings.Builder
	for _, r := range p {
		switch {
		case r == '!' || r >= unicode.MaxASCII:
			return "", fmt.Errorf("module path %q: character %q", p, r)
		case 'A' <= r && r <= 'Z':
			b.WriteByte('!')
			b.WriteRune(unicode.ToLower(r))
		default:
			b.WriteRune(r)
		}
	}
	return b.String(), nil
}
