// SPDX-License-Identifier: Apache-2.0

// Command releasecheck installs and fetches the repository's modules the way a user does, before
// they are tagged: it serves the tree, at the version the modules require of each other, from a
// file-based module proxy in a temporary directory, then in an empty module runs
// `go install github.com/textmachine/outbox/cmd/outbox@VERSION` (and the installed `outbox
// version`, which must name VERSION), `go get github.com/textmachine/outbox/jetstream@VERSION` and
// `go get github.com/textmachine/outbox/otel@VERSION` and `.../metrics@VERSION`, and builds a program against what it fetched. Both binaries must hold the third-party modules at
// the versions the workspace selects, those the tests ran against. Last, the command built in a
// clone of HEAD must name that revision in its `outbox version`.
//
// It runs offline: the go commands it starts see only the file proxy, then the download cache of
// the machine's module cache (where the normal build left the third-party modules), no sum
// database and no VCS, so no server is ever asked for the outbox modules at that version. Their
// module cache, GOPATH and GOBIN are in the temporary directory, removed at the end; only the build
// cache is shared (with -trimpath, so that the second run compiles nothing). A build in a clone
// also runs in that environment: the go command writes the pseudo-version it derives from the
// revision into its module cache.
//
// Usage, from tools/: GOWORK=off go run ./releasecheck [-keep] REPO
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

const (
	library   = "github.com/textmachine/outbox"
	command   = library + "/cmd/outbox"
	jetstream = library + "/jetstream"
	otel      = library + "/otel"
	metrics   = library + "/metrics"
)

// modules are the repository's modules, by directory; each is checked, and those a user installs
// or fetches are served.
var modules = []struct {
	dir, path string
	serve     bool
}{
	{".", library, true},
	{"jetstream", jetstream, true},
	{"cmd/outbox", command, true},
	{"bench", library + "/bench", false},
	{"otel", otel, true},
	{"metrics", metrics, true},
	{"examples", library + "/examples", false},
}

func main() {
	keep := flag.Bool("keep", false, "keep the temporary directory and print its name")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: releasecheck [-keep] REPO")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(flag.Arg(0), *keep); err != nil {
		fmt.Fprintln(os.Stderr, "release check:", err)
		os.Exit(1)
	}
}

func run(repo string, keep bool) error {
	start := time.Now()
	repo, err := filepath.Abs(repo)
	if err != nil {
		return err
	}
	version, err := checkModules(repo)
	if err != nil {
		return err
	}
	if err := checkReadme(repo, version); err != nil {
		return err
	}
	cache, err := goEnv("GOMODCACHE")
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "outbox-release-check-")
	if err != nil {
		return err
	}
	if keep {
		fmt.Println("release check: keeping", tmp)
	} else {
		defer removeAll(tmp)
	}
	files, err := repoFiles(repo)
	if err != nil {
		return err
	}
	proxy := filepath.Join(tmp, "proxy")
	for _, m := range modules {
		if m.serve {
			if err := serve(proxy, repo, files, m.dir, m.path, version); err != nil {
				return fmt.Errorf("%s: %w", m.path, err)
			}
		}
	}
	env := offlineEnv(tmp, proxy, filepath.Join(cache, "cache", "download"))
	work := filepath.Join(tmp, "work")
	if err := os.Mkdir(work, 0o755); err != nil {
		return err
	}
	if _, err := runIn(work, env, "go", "mod", "init", "example.com/adopter"); err != nil {
		return err
	}
	// go install as a user runs it: without -mod=mod, which could hide a requirement the
	// command's go.mod lacks.
	if _, err := runIn(work, withGOFLAGS(env, "-modcacherw -trimpath"), "go", "install", command+"@"+version); err != nil {
		return err
	}
	out, err := runIn(work, env, filepath.Join(tmp, "bin", "outbox"), "version")
	if err != nil {
		return err
	}
	if first, _, _ := strings.Cut(out, "\n"); first != "outbox "+version {
		return fmt.Errorf("outbox version printed %q, want its first line to be %q", out, "outbox "+version)
	}
	if _, err := runIn(work, env, "go", "get", jetstream+"@"+version, otel+"@"+version, metrics+"@"+version); err != nil {
		return err
	}
	got, err := runIn(work, env, "go", "list", "-m", "-f", "{{.Path}} {{.Version}}", jetstream, otel, metrics, library)
	if err != nil {
		return err
	}
	if want := jetstream + " " + version + "\n" + otel + " " + version + "\n" + metrics + " " + version + "\n" + library + " " + version + "\n"; got != want {
		return fmt.Errorf("after go get, the empty module requires\n%swant\n%s", got, want)
	}
	if err := os.WriteFile(filepath.Join(work, "main.go"), []byte(adopter), 0o644); err != nil {
		return err
	}
	if _, err := runIn(work, env, "go", "build", "-o", filepath.Join(tmp, "bin", "adopter"), "."); err != nil {
		return err
	}
	if err := checkTested(repo, filepath.Join(tmp, "bin", "outbox"), filepath.Join(tmp, "bin", "adopter")); err != nil {
		return err
	}
	rev, err := checkRevision(repo, tmp, env)
	if err != nil {
		return err
	}
	fmt.Printf("release check: %s installs, fetches and builds as %s, and names revision %s from a clone (%s)\n",
		command, version, rev, time.Since(start).Round(time.Second))
	return nil
}

