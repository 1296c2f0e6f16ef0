// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/textmachine/outbox/outbox"
)

func init() {
	commands["retire"] = command{
		summary: "replace one stored line that was never projected with a tombstone (the way out of a line the journal refuses)",
		run:     runRetire,
	}
}

const retireAbout = `
Replaces the run's stored line SEQ, which was never projected, with a tombstone of the same key: a
journal line of type "retired" carrying the reason and the SHA-256 and size of the bytes it
replaces. The run then projects on without a gap, and the journal's reader sees what was retired
and why. It is the way out when the relay stopped because the journal refused a line (outbox stats
shows the run as stopped, and why); the run's other lines are kept.

With --save FILE the original bytes are written to FILE (a new file), and synced, before anything
is changed. Takes the database's writer lock, so it refuses to run beside an engine. A line already
projected is refused, and nothing is changed.`

func runRetire(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("retire", "outbox retire --db FILE --run ID --seq N --reason TEXT [--save FILE]", retireAbout)
	dbPath := fs.String("db", "", "the database `file`")
	runID := fs.String("run", "", "the run's `id`")
	seq := fs.Int64("seq", 0, "the line's `seq`")
	reason := fs.String("reason", "", "why the line is retired, carried in the tombstone (`text`)")
	save := fs.String("save", "", "write the original bytes to `file` first (it must not exist)")
	pos, code, done := parseFlags(fs, args, stderr)
	if done {
		return code
	}
	if len(pos) != 0 || *dbPath == "" || *runID == "" || *reason == "" {
		return usageError(stderr, "outbox retire", "need --db FILE, --run ID, --seq N and --reason TEXT")
	}
	if *seq < 1 {
		return usageError(stderr, "outbox retire", "--seq must be at least 1")
	}
	if err := requireBook(ctx, *dbPath); err != nil {
		return failErr(stderr, exitUsage, "retire", err)
	}
	s, err := outbox.Open(ctx, *dbPath)
	if errors.Is(err, outbox.ErrLocked) {
		return fail(stderr, exitUsage, "retire: database %s is locked (is the engine running?)", quote(*dbPath))
	}
	if err != nil {
		return failErr(stderr, exitUsage, "retire", err)
	}
	defer s.Close()
	line, err := storedLine(ctx, s, *runID, *seq)
	if err != nil {
		return failErr(stderr, exitUsage, "retire", err)
	}
	if *save != "" {
		if err := saveLine(*save, line); err != nil {
			return failErr(stderr, exitUsage, "retire", fmt.Errorf("save the line: %w; nothing was changed", err))
		}
	}
	if err := s.RetireEvent(ctx, *runID, *seq, *reason); err != nil {
		return failErr(stderr, exitUsage, "retire", err)
	}
	fmt.Fprintf(stdout, "retired line %d of run %s (%s, sha256 %x)", *seq, quote(*runID), plural(int64(len(line)), "byte"), sha256.Sum256(line))
	if *save != "" {
		fmt.Fprintf(stdout, "; the original is in %s", quote(*save))
	}
	fmt.Fprintln(stdout)
	return exitOK
}

// storedLine returns the run's line seq, refusing one already projected or not stored, so that
// nothing is saved for a retirement that cannot happen.
func storedLine(ctx context.Context, s *outbox.Store, runID string, seq int64) ([]byte, error) {
	projected, err := s.Projected(ctx, runID)
	if err != nil {
		return nil, err
	}
	if seq <= projected {
		return nil, fmt.Errorf("line %d of run %s: the run is projected up to %d: %w", seq, quote(runID), projected, outbox.ErrProjected)
	}
	lines, err := s.PendingEvents(ctx, runID, seq-1, 1)
	if err != nil {
		return nil, err
	}
	if len(lines) == 0 || lines[0].Seq != seq {
		return nil, fmt.Errorf("line %d of run %s: %w", seq, quote(runID), outbox.ErrUnknownEvent)
	}
	if retired(lines[0].Line) {
		return nil, fmt.Errorf("line %d of run %s is already retired; retiring it again would replace the SHA-256 and size of the original with the tombstone's", seq, quote(runID))
	}
	return lines[0].Line, nil
}

// retired reports whether line is a tombstone RetireEvent wrote: type "retired" with the digest and
// size of the line it replaced.
func retired(line []byte) bool {
	var t struct {
		Type string `json:"type"`
		Data struct {
			SHA256 string `json:"sha256"`
			Size   *int64 `json:"size"`
		} `json:"data"`
	}
	return json.Unmarshal(line, &t) == nil && t.Type == "retired" && t.Data.SHA256 != "" && t.Data.Size != nil
}

// saveLine writes b to a new file at path and syncs it and its directory.
func saveLine(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
