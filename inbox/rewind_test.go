// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// jl is a journal line of run and seq, with its newline.
func jl(run string, seq int64) string {
	return fmt.Sprintf(`{"engine_run_id":%q,"seq":%d,"type":"t","data":{}}`+"\n", run, seq)
}

func jls(ls ...string) string { return strings.Join(ls, "") }

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// recordButQ is record for every run but q, the run lifted: the others are what a Release must not
// change.
func recordButQ(ctx context.Context, tx *sql.Tx, ev Event) error {
	if ev.RunID == "q" {
		return nil
	}
	return record(ctx, tx, ev)
}

func (c *consumer) applyFileQ(path string) Report {
	c.t.Helper()
	rep, err := c.in.ApplyFile(context.Background(), path, recordButQ)
	if err != nil {
		c.t.Fatalf("ApplyFile: %v", err)
	}
	return rep
}

// lift lifts run q's quarantine the way the test names: Release, or AcceptGap.
func (c *consumer) lift(how, run string) {
	c.t.Helper()
	var err error
	if how == "release" {
		err = c.in.Release(context.Background(), run)
	} else {
		err = c.in.AcceptGap(context.Background(), run, "given up for the test")
	}
	if err != nil {
		c.t.Fatalf("%s %s: %v", how, run, err)
	}
}

var lifts = []string{"release", "accept gap"}

// The consumer stopped after a/1; the writer added a/2 and b/1 (b's only line), the journal was
// renamed to journal.jsonl.1 (still in the directory) and a new journal got a/3 and c/1. A Release
// (or AcceptGap) of another run rewinds the source: it reads again from the start of the file its
// position named, to that file's end, then the new journal; b/1 is applied and a is not quarantined.
func TestAReleaseKeepsReadingTheRotatedFileTheOldPositionNamed(t *testing.T) {
	for _, how := range lifts {
		t.Run(how, func(t *testing.T) {
			path := journalPath(t)
			writeFile(t, path, jls(jl("q", 2), jl("a", 1)))
			c := newConsumer(t)
			if rep := c.applyFileQ(path); rep != (Report{Applied: 1, Quarantined: 1}) {
				t.Fatalf("first call: %+v", rep)
			}
			appendRaw(t, path, jls(jl("a", 2), jl("b", 1)))
			if err := os.Rename(path, path+".1"); err != nil {
				t.Fatal(err)
			}
			writeFile(t, path, jls(jl("a", 3), jl("c", 1)))
			c.lift(how, "q")
			c.applyFileQ(path)
			want := map[string]int64{"a": 3, "b": 1, "c": 1}
			wantApplied(t, c.applied(), want)
			if q := c.quarantine("a"); q != nil {
				t.Fatalf("a quarantined: %+v", q)
			}
			// The switch to the new journal is stored: the rotated file is not needed again.
			os.Remove(path + ".1")
			appendRaw(t, path, jl("c", 2))
			if rep := c.applyFileQ(path); rep != (Report{Applied: 1}) {
				t.Fatalf("after the rotated file was deleted: %+v", rep)
			}
		})
	}
}

