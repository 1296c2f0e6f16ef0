// SPDX-License-Identifier: Apache-2.0

//go:build unix

package inbox_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/textmachine/outbox/inbox"
)

func TestOpenOfAFIFOOrADirectoryFailsAtOnceAndLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "pipe.db")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	sub := filepath.Join(dir, "sub.db")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fifo, sub} {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		done := make(chan error, 1)
		go func() {
			in, err := inbox.Open(ctx, p)
			if err == nil {
				in.Close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil {
				t.Errorf("%s: opened", p)
			}
		case <-time.After(time.Minute): // a bound for a hang, far past the context's end
			t.Fatalf("Open of %s hung past its context", filepath.Base(p))
		}
		cancel()
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 2 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Fatalf("refused opens left %v", names)
	}
}

func TestOpenOfAJournalFileLeavesNothingBesideIt(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "journal.jsonl")
	content := append(line("r", 1), '\n')
	if err := os.WriteFile(path, content, 0o644); err != nil {
		t.Fatal(err)
	}
	if in, err := inbox.Open(context.Background(), path); err == nil {
		in.Close()
		t.Fatal("a journal opened as an inbox")
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Fatalf("a refused Open left %v", names)
	}
	if got, _ := os.ReadFile(path); string(got) != string(content) {
		t.Fatal("the journal changed")
	}
}
