// SPDX-License-Identifier: Apache-2.0

package inbox_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/textmachine/outbox/inbox"
)

func TestApplyFileOnADirectoryOrTheInboxsOwnDatabaseIsRefused(t *testing.T) {
	in, dbPath := setup(t)
	ctx := context.Background()
	dir := t.TempDir()
	if _, err := in.ApplyFile(ctx, dir, insertNothing); err == nil {
		t.Fatal("a directory was applied")
	}
	rep, err := in.ApplyFile(ctx, dbPath, insertNothing)
	if err == nil || rep != (inbox.Report{}) {
		t.Fatalf("own database: %+v %v", rep, err)
	}
	t.Logf("own database: %v", err)
	srcs, err := in.Sources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(srcs) != 0 {
		t.Fatalf("refused calls left sources: %+v", srcs)
	}
}

func TestApplyFileBesideFollowFileOnOnePathAppliesEachLineOnce(t *testing.T) {
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