// A running FollowFile holds open a journal that is removed from its directory before it has read it
// to its end; a new journal takes the path, and another run is released (or its gap accepted)
// meanwhile. The follower reads the removed file again from its start and to its end, then the new
// journal: a/4 to a/20 and b/1 are applied, none dropped.
func TestAReleaseKeepsReadingTheRemovedFileAFollowerHoldsOpen(t *testing.T) {
	for _, how := range lifts {
		t.Run(how, func(t *testing.T) {
			path := journalPath(t)
			writeFile(t, path, jls(jl("q", 2), jl("a", 1), jl("a", 2), jl("a", 3)))
			var armed atomic.Bool
			var c *consumer
			hookErr := make(chan error, 1)
			c = newConsumer(t, WithBatchLines(1), WithPollInterval(10*time.Millisecond),
				WithBatchHook(func(source string, r Report) {
					if !armed.CompareAndSwap(true, false) {
						return
					}
					// After the follower's first batch of the removed file's rest: the file goes, a
					// new one takes the path, and the other run is lifted.
					err := os.Remove(path)
					if err == nil {
						err = os.WriteFile(path, []byte(jls(jl("a", 21), jl("c", 1))), 0o644)
					}
					if err == nil {
						if how == "release" {
							err = c.in.Release(context.Background(), "q")
						} else {
							err = c.in.AcceptGap(context.Background(), "q", "given up for the test")
						}
					}
					hookErr <- err
				}))
			c.applyFileQ(path)
			var rest []string
			for s := int64(4); s <= 20; s++ {
				rest = append(rest, jl("a", s))
			}
			appendRaw(t, path, jls(rest...)+jl("b", 1))
			armed.Store(true)
			stop := c.follow(path, recordButQ)
			c.waitPosition("c", 1)
			if err := <-hookErr; err != nil {
				t.Fatal(err)
			}
			if err := stop(); !errors.Is(err, context.Canceled) {
				t.Fatalf("FollowFile: %v", err)
			}
			want := map[string]int64{"a": 21, "b": 1, "c": 1}
			wantApplied(t, c.applied(), want)
			if q := c.quarantine("a"); q != nil {
				t.Fatalf("a quarantined: %+v", q)
			}
		})
	}
}

// A rotated file moved out of the directory before its last lines were read is ErrFileLost, and
// stays ErrFileLost after a Release (or AcceptGap) of another run: the rewind does not give up the
// file. Put back, it is read and the source goes on; ForgetFile gives it up explicitly.
func TestARotatedFileMovedAwayIsStillErrFileLostAfterARelease(t *testing.T) {
	for _, how := range lifts {
		t.Run(how, func(t *testing.T) {
			path := journalPath(t)
			away := filepath.Join(t.TempDir(), "journal.jsonl.1")
			writeFile(t, path, jls(jl("q", 2), jl("a", 1)))
			c := newConsumer(t)
			c.applyFileQ(path)
			appendRaw(t, path, jls(jl("a", 2), jl("b", 1)))
			if err := os.Rename(path, away); err != nil {
				t.Fatal(err)
			}
			writeFile(t, path, jls(jl("a", 3), jl("c", 1)))
			if _, err := c.in.ApplyFile(context.Background(), path, recordButQ); !errors.Is(err, ErrFileLost) {
				t.Fatalf("before the %s: %v, want ErrFileLost", how, err)
			}
			c.lift(how, "q")
			rep, err := c.in.ApplyFile(context.Background(), path, recordButQ)
			if !errors.Is(err, ErrFileLost) {
				t.Fatalf("after the %s: %v, want ErrFileLost", how, err)
			}
			if rep != (Report{}) {
				t.Fatalf("after the %s: %+v applied", how, rep)
			}
			wantApplied(t, c.applied(), map[string]int64{"a": 1})
			if err := os.Rename(away, path+".1"); err != nil {
				t.Fatal(err)
			}
			c.applyFileQ(path)
			want := map[string]int64{"a": 3, "b": 1, "c": 1}
			wantApplied(t, c.applied(), want)
		})
	}
}

