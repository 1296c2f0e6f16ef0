// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// TestMain lets the demo re-execute the test binary as its engine and its platform, as it
// re-executes the outbox binary in production.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && (os.Args[1] == engineCommand || os.Args[1] == platformCommand) {
		os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
	}
	if os.Getenv(asOutbox) == "1" {
		main()
	}
	os.Exit(m.Run())
}

// asOutbox, set to 1 in its environment, makes the test binary the outbox command, so that a test
// runs the command as a real process (see runOutbox).
const asOutbox = "OUTBOX_TEST_AS_COMMAND"

// outboxCmd returns the outbox command, as a process of its own, with args.
func outboxCmd(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), asOutbox+"=1")
	return cmd
}

// runOutbox runs the outbox command as a process of its own and returns its exit status, standard
// output and standard error.
func runOutbox(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return runCmd(t, outboxCmd(t, args...))
}

func runCmd(t *testing.T, cmd *exec.Cmd) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("%v: %v", cmd.Args, err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errOut.String()
}

// cli runs the command in-process and returns its exit status, standard output and error.
func cli(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// book makes a database with two runs, one projected into a journal, one with three lines pending.
func book(t *testing.T) (dbPath, jPath string) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	dbPath, jPath = filepath.Join(dir, "book.db"), filepath.Join(dir, "journal.jsonl")
	s, err := outbox.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	j, err := journal.OpenFile(jPath)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	for i := 0; i < 2; i++ {
		s.EnqueueEvent(ctx, "old", journal.Builder("old", "x", i))
	}
	relay, err := outbox.NewRelay(s, j, "old", outbox.WithForgetProjected(false))
	if err != nil {
		t.Fatal(err)
	}
	if err := relay.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	s.EnqueueEvent(ctx, "dead", journal.Handshake("dead", nil))
	s.EnqueueOnce(ctx, "dead", "unit_done:1", journal.Builder("dead", "unit_done", map[string]int{"unit": 1}))
	s.EnqueueEvent(ctx, "dead", journal.Builder("dead", "spend", map[string]int{"amount": 5}))
	return dbPath, jPath
}

func fileDigest(t *testing.T, paths ...string) string {
	t.Helper()
	h := sha256.New()
	for _, p := range paths {
		b, _ := os.ReadFile(p)
		h.Write(b)
		fmt.Fprintf(h, "|%d|", len(b))
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

func emptyBook(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "book.db")
	s, err := outbox.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	return path
}

// insertRows writes rows into a book behind the library's back, as an older version or another
// program could have: the library itself refuses such run ids and keys.
func insertRows(t *testing.T, dbPath string, rows ...[]any) {
	t.Helper()
	u := url.URL{Scheme: "file", OmitHost: true, Path: dbPath}
	d, err := sql.Open("sqlite3", u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, r := range rows {
		if _, err := d.Exec(`INSERT INTO events_outbox (engine_run_id, seq, line, announce_key, enqueued_at) VALUES (?, ?, ?, ?, ?)`, r...); err != nil {
			t.Fatal(err)
		}
	}
}
