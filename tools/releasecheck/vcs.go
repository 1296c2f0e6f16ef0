// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
)

// checkRevision builds the command in the workspace of a clone of HEAD (a git worktree's .git is a
// file, which the go command does not stamp from), with VCS stamping on whatever GOFLAGS says, and
// fails unless the first line of its `outbox version` names the revision. It runs in env, the
// offline environment, the workspace's go.work aside. It returns the revision.
func checkRevision(repo, tmp string, env []string) (string, error) {
	out, err := exec.Command("git", "-C", repo, "rev-parse", "HEAD").Output()
	if err != nil {
		return "", fmt.Errorf("git rev-parse HEAD: %w", exitError(err))
	}
	head := strings.TrimSpace(string(out))
	clone := filepath.Join(tmp, "clone")
	if out, err := exec.Command("git", "clone", "--quiet", repo, clone).CombinedOutput(); err != nil {
		return "", fmt.Errorf("git clone: %v\n%s", err, out)
	}
	// The go command records the pseudo-version it derives from the revision in its module cache:
	// the offline one, in the temporary directory, which already holds what the build needs.
	env = append(withGOFLAGS(env, "-buildvcs=true -mod=readonly -modcacherw -trimpath"), "GOWORK=")
	bin := filepath.Join(tmp, "bin", "outbox-clone")
	if _, err := runIn(clone, env, "go", "build", "-o", bin, "./cmd/outbox"); err != nil {
		return "", err
	}
	got, err := runIn(clone, env, bin, "version")
	if err != nil {
		return "", err
	}
	first, _, _ := strings.Cut(got, "\n")
	want := regexp.MustCompile(`^outbox \S+ \(revision ` + head + `\)$`)
	if !want.MatchString(first) {
		return "", fmt.Errorf("outbox version of a build in a clone printed %q, want its first line to match %s", got, want)
	}
	return head[:12], nil
}
