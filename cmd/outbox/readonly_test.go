// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/textmachine/outbox/internal/testing/dirstate"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// sharedBook copies book's database and journal into a directory that another user can read, with
// this test binary beside it, and returns the directory's parent, the directory and both paths.
func sharedBook(t *testing.T) (base, dir, dbPath, jPath string) {
	t.Helper()
	base, err := os.MkdirTemp("", "outbox-cli-wal-")
	if err != nil {
		t.Fatal(err)
	}
	dir = filepath.Join(base, "book")
	t.Cleanup(func() { os.Chmod(dir, 0o755); os.RemoveAll(base) })
	os.Chmod(base, 0o755)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	srcDB, srcJ := book(t)
	dbPath, jPath = filepath.Join(dir, "book.db"), filepath.Join(dir, "journal.jsonl")
	dirstate.CopyFile(t, srcDB, dbPath, 0o644)
	dirstate.CopyFile(t, srcJ, jPath, 0o644)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dirstate.CopyFile(t, exe, filepath.Join(base, "outbox"), 0o755)
	return base, dir, dbPath, jPath
}

// engineOn opens dbPath for writing, commits two lines of run "dead" to its WAL, and leaves it open.
func engineOn(t *testing.T, dbPath string) *outbox.Store {
	t.Helper()
	ctx := context.Background()
	s, err := outbox.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	for i := range 2 {
		if _, err := s.EnqueueEvent(ctx, "dead", journal.Builder("dead", "late", i)); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// crashBook leaves in dir what an engine killed with the book at dbPath open leaves: the database
// and its -wal holding the engine's last commits, and its -shm unless withShm is false. It copies a
// running engine's files between commits, which is what a kill leaves on disk.
func crashBook(t *testing.T, dbPath string, withShm bool) {
	t.Helper()
	live := filepath.Join(t.TempDir(), "live.db")
	dirstate.CopyFile(t, dbPath, live, 0o644)
	s := engineOn(t, live)
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if suffix != "-shm" || withShm {
			dirstate.CopyFile(t, live+suffix, dbPath+suffix, 0o644)
		}
	}
	s.Close()
}

// asNobody is the outbox command in base run with args, as the user nobody when this process is root
// (whom permissions do not bind).
func asNobody(base string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(base, "outbox"), args...)
	cmd.Env = append(os.Environ(), asOutbox+"=1")
	if os.Geteuid() == 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	}
	return cmd
}

// unwritable makes the book's files and directory read-only, which binds this user when it is not
// root, and nobody in any case.
func unwritable(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		os.Chmod(filepath.Join(dir, e.Name()), 0o444)
	}
	os.Chmod(dir, 0o555)
}

// pendingDead is how many lines `pending --run dead` prints for the books above: the book's three
// and the engine's two.
const pendingDead = 5

func TestReadOnlyCommandsWorkWithoutWriteAccessBesideARunningEngineAndOnACrashedBook(t *testing.T) {
	for _, state := range []string{"beside a running engine", "on a crashed book with its -shm", "on a crashed book without a -shm"} {
		t.Run(state, func(t *testing.T) {
			base, dir, dbPath, jPath := sharedBook(t)
			if state == "beside a running engine" {
				engineOn(t, dbPath)
			} else {
				crashBook(t, dbPath, strings.Contains(state, "with its"))
			}
			unwritable(dir)
			before := dirstate.Snapshot(t, dir)
			for _, args := range readOnlyRuns(dbPath, jPath) {
				if code, _, errOut := runCmd(t, asNobody(base, args...)); code != exitOK {
					t.Errorf("%v: exit %d: %s", args, code, errOut)
				}
			}
			code, out, errOut := runCmd(t, asNobody(base, "pending", "--db", dbPath, "--run", "dead"))
			if code != exitOK || strings.Count(out, "\n") != pendingDead {
				t.Errorf("pending: exit %d, %s; want the engine's commits too:\n%s", code, errOut, out)
			}
			if state != "beside a running engine" {
				if diff := cmp.Diff(before, dirstate.Snapshot(t, dir)); diff != "" {
					t.Errorf("the directory changed (-before +after):\n%s", diff)
				}
			}
		})
	}
}

// TestReadOnlyCommandsLeaveACrashedBookAsItWas runs them as this user, who may write every file
// (root included): they write and create nothing all the same.
func TestReadOnlyCommandsLeaveACrashedBookAsItWas(t *testing.T) {
	for _, withShm := range []bool{true, false} {
		t.Run(fmt.Sprintf("with the -shm %v", withShm), func(t *testing.T) {
			dbPath, jPath := book(t)
			crashBook(t, dbPath, withShm)
			dir := filepath.Dir(dbPath)
			before := dirstate.Snapshot(t, dir)
			for _, args := range readOnlyRuns(dbPath, jPath) {
				if code, _, errOut := runOutbox(t, args...); code != exitOK {
					t.Errorf("%v: exit %d: %s", args, code, errOut)
				}
				if diff := cmp.Diff(before, dirstate.Snapshot(t, dir)); diff != "" {
					t.Fatalf("%v changed the directory (-before +after):\n%s", args, diff)
				}
			}
			if _, out, _ := runOutbox(t, "pending", "--db", dbPath, "--run", "dead"); strings.Count(out, "\n") != pendingDead {
				t.Errorf("pending does not show the crashed engine's last commits:\n%s", out)
			}
			url, stop := startMetrics(t, dbPath)
			for range 2 {
				if m := scrape(t, url); m[`outbox_up`] != 1 || m[`outbox_run_last_seq{run="dead"}`] != pendingDead {
					t.Errorf("scrape: %v", m)
				}
			}
			if code, errOut := stop(); code != exitOK {
				t.Errorf("metrics: exit %d, %s", code, errOut)
			}
			if diff := cmp.Diff(before, dirstate.Snapshot(t, dir)); diff != "" {
				t.Errorf("metrics changed the directory (-before +after):\n%s", diff)
			}
		})
	}
}