// ForgetFile gives up the file a rewound source still owed, as it gives up a stored position.
func TestForgetFileGivesUpTheFileARewoundSourceStillNeeded(t *testing.T) {
	path := journalPath(t)
	away := filepath.Join(t.TempDir(), "journal.jsonl.1")
	writeFile(t, path, jls(jl("q", 2), jl("a", 1)))
	c := newConsumer(t)
	c.applyFileQ(path)
	appendRaw(t, path, jl("b", 1))
	os.Rename(path, away)
	writeFile(t, path, jl("c", 1))
	c.lift("release", "q")
	if _, err := c.in.ApplyFile(context.Background(), path, recordButQ); !errors.Is(err, ErrFileLost) {
		t.Fatalf("%v, want ErrFileLost", err)
	}
	if err := c.in.ForgetFile(context.Background(), path); err != nil {
		t.Fatal(err)
	}
	srcs, err := c.in.Sources(context.Background())
	if err != nil || len(srcs) != 1 || srcs[0].Position != nil || srcs[0].RewoundFrom != nil {
		t.Fatalf("after ForgetFile: %+v, %v", srcs, err)
	}
	c.applyFileQ(path)
	wantApplied(t, c.applied(), map[string]int64{"a": 1, "c": 1})
}

// A rewound source keeps the position it was rewound from, readable by the sources (SourceState,
// Sources), while SourcePosition says none; a second rewind before the source stored a position keeps
// the first; the first position the source stores ends the rewind.
func TestARewoundSourceKeepsThePositionItWasRewoundFrom(t *testing.T) {
	ctx := context.Background()
	c := newConsumer(t)
	if _, err := c.in.ApplyFrom(ctx, "s", nil, []byte("p1"), string2lines(jl("q", 2), jl("r", 2)), record); err != nil {
		t.Fatal(err)
	}
	c.lift("release", "q")
	c.lift("release", "r")
	pos, from, err := c.in.SourceState(ctx, "s")
	if err != nil || pos != nil || string(from) != "p1" {
		t.Fatalf("SourceState = %q, %q, %v; want none, p1", pos, from, err)
	}
	if p, err := c.in.SourcePosition(ctx, "s"); p != nil || err != nil {
		t.Fatalf("SourcePosition = %q, %v", p, err)
	}
	if srcs, err := c.in.Sources(ctx); err != nil || len(srcs) != 1 || srcs[0].Position != nil || string(srcs[0].RewoundFrom) != "p1" {
		t.Fatalf("Sources = %+v, %v", srcs, err)
	}
	if _, err := c.in.ApplyFrom(ctx, "s", []byte("p1"), []byte("p2"), nil, record); !errors.Is(err, ErrSourceMoved) {
		t.Fatalf("ApplyFrom from the position it was rewound from: %v, want ErrSourceMoved", err)
	}
	if _, err := c.in.ApplyFrom(ctx, "s", nil, []byte("p0"), nil, record); err != nil {
		t.Fatal(err)
	}
	if pos, from, err := c.in.SourceState(ctx, "s"); err != nil || string(pos) != "p0" || from != nil {
		t.Fatalf("after a position was stored: %q, %q, %v", pos, from, err)
	}
}

func string2lines(ls ...string) [][]byte {
	out := make([][]byte, len(ls))
	for i, l := range ls {
		out[i] = []byte(strings.TrimSuffix(l, "\n"))
	}
	return out
}

// The stored position moved under a running call (here rewound, as Release does, between two
// batches): the call gets ErrSourceMoved from ApplyFrom, reads the position again, reads the file
// again from its start, and applies each line once.
func TestAPositionMovedUnderARunningCallIsReadAgain(t *testing.T) {
	rj := newRelayJournal(t, journalPath(t))
	rj.add("a", 6)
	c := newConsumer(t, WithBatchLines(2))
	moved := false
	afterFileCommit = func(source string, to FilePosition) {
		if !moved {
			moved = true
			if _, err := c.in.ApplyFrom(context.Background(), source, to.encode(), nil, nil, record); err != nil {
				t.Error(err)
			}
		}
	}
	defer func() { afterFileCommit = nil }()
	rep, err := c.in.ApplyFile(context.Background(), rj.path, record)
	if err != nil || rep != (Report{Applied: 6, Duplicates: 2}) {
		t.Fatalf("%+v, %v; want the first batch read again as duplicates", rep, err)
	}
	wantApplied(t, c.applied(), map[string]int64{"a": 6})
}
