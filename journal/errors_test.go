package journal

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/textmachine/outbox/outbox"
)

// TestAnErrorNamesThePackageOnce: the typical failures of the journal's entry points read
// "journal: …" once, however many of the package's functions the error passed through, and still
// wrap the sentinel a caller branches on.
func TestAnErrorNamesThePackageOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		want error // nil: no sentinel, only the package's prefix
		fail func(t *testing.T) error
	}{
		{"a journal in a missing directory", nil, func(t *testing.T) error {
			_, err := OpenFile(filepath.Join(t.TempDir(), "missing", "j.jsonl"))
			return err
		}},
		{"a file that is not a journal", ErrNotJournal, func(t *testing.T) error {
			path := filepath.Join(t.TempDir(), "notes.txt")
			if err := os.WriteFile(path, []byte("not a journal\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := OpenFile(path)
			return err
		}},
		{"a journal another File holds", ErrLocked, func(t *testing.T) error {
			_, path := openTemp(t)
			_, err := OpenFile(path)
			return err
		}},
		{"a batch that leaves a gap", ErrStreamGap, func(t *testing.T) error {
			j, _ := openTemp(t)
			return j.Append(ctx, "r", batch(2, "b"))
		}},
		{"a line that is not a journal line", ErrMalformed, func(t *testing.T) error {
			j, _ := openTemp(t)
			return j.Append(ctx, "r", []outbox.EventLine{{Seq: 1, Line: []byte(`{"engine_run_id":"r"}`)}})
		}},
		{"a redelivery with other bytes", ErrPayloadConflict, func(t *testing.T) error {
			j, _ := openTemp(t)
			if err := j.Append(ctx, "r", batch(1, "a")); err != nil {
				t.Fatal(err)
			}
			return j.Append(ctx, "r", batch(1, "b"))
		}},
		{"a file another program appended to", ErrModified, func(t *testing.T) error {
			j, path := openTemp(t)
			if err := appendBytes(path, jline(1, "a")+"\n"); err != nil {
				t.Fatal(err)
			}
			return j.Append(ctx, "r", batch(1, "a"))
		}},
		{"an append after a failed fdatasync", ErrFailed, func(t *testing.T) error {
			ops := &faultyOps{syncErr: syscall.EIO}
			j, err := openFile(filepath.Join(t.TempDir(), "j.jsonl"), ops)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { j.Close() })
			if err := j.Append(ctx, "r", batch(1, "a")); !errors.Is(err, syscall.EIO) {
				t.Fatalf("append with a failing fdatasync: %v, want EIO", err)
			}
			return j.Append(ctx, "r", batch(1, "a"))
		}},
		{"a verified journal with a gap", ErrStreamGap, func(t *testing.T) error {
			_, err := Verify(strings.NewReader(text(1, "a") + jline(3, "c") + "\n"))
			return err
		}},
		{"a line key of a line that is not JSON", ErrMalformed, func(t *testing.T) error {
			_, _, err := LineKey([]byte(`{"engine_run_id":"r","seq":1`))
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.fail(t)
			if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if n := strings.Count(err.Error(), "journal:"); n != 1 || !strings.HasPrefix(err.Error(), "journal: ") {
				t.Errorf("%q names the package %d times, want once, first", err, n)
			}
		})
	}
}
