// SPDX-License-Identifier: Apache-2.0

//go:build unix

package inbox_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/internal/inboxseam"
)

func writeLines(t *testing.T, path string, ls [][]byte) {
	t.Helper()
	var b []byte
	for _, l := range ls {
		b = append(append(b, l...), '\n')
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestASymlinkRetargetedToAnotherJournalLosesNoLineOfEither(t *testing.T) {
	in, _ := setup(t)
	dir := t.TempDir()
	a, b, link := filepath.Join(dir, "a.jsonl"), filepath.Join(dir, "b.jsonl"), filepath.Join(dir, "journal.jsonl")
	writeLines(t, a, lines("a", 1, 3))
	writeLines(t, b, lines("b", 1, 4))
	if err := os.Symlink(a, link); err != nil {
		t.Fatal(err)
	}
	mustApplyFile(t, in, link)
	// a grows, then the link moves to b
	writeLines(t, a, lines("a", 1, 5))
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(b, link); err != nil {
		t.Fatal(err)
	}
	mustApplyFile(t, in, link)
	if p := position(t, in, "b"); p != 4 {
		t.Fatalf("b at %d", p)
	}
	if p := position(t, in, "a"); p != 5 {
		t.Fatalf("a at %d: the lines a got before the link moved were lost", p)
	}
	if q := quarantined(t, in); len(q) != 0 {
		t.Fatalf("%+v", q)
	}
}

func mustApplyFile(t *testing.T, in *inbox.Inbox, path string) inbox.Report {
	t.Helper()
	rep, err := in.ApplyFile(context.Background(), path, insertNothing)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func TestAForeignPositionStoredUnderAFileSourceStopsItUntilForgotten(t *testing.T) {
	ctx := context.Background()
	in, _ := setup(t)
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	writeLines(t, path, lines("a", 1, 3))
	for _, pos := range [][]byte{[]byte("garbage"), make([]byte, inbox.MaxPositionLen)} {
		if _, err := in.ApplyFrom(ctx, inboxseam.FileSourcePrefix+path, nil, pos, nil, insertNothing); err != nil {
			t.Fatal(err)
		}
		if _, err := in.ApplyFile(ctx, path, insertNothing); err == nil {
			t.Fatalf("ApplyFile read on from a position it cannot parse (%d bytes)", len(pos))
		}
		if p := position(t, in, "a"); p != 0 {
			t.Fatalf("applied up to %d", p)
		}
		if err := in.ForgetFile(ctx, path); err != nil {
			t.Fatal(err)
		}
	}
	if rep := mustApplyFile(t, in, path); rep != (inbox.Report{Applied: 3}) {
		t.Fatalf("%+v", rep)
	}
}
