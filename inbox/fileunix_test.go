// SPDX-License-Identifier: Apache-2.0

//go:build unix

package inbox

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"

	"github.com/textmachine/outbox/journal"
)

// A path that names a FIFO, a directory or a device is not a journal, refused without waiting for a
// writer to open it.
func TestAFileThatIsNotRegularIsErrNotJournalAndNothingWaits(t *testing.T) {
	c := newConsumer(t)
	fifo := journalPath(t)
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	for _, path := range []string{fifo, t.TempDir(), os.DevNull} {
		if _, err := c.in.ApplyFile(context.Background(), path, record); !errors.Is(err, journal.ErrNotJournal) {
			t.Errorf("%s: %v, want journal.ErrNotJournal", path, err)
		}
	}
}