func TestMetricsAsAnotherUserBesideARunningEngineReportsUp(t *testing.T) {
	ctx := context.Background()
	base, dir, dbPath, _ := sharedBook(t)
	s := engineOn(t, dbPath)
	unwritable(dir)
	cmd := asNobody(base, "metrics", "--db", dbPath, "--listen", "127.0.0.1:0")
	var errOut strings.Builder
	cmd.Stderr = &errOut
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("metrics printed no address: %v (%s)", err, errOut.String())
	}
	url := regexp.MustCompile(`http://\S+/metrics`).FindString(line)
	if m := scrape(t, url); m[`outbox_up`] != 1 || m[`outbox_run_last_seq{run="dead"}`] != pendingDead {
		t.Errorf("scrape beside the engine: %v\n%s", m, errOut.String())
	}
	if _, err := s.EnqueueEvent(ctx, "dead", journal.Builder("dead", "later", nil)); err != nil {
		t.Fatal(err)
	}
	if m := scrape(t, url); m[`outbox_up`] != 1 || m[`outbox_run_last_seq{run="dead"}`] != pendingDead+1 {
		t.Errorf("scrape after the engine's next commit: %v\n%s", m, errOut.String())
	}
}

// readOnlyRuns are the read-only commands, each run on the book at db with journal j.
func readOnlyRuns(db, j string) [][]string {
	return [][]string{
		{"stats", "--db", db},
		{"stats", "--db", db, "--json"},
		{"pending", "--db", db, "--run", "dead"},
		{"pending", "--db", db, "--run", "old", "--all"},
		{"verify", j},
		{"verify", "--json", j},
		{"migrate", "status", "--db", db},
		{"migrate", "version", "--db", db},
		{"check", "--db", db, "--journal", j},
	}
}

func TestReadOnlyCommandsWriteNothing(t *testing.T) {
	t.Run("on a book that no engine holds open", func(t *testing.T) {
		dbPath, jPath := book(t)
		dir := filepath.Dir(dbPath)
		before := dirstate.Snapshot(t, dir)
		for _, args := range readOnlyRuns(dbPath, jPath) {
			if code, _, errOut := runOutbox(t, args...); code != exitOK {
				t.Errorf("%v: exit %d: %s", args, code, errOut)
			}
			if diff := cmp.Diff(before, dirstate.Snapshot(t, dir)); diff != "" {
				t.Fatalf("%v changed the directory (-before +after):\n%s", args, diff)
			}
		}
	})
	t.Run("in a directory the user cannot write", func(t *testing.T) {
		base, err := os.MkdirTemp("", "outbox-cli-ro-")
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(base, "book")
		t.Cleanup(func() { os.Chmod(dir, 0o755); os.RemoveAll(base) })
		srcDB, srcJ := book(t)
		os.Mkdir(dir, 0o755)
		dbPath, jPath := filepath.Join(dir, "book.db"), filepath.Join(dir, "journal.jsonl")
		dirstate.CopyFile(t, srcDB, dbPath, 0o444)
		dirstate.CopyFile(t, srcJ, jPath, 0o444)
		os.Chmod(dir, 0o555)
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		bin := filepath.Join(base, "outbox")
		os.Chmod(base, 0o755)
		dirstate.CopyFile(t, exe, bin, 0o755)
		before := dirstate.Snapshot(t, dir)
		for _, args := range readOnlyRuns(dbPath, jPath) {
			cmd := exec.Command(bin, args...)
			cmd.Env = append(os.Environ(), asOutbox+"=1")
			if os.Geteuid() == 0 { // permissions do not bind root: read as nobody
				cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
			}
			if code, _, errOut := runCmd(t, cmd); code != exitOK {
				t.Errorf("%v: exit %d: %s", args, code, errOut)
			}
		}
		if diff := cmp.Diff(before, dirstate.Snapshot(t, dir)); diff != "" {
			t.Errorf("the directory changed (-before +after):\n%s", diff)
		}
	})
	t.Run("beside a running engine", func(t *testing.T) {
		dbPath, jPath := book(t)
		s, err := outbox.Open(context.Background(), dbPath)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if _, err := s.EnqueueEvent(context.Background(), "dead", journal.Builder("dead", "late", nil)); err != nil {
			t.Fatal(err)
		}
		for _, args := range readOnlyRuns(dbPath, jPath) {
			if code, _, errOut := runOutbox(t, args...); code != exitOK {
				t.Errorf("%v: exit %d: %s", args, code, errOut)
			}
		}
		if _, out, _ := runOutbox(t, "pending", "--db", dbPath, "--run", "dead"); strings.Count(out, "\n") != 4 {
			t.Errorf("pending beside the engine does not show its commit:\n%s", out)
		}
	})
}
