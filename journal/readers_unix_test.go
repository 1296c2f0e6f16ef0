// SPDX-License-Identifier: Apache-2.0

//go:build unix

package journal

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestAReaderFileThatIsAFIFOIsAnErrorNotAWaitForAWriter(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "j")
	j := openDir(t, dir, WithSegmentSize(200))
	mustAppend(t, j, "r", runBatch("r", 1, 3, "x"))
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "x.reader")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for what, call := range map[string]func() error{
		"Readers": func() error { _, err := Readers(dir); return err },
		"Status":  func() error { _, err := Status(context.Background(), dir); return err },
	} {
		done := make(chan error, 1)
		go func() { done <- call() }()
		var err error
		select {
		case err = <-done:
		case <-time.After(time.Minute):
			// Gives the blocked open its writer, so that the test ends and says why.
			if w, werr := os.OpenFile(fifo, os.O_WRONLY, 0); werr == nil {
				w.Close()
			}
			<-done
			t.Fatalf("%s waited for a writer of the FIFO named like a reader's file", what)
		}
		if err == nil || !strings.Contains(err.Error(), "x.reader") {
			t.Errorf("%s = %v, want an error naming x.reader", what, err)
		}
	}
}

func TestAReaderFileThatLinksToAnotherJournalsReaderIsNotTakenAsAPosition(t *testing.T) {
	t.Parallel()
	other := filepath.Join(t.TempDir(), "other")
	o := openDir(t, other, WithSegmentSize(200))
	mustAppend(t, o, "r", runBatch("r", 1, 3, "x"))
	if err := SetReader(other, "x", 100); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "j")
	j := openDir(t, dir, WithSegmentSize(200))
	mustAppend(t, j, "r", runBatch("r", 1, 3, "x"))
	link := filepath.Join(dir, "x.reader")
	if err := os.Symlink(filepath.Join(other, "x.reader"), link); err != nil {
		t.Fatal(err)
	}
	rs, err := Readers(dir)
	if err == nil || !strings.Contains(err.Error(), link) {
		t.Errorf("Readers = %v, %v; want an error naming %s, not the other journal's position", rs, err, link)
	}
}
