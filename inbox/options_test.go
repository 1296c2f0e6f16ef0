// SPDX-License-Identifier: Apache-2.0

package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/outbox"
)

func TestAnInvalidOptionMakesOpenFailAndCreatesNothing(t *testing.T) {
	t.Parallel()
	for name, opt := range map[string]inbox.Option{
		"window 0":            inbox.WithDigestWindow(0),
		"window too large":    inbox.WithDigestWindow(inbox.MaxDigestWindow + 1),
		"retention 0":         inbox.WithDigestRetention(0),
		"unknown durability":  inbox.WithDurability(outbox.Durability(7)),
		"negative busy":       inbox.WithBusyTimeout(-time.Second),
		"read pool 0":         inbox.WithReadPoolSize(0),
		"nil logger":          inbox.WithLogger(nil),
		"line size 0":         inbox.WithMaxLineSize(0),
		"line size too large": inbox.WithMaxLineSize(inbox.MaxLineSizeLimit + 1),
		"batch of 0 lines":    inbox.WithBatchLines(0),
		"batch of 0 bytes":    inbox.WithBatchBytes(0),
		"poll 0":              inbox.WithPollInterval(0),
		"empty operator":      inbox.WithOperator(""),
		"operator with a tab": inbox.WithOperator("a\tb"),
		"empty VFS":           inbox.WithVFS(""),
		"nil batch hook":      inbox.WithBatchHook(nil),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "c.db")
			if in, err := inbox.Open(context.Background(), path, opt); err == nil {
				in.Close()
				t.Fatal("Open succeeded")
			}
			if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the refused Open left %s: %v", path, err)
			}
		})
	}
}

func TestAHandlerThatCallsGoexitLeavesNothingAndTheInboxGoesOn(t *testing.T) {
	t.Parallel()
	in, path := setup(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		in.Apply(context.Background(), lines("r", 1, 2), func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
			insertHandler(ctx, tx, ev)
			runtime.Goexit()
			return nil
		})
	}()
	<-done
	if n := count(t, rawDB(t, path), `SELECT count(*) FROM applied`); n != 0 {
		t.Errorf("%d rows", n)
	}
	if rep := mustApply(t, in, lines("r", 1, 2)); rep.Applied != 2 {
		t.Errorf("afterwards: %+v", rep)
	}
}

func TestTheWriterSyncsAtTheDurabilityAskedOnEveryConnection(t *testing.T) {
	t.Parallel()
	for d, want := range map[outbox.Durability]int{outbox.DurabilityFull: 2, outbox.DurabilityNormal: 1} {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			in, path := setup(t, inbox.WithDurability(d))
			for round := range 2 {
				if round == 1 {
					// A new connection to the existing WAL database, as after a restart.
					in.Close()
					var err error
					if in, err = inbox.Open(context.Background(), path, inbox.WithDurability(d)); err != nil {
						t.Fatal(err)
					}
					defer in.Close()
				}
				var got int
				err := in.WriteTx(context.Background(), func(tx *sql.Tx) error {
					return tx.QueryRow(`PRAGMA synchronous`).Scan(&got)
				})
				if err != nil || got != want {
					t.Errorf("round %d: synchronous = %d (%v), want %d", round, got, err, want)
				}
			}
		})
	}
}

func TestAnInvalidOptionFailsOpenAndLeavesNoFile(t *testing.T) {
	for name, opt := range map[string]inbox.Option{
		"window 0":          inbox.WithDigestWindow(0),
		"window -1":         inbox.WithDigestWindow(-1),
		"window over max":   inbox.WithDigestWindow(inbox.MaxDigestWindow + 1),
		"retention 0":       inbox.WithDigestRetention(0),
		"retention -1":      inbox.WithDigestRetention(-time.Second),
		"batch lines 0":     inbox.WithBatchLines(0),
		"batch bytes -1":    inbox.WithBatchBytes(-1),
		"max line 0":        inbox.WithMaxLineSize(0),
		"max line over max": inbox.WithMaxLineSize(inbox.MaxLineSizeLimit + 1),
		"poll 0":            inbox.WithPollInterval(0),
		"read pool 0":       inbox.WithReadPoolSize(0),
		"busy -1":           inbox.WithBusyTimeout(-1),
	} {
		dir := t.TempDir()
		in, err := inbox.Open(context.Background(), filepath.Join(dir, "c.db"), opt)
		if err == nil {
			in.Close()
			t.Errorf("%s: opened", name)
			continue
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 0 {
			t.Errorf("%s: refused Open left %d files", name, len(ents))
		}
	}
}