// adopter is the program a user writes first: the store, the NATS sink, the trace context and the
// Prometheus collectors, from
// fetched modules.
const adopter = `package main

import (
	"github.com/textmachine/outbox/jetstream"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/metrics"
	"github.com/textmachine/outbox/otel"
	"github.com/textmachine/outbox/outbox"
)

var _ = outbox.Open
var _ = journal.Handshake
var _ = jetstream.NewSink
var _ = otel.WithTrace
var _ = metrics.NewCollector

func main() {}
`

var releaseVersion = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$`)

// checkModules enforces what makes the modules publishable: no go.mod has a replace directive, and
// every requirement of one of the repository's modules names the same released version, which it
// returns.
func checkModules(repo string) (string, error) {
	version := ""
	for _, m := range modules {
		gomod := filepath.Join(repo, m.dir, "go.mod")
		out, err := exec.Command("go", "mod", "edit", "-json", gomod).Output()
		if err != nil {
			return "", fmt.Errorf("go mod edit -json %s: %w", gomod, exitError(err))
		}
		var f struct {
			Module  struct{ Path string }
			Require []struct{ Path, Version string }
			Replace []struct{ Old struct{ Path string } }
		}
		if err := json.Unmarshal(out, &f); err != nil {
			return "", fmt.Errorf("%s: %w", gomod, err)
		}
		if f.Module.Path != m.path {
			return "", fmt.Errorf("%s: module %s, want %s", gomod, f.Module.Path, m.path)
		}
		for _, r := range f.Replace {
			return "", fmt.Errorf("%s replaces %s: a user's go install and go get ignore it (the workspace's replacements belong in go.work)", gomod, r.Old.Path)
		}
		for _, r := range f.Require {
			if r.Path != library && !strings.HasPrefix(r.Path, library+"/") {
				continue
			}
			if !releaseVersion.MatchString(r.Version) {
				return "", fmt.Errorf("%s requires %s %s, not a released version", gomod, r.Path, r.Version)
			}
			if version != "" && r.Version != version {
				return "", fmt.Errorf("%s requires %s %s, another module %s: the modules are released together", gomod, r.Path, r.Version, version)
			}
			version = r.Version
		}
	}
	if version == "" {
		return "", errors.New("no module requires another: nothing names the release")
	}
	return version, nil
}

// checkTested fails when a binary built from the served modules holds a third-party module at
// another version than the workspace selects, the one the tests ran against: a module's go.mod then
// requires less than the workspace needs, and `go work sync` raises it.
func checkTested(repo string, binaries ...string) error {
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Path}} {{.Version}}", "all")
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "GOWORK=") // this program runs with GOWORK=off, outside the workspace
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("go list -m all in the workspace: %w", exitError(err))
	}
	tested := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if p, v, ok := strings.Cut(line, " "); ok {
			tested[p] = v
		}
	}
	var wrong []string
	for _, bin := range binaries {
		out, err := exec.Command("go", "version", "-m", bin).Output()
		if err != nil {
			return fmt.Errorf("go version -m %s: %w", bin, exitError(err))
		}
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			if len(f) < 3 || (f[0] != "dep" && f[0] != "=>") || f[1] == library || strings.HasPrefix(f[1], library+"/") {
				continue
			}
			if tested[f[1]] != f[2] {
				wrong = append(wrong, fmt.Sprintf("%s: %s %s, the workspace tests %q", filepath.Base(bin), f[1], f[2], tested[f[1]]))
			}
		}
	}
	if len(wrong) > 0 {
		return fmt.Errorf("the released modules build other versions than the tests ran (run go work sync):\n\t%s", strings.Join(wrong, "\n\t"))
	}
	return nil
}

// checkReadme makes sure the README's release section names the version the modules require.
func checkReadme(repo, version string) error {
	b, err := os.ReadFile(filepath.Join(repo, "README.md"))
	if err != nil {
		return err
	}
	if !bytes.Contains(b, []byte("`"+version+"`")) {
		return fmt.Errorf("README.md does not name the release %s that the modules require of each other", version)
	}
	return nil
}

// offlineEnv is the environment of the go commands the check runs: every variable that could send
// the go command to a server, or into the user's module cache or workspace, is set.
func offlineEnv(tmp, proxy, download string) []string {
	set := map[string]string{
		"GOPROXY":     fileURL(proxy) + "," + fileURL(download),
		"GOSUMDB":     "off",
		"GONOSUMDB":   "",
		"GONOPROXY":   "",
		"GOPRIVATE":   "",
		"GOINSECURE":  "",
		"GOVCS":       "*:off",
		"GOFLAGS":     "-mod=mod -modcacherw -trimpath",
		"GOWORK":      "off",
		"GOTOOLCHAIN": "local",
		"GO111MODULE": "on",
		"GOPATH":      filepath.Join(tmp, "gopath"),
		"GOMODCACHE":  filepath.Join(tmp, "gopath", "pkg", "mod"),
		"GOBIN":       filepath.Join(tmp, "bin"),
	}
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := set[k]; !ok {
			env = append(env, kv)
		}
	}
	for k, v := range set {
		env = append(env, k+"="+v)
	}
	return env
}

func withGOFLAGS(env []string, flags string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if !strings.HasPrefix(kv, "GOFLAGS=") {
			out = append(out, kv)
		}
	}
	return append(out, "GOFLAGS="+flags)
}

func fileURL(dir string) string {
	return "file://" + filepath.ToSlash(dir)
}

func goEnv(name string) (string, error) {
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		return "", fmt.Errorf("go env %s: %w", name, exitError(err))
	}
	v := strings.TrimSpace(string(out))
	if v == "" {
		return "", fmt.Errorf("go env %s is empty", name)
	}
	return v, nil
}

func runIn(dir string, env []string, args ...string) (string, error) {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = dir
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

func exitError(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(ee.Stderr) > 0 {
		return fmt.Errorf("%v: %s", err, bytes.TrimSpace(ee.Stderr))
	}
	return err
}

// removeAll removes the temporary directory; -modcacherw left the module cache in it writable.
func removeAll(dir string) {
	if err := os.RemoveAll(dir); err != nil {
		fmt.Fprintln(os.Stderr, "release check:", err)
	}
}
