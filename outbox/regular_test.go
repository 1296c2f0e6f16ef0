// SPDX-License-Identifier: Apache-2.0

//go:build unix

package outbox

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// notRegularFiles makes, in a directory of their own, a named pipe, a directory and a socket, and
// names a device.
func notRegularFiles(t *testing.T) (dir string, paths map[string]string) {
	t.Helper()
	dir = t.TempDir()
	paths = map[string]string{
		"a named pipe":       filepath.Join(dir, "fifo.db"),
		"a directory":        filepath.Join(dir, "dir.db"),
		"a socket":           filepath.Join(dir, "sock.db"),
		"a character device": os.DevNull,
	}
	if err := syscall.Mkfifo(paths["a named pipe"], 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(paths["a directory"], 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", paths["a socket"])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return dir, paths
}

// refusedAtOnce runs open, failing the test if it has not returned in a minute (a blocked open(2)
// never returns), and returns its error.
func refusedAtOnce(t *testing.T, what string, open func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- open() }()
	select {
	case err := <-done:
		return err
	case <-time.After(time.Minute):
		t.Fatalf("%s: still blocked after a minute", what)
		return nil
	}
}

func TestOpenAndOpenReadOnlyRefuseWhatIsNotARegularFileAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir, paths := notRegularFiles(t)
	opens := map[string]func(string) error{
		"Open": func(p string) error {
			s, err := Open(ctx, p)
			if err == nil {
				s.Close()
			}
			return err
		},
		"OpenReadOnly": func(p string) error {
			s, err := OpenReadOnly(ctx, p)
			if err == nil {
				s.Close()
			}
			return err
		},
		"OpenReadOnlyDB": func(p string) error {
			d, err := OpenReadOnlyDB(ctx, p)
			if err == nil {
				d.Close()
			}
			return err
		},
	}
	for name, open := range opens {
		for kind, p := range paths {
			err := refusedAtOnce(t, name+" on "+kind, func() error { return open(p) })
			if err == nil || !strings.Contains(err.Error(), "is "+kind+", not a regular file") {
				t.Errorf("%s on %s: %v, want it refused as %s", name, kind, err, kind)
			}
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if diff := cmp.Diff([]string{"dir.db", "fifo.db", "sock.db"}, names); diff != "" {
		t.Errorf("files left beside them (-want +got):\n%s", diff)
	}
}

// TestAReadOnlyOpenRefusesAFileReplacedByANamedPipeAtOnce: the read-only VFS checks, without
// blocking, what SQLite is about to open, so a name that became a pipe after OpenReadOnly looked is
// refused by the next connection instead of blocking it.
func TestAReadOnlyOpenRefusesAFileReplacedByANamedPipeAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := closedBook(t, t.TempDir())
	ro, err := OpenReadOnly(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Fatal(err)
	}
	err = refusedAtOnce(t, "a read", func() error {
		_, err := collect(ro.AllRuns(ctx))
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a read after the book became a pipe: %v, want it refused", err)
	}
}

// TestAConnectionToAFileReplacedSinceOpenIsRefused: every connection a store opens later is on the
// file Open or OpenReadOnly checked, not on another put in its place.
func TestAConnectionToAFileReplacedSinceOpenIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	path := closedBook(t, dir)
	other := closedBook(t, t.TempDir())
	ro, err := OpenReadOnly(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if err := os.Rename(other, path); err != nil {
		t.Fatal(err)
	}
	if _, err := collect(ro.AllRuns(ctx)); err == nil || !strings.Contains(err.Error(), "replaced") {
		t.Errorf("a read after the book was replaced: %v, want it refused", err)
	}
}

// TestAReadOnlyStoreRefusesAWALThatIsANamedPipeAtOnce: the -wal, which a reader opens read-only,
// is checked as the database file is, so a pipe in its place fails the read instead of blocking it.
func TestAReadOnlyStoreRefusesAWALThatIsANamedPipeAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := closedBook(t, t.TempDir())
	if err := syscall.Mkfifo(path+"-wal", 0o644); err != nil {
		t.Fatal(err)
	}
	err := refusedAtOnce(t, "OpenReadOnly", func() error {
		s, err := OpenReadOnly(ctx, path)
		if err == nil {
			s.Close()
		}
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("OpenReadOnly beside a -wal that is a pipe: %v, want it refused", err)
	}
}
