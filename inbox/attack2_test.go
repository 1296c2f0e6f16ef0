// SPDX-License-Identifier: Apache-2.0

package inbox_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/textmachine/outbox/inbox"
)

func TestAttackAnInvalidOptionFailsOpenAndLeavesNoFile(t *testing.T) {
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

func TestAttackARefusedAcceptGapOrReleaseLeavesTheQuarantine(t *testing.T) {
	in, _ := setup(t)
	mustApply(t, in, lines("r", 1, 2))
	mustApply(t, in, [][]byte{line("r", 5)})
	ctx := context.Background()
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := in.AcceptGap(ctx, "r", strings.Repeat("x", inbox.MaxReasonLen+1)); err == nil {
		t.Fatal("a reason over the limit was accepted")
	}
	if err := in.AcceptGap(ctx, "r", "bad \xff utf-8"); err == nil {
		t.Log("a reason that is not UTF-8 was accepted")
	}
	if err := in.AcceptGap(cancelled, "r", "ok"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled AcceptGap: %v", err)
	}
	if err := in.Release(cancelled, "r"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Release: %v", err)
	}
	q := quarantined(t, in)
	if len(q) != 1 || q[0].Reason != "gap" || position(t, in, "r") != 2 {
		t.Fatalf("quarantine after refused calls: %+v, position %d", q, position(t, in, "r"))
	}
	gaps, err := in.AcceptedGaps(ctx)
	if err != nil || len(gaps) > 1 {
		t.Fatalf("%+v %v", gaps, err)
	}
}

func TestAttackApplyFromRefusesABadSourceOrPositionAndAppliesNothing(t *testing.T) {
	in, _ := setup(t)
	ctx := context.Background()
	for name, c := range map[string]struct {
		source string
		to     []byte
	}{
		"empty name":       {"", []byte("1")},
		"long name":        {strings.Repeat("s", inbox.MaxSourceNameLen+1), []byte("1")},
		"invalid utf-8":    {"s\xff", []byte("1")},
		"position too big": {"s", bytes.Repeat([]byte("1"), inbox.MaxPositionLen+1)},
	} {
		rep, err := in.ApplyFrom(ctx, c.source, nil, c.to, lines("r", 1, 2), insertHandler)
		if err == nil || rep != (inbox.Report{}) {
			t.Errorf("%s: %+v %v", name, rep, err)
		}
	}
	if p := position(t, in, "r"); p != 0 {
		t.Fatalf("refused calls applied up to %d", p)
	}
	if srcs, err := in.Sources(ctx); err != nil || len(srcs) != 0 {
		t.Fatalf("%+v %v", srcs, err)
	}
}

func TestAttackApplyFileBesideFollowFileOnOnePathAppliesEachLineOnce(t *testing.T) {
	in, _ := setup(t, inbox.WithBatchLines(3), inbox.WithPollInterval(10*time.Millisecond))
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- in.FollowFile(ctx, path, insertHandler) }()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 20; i++ {
			if _, err := in.ApplyFile(context.Background(), path, insertHandler); err != nil && !errors.Is(err, inbox.ErrSourceMoved) {
				t.Errorf("ApplyFile: %v", err)
				return
			}
		}
	}()
	for s := int64(1); s <= 60; s++ {
		if _, err := f.Write(append(line("r", s), '\n')); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	deadline := time.Now().Add(4 * time.Second)
	for position(t, in, "r") != 60 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case err := <-done:
		t.Fatalf("FollowFile ended: %v", err)
	default:
	}
	if p := position(t, in, "r"); p != 60 {
		t.Fatalf("position %d", p)
	}
	if q := quarantined(t, in); len(q) != 0 {
		t.Fatalf("%+v", q)
	}
}
