// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"strings"
	"time"

	"github.com/textmachine/outbox/journal"
)

const journalStatusAbout = `
Reports the journal kept in DIR: its segments (how many, the first retained byte, the end, the
bytes), what retention has deleted, the registered readers with their lag in bytes and in segments,
and what a trim with --keep and --max-bytes would delete now, and which segment it would keep
first, and why (a reader that has not read it, the keep duration, or the cap). It reads the
directory's names, the readers' files and the retention record; it changes nothing and takes no
lock, so it runs beside the engine. It cannot see which segments a reader holds open, which a
trim keeps as well.`

const journalReadersAbout = `
Lists the readers registered in the journal directory DIR: each reader's position (the first byte
it has not applied), its lag in bytes and in segments, and when it last wrote its position. A
reader whose position is below the journal's first byte lost lines to the cap.

  readers rm NAME DIR   removes reader NAME's registration, so that retention no longer keeps
                        segments for it: for a reader that is gone for good. Refused while it has
                        not applied the whole journal, unless --force is given (a forced remove
                        lets retention delete what it has not read).`

const journalTrimAbout = `
Deletes the sealed segments of the journal in DIR that retention lets go, oldest first: a segment
goes when every registered reader's position is at or past its end and it was sealed longer ago
than --keep; past --max-bytes the oldest go even when a reader has not read them (the readers left
behind are named). The last segment is never deleted, nor one a reader holds open, and it stops at
the first segment that must stay. What it deleted is recorded in DIR/retention.state first, so that
a reader is told which lines it lost and the journal tells this from a hand-deleted segment. It
takes the journal's lock: while the engine has the journal open it is refused, and the engine
trims by itself after each seal when it was given a keep duration or a cap.`

const journalAcceptAbout = `
Makes the journal in DIR open again after segments were deleted from it by hand (at its front, or
its last segment), which the engine refuses to start on ("deleted by another program"): it records
DIR's first segment as where deleted lines end and its last segment as the one appended to, and
says which bytes it accepted as gone. Nothing says which runs' lines went with them: a reader that
had not read them is told at its next read that it lost lines. Stop the engine first; a journal
another process has open is refused. Only use it once the segments cannot be restored (with
retention.state) from a backup.`

func journalAcceptMissing(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	const name = "outbox journal accept-missing"
	fs := newFlags("journal accept-missing", name+" DIR", journalAcceptAbout)
	pos, code, done := parseFlags(fs, args, stderr)
	if done {
		return code
	}
	if len(pos) != 1 {
		return usageError(stderr, name, "takes one directory: %s DIR", name)
	}
	m, err := journal.AcceptMissing(pos[0])
	if errors.Is(err, journal.ErrLocked) {
		return fail(stderr, exitUsage, "journal accept-missing: journal %s is open in another process (is the engine running?); nothing was changed", quote(pos[0]))
	}
	if err != nil {
		return failErr(stderr, exitUsage, "journal accept-missing", err)
	}
	if m.FrontTo > m.FrontFrom {
		fmt.Fprintf(stdout, "accepted bytes %d to %d as gone from the front of %s\n", m.FrontFrom, m.FrontTo-1, quote(pos[0]))
	}
	if m.TailTo > m.TailFrom {
		fmt.Fprintf(stdout, "accepted the last segment %s as gone from %s: the journal goes on from segment %s\n",
			segmentFile(m.TailTo), quote(pos[0]), segmentFile(m.TailFrom))
	}
	if m.FrontTo == m.FrontFrom && m.TailTo == m.TailFrom {
		fmt.Fprintf(stdout, "nothing was missing from %s; its retention record is written again\n", quote(pos[0]))
	}
	return exitOK
}

func journalStatus(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	const name = "outbox journal status"
	fs := newFlags("journal status", name+" DIR [--keep D] [--max-bytes N] [--json]", journalStatusAbout)
	keep := fs.Duration("keep", 0, "keep a sealed segment at least `DURATION` after it was sealed")
	maxBytes := fs.Int64("max-bytes", 0, "cap the journal at `N` bytes (0: no cap)")
	asJSON := fs.Bool("json", false, "print one JSON document")
	pos, code, done := parseFlags(fs, args, stderr)
	if done {
		return code
	}
	if len(pos) != 1 {
		return usageError(stderr, name, "takes one directory: %s DIR", name)
	}
	opts, err := retentionOptions(*keep, *maxBytes)
	if err != nil {
		return usageError(stderr, name, "%v", err)
	}
	st, err := journal.Status(ctx, pos[0], opts...)
	if err != nil {
		return failErr(stderr, exitUsage, "journal status", err)
	}
	if *asJSON {
		if err := printJSON(stdout, statusJSON(pos[0], st)); err != nil {
			return failErr(stderr, exitUsage, "journal status", err)
		}
		return exitOK
	}
	fmt.Fprintf(stdout, "journal %s\n", quote(pos[0]))
	if st.Segments == 0 {
		fmt.Fprintln(stdout, "segments: none yet")
	} else {
		fmt.Fprintf(stdout, "segments: %d, from byte %d to %d (%d bytes); first %s, last %s\n", st.Segments, st.First, st.End, st.Bytes,
			segmentFile(st.First), segmentFile(st.Last))
	}
	if r := st.Retained; r.DeletedSegments > 0 {
		fmt.Fprintf(stdout, "retention deleted: %s, %d bytes (%d under the cap); runs it deleted lines of: %d listed",
			plural(r.DeletedSegments, "segment"), r.DeletedBytes, r.DeletedUnderCap, len(r.Runs))
		if r.RunsDropped > 0 {
			fmt.Fprintf(stdout, ", %d earlier not listed", r.RunsDropped)
		}
		fmt.Fprintln(stdout)
	} else {
		fmt.Fprintln(stdout, "retention deleted: nothing")
	}
	printReaders(stdout, st.Readers)
	policy := fmt.Sprintf("keep %v", *keep)
	if *maxBytes > 0 {
		policy += fmt.Sprintf(", cap %d bytes", *maxBytes)
	} else {
		policy += ", no cap"
	}
	var wb int64
	for _, d := range st.WouldDelete {
		wb += d.Size
	}
	fmt.Fprintf(stdout, "trim (%s) would delete: %s (%d bytes)\n", policy, plural(int64(len(st.WouldDelete)), "segment"), wb)
	for _, d := range st.WouldDelete {
		fmt.Fprintf(stdout, "  %s (%d bytes): %s", segmentFile(d.Position), d.Size, d.Reason)
		if len(d.Behind) > 0 {
			fmt.Fprintf(stdout, "; readers left behind: %s", quoteAll(d.Behind))
		}
		fmt.Fprintln(stdout)
	}
	switch h := st.Held; {
	case h != nil:
		fmt.Fprintf(stdout, "not yet: %s and every later segment stay: %s\n", segmentFile(h.Position), heldWhy(h))
	case st.Segments > 0:
		fmt.Fprintln(stdout, "not yet: the last segment stays: it is appended to")
	}
	if st.OverCap {
		fmt.Fprintf(stdout, "over the cap: the segments that stay exceed %d bytes\n", *maxBytes)
	}
	return exitOK
}

func journalReaders(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	const name = "outbox journal readers"
	fs := newFlags("journal readers", name+" DIR [--json] | "+name+" rm NAME DIR [--force]", journalReadersAbout)
	force := fs.Bool("force", false, "rm: remove a reader that has not applied the whole journal")
	asJSON := fs.Bool("json", false, "print one JSON document")
	pos, code, done := parseFlags(fs, args, stderr)
	if done {
		return code
	}
	if len(pos) > 0 && pos[0] == "rm" {
		if len(pos) != 3 {
			return usageError(stderr, name, "rm takes a reader's name and a directory: rm NAME DIR")
		}
		err := journal.RemoveReader(pos[2], pos[1], *force)
		switch {
		case errors.Is(err, journal.ErrReaderBehind):
			return fail(stderr, exitUsage, "journal readers rm: %s; nothing was removed (--force removes it)", message(err))
		case errors.Is(err, journal.ErrReaderName):
			return usageError(stderr, name, "%s", message(err))
		case errors.Is(err, iofs.ErrNotExist):
			return fail(stderr, exitUsage, "journal readers rm: no reader %s is registered in %s", quote(pos[1]), quote(pos[2]))
		case err != nil:
			return failErr(stderr, exitUsage, "journal readers rm", err)
		}
		fmt.Fprintf(stdout, "removed reader %s from %s\n", quote(pos[1]), quote(pos[2]))
		return exitOK
	}
	if *force {
		return usageError(stderr, name, "--force goes with rm")
	}
	if len(pos) != 1 {
		return usageError(stderr, name, "takes one directory: %s DIR", name)
	}
	st, err := journal.Status(ctx, pos[0])
	if err != nil {
		return failErr(stderr, exitUsage, "journal readers", err)
	}
	if *asJSON {
		if err := printJSON(stdout, statusJSON(pos[0], st).Readers); err != nil {
			return failErr(stderr, exitUsage, "journal readers", err)
		}
		return exitOK
	}
	printReaders(stdout, st.Readers)
	return exitOK
}

func journalTrim(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	const name = "outbox journal trim"
	fs := newFlags("journal trim", name+" DIR [--keep D] [--max-bytes N]", journalTrimAbout)
	keep := fs.Duration("keep", 0, "keep a sealed segment at least `DURATION` after it was sealed")
	maxBytes := fs.Int64("max-bytes", 0, "cap the journal at `N` bytes (0: no cap)")
	pos, code, done := parseFlags(fs, args, stderr)
	if done {
		return code
	}
	if len(pos) != 1 {
		return usageError(stderr, name, "takes one directory: %s DIR", name)
	}
	opts, err := retentionOptions(*keep, *maxBytes)
	if err != nil {
		return usageError(stderr, name, "%v", err)
	}
	rep, err := journal.Trim(ctx, pos[0], opts...)
	if errors.Is(err, journal.ErrLocked) {
		return fail(stderr, exitUsage, "journal trim: journal %s is open in another process (is the engine running?); "+
			"nothing was deleted: the engine trims it after each seal when given a keep duration or a cap", quote(pos[0]))
	}
	for _, d := range rep.Deleted {
		fmt.Fprintf(stdout, "deleted %s (%d bytes): %s", segmentFile(d.Position), d.Size, d.Reason)
		if len(d.Behind) > 0 {
			fmt.Fprintf(stdout, "; readers left behind: %s", quoteAll(d.Behind))
		}
		fmt.Fprintln(stdout)
	}
	if err != nil {
		return failErr(stderr, exitUsage, "journal trim", err)
	}
	fmt.Fprintf(stdout, "trimmed %s: deleted %s (%d bytes); %s left, from byte %d (%d bytes)\n", quote(pos[0]),
		plural(int64(len(rep.Deleted)), "segment"), rep.DeletedBytes, plural(int64(rep.Segments), "segment"), rep.First, rep.Bytes)
	if h := rep.Held; h != nil {
		fmt.Fprintf(stdout, "kept %s and every later segment: %s\n", segmentFile(h.Position), heldWhy(h))
	}
	if rep.UnderCap > 0 {
		fmt.Fprintf(stderr, "outbox journal trim: the cap deleted %s; readers left behind: %s\n",
			plural(int64(rep.UnderCap), "segment"), quoteAll(rep.LeftBehind))
	}
	if rep.OverCap {
		fmt.Fprintf(stdout, "over the cap: the segments left exceed %d bytes\n", *maxBytes)
	}
	return exitOK
}

func retentionOptions(keep time.Duration, maxBytes int64) ([]journal.Option, error) {
	if keep < 0 {
		return nil, fmt.Errorf("--keep %v must not be negative", keep)
	}
	if maxBytes < 0 {
		return nil, fmt.Errorf("--max-bytes %d must not be negative", maxBytes)
	}
	opts := []journal.Option{journal.WithKeep(keep)}
	if maxBytes > 0 {
		opts = append(opts, journal.WithMaxBytes(maxBytes))
	}
	return opts, nil
}

func printReaders(w io.Writer, readers []journal.ReaderLag) {
	if len(readers) == 0 {
		fmt.Fprintln(w, "readers: none registered (retention keeps segments for registered readers only)")
		return
	}
	fmt.Fprintf(w, "readers: %d\n", len(readers))
	for _, r := range readers {
		fmt.Fprintf(w, "  %s at byte %d", quote(r.Name), r.Position)
		switch {
		case r.Ahead:
			fmt.Fprint(w, ": past the journal's end (a reader of another journal, or a journal restored from an older copy)")
		default:
			fmt.Fprintf(w, ", %d bytes behind in %s", r.LagBytes, plural(int64(r.LagSegments), "segment"))
		}
		if r.Lost {
			fmt.Fprint(w, ", below the first retained byte: retention deleted lines it had not applied")
		}
		fmt.Fprintf(w, ", updated %s\n", r.Updated.UTC().Format(time.RFC3339))
	}
}

func heldWhy(h *journal.Held) string {
	switch h.Reason {
	case journal.HeldUnread, journal.HeldAhead:
		return fmt.Sprintf("%s (%s)", h.Reason, quoteAll(h.Readers))
	case journal.HeldKeep:
		return fmt.Sprintf("%s (until %s)", h.Reason, h.Until.UTC().Format(time.RFC3339))
	}
	return h.Reason
}

func segmentFile(pos int64) string { return fmt.Sprintf("%020d.jsonl", pos) }

func quoteAll(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = quote(n)
	}
	return strings.Join(q, ", ")
}

// journalStatusReport is the --json output of journal status; its field names are part of the
// command's interface.
type journalStatusReport struct {
	Dir         string            `json:"dir"`
	Segments    int               `json:"segments"`
	First       int64             `json:"first"`
	End         int64             `json:"end"`
	Last        int64             `json:"last_segment"`
	Bytes       int64             `json:"bytes"`
	Deleted     deletedJSON       `json:"retention_deleted"`
	Readers     []readerJSON      `json:"readers"`
	WouldDelete []wouldDeleteJSON `json:"would_delete"`
	Held        *heldJSON         `json:"held,omitempty"`
	OverCap     bool              `json:"over_cap"`
}

type deletedJSON struct {
	Segments    int64 `json:"segments"`
	Bytes       int64 `json:"bytes"`
	UnderCap    int64 `json:"under_cap"`
	RunsListed  int   `json:"runs_listed"`
	RunsDropped int64 `json:"runs_not_listed"`
}

type readerJSON struct {
	Name        string    `json:"name"`
	Position    int64     `json:"position"`
	LagBytes    int64     `json:"lag_bytes"`
	LagSegments int       `json:"lag_segments"`
	Ahead       bool      `json:"ahead"`
	Lost        bool      `json:"lost"`
	Updated     time.Time `json:"updated"`
}

type wouldDeleteJSON struct {
	Position int64    `json:"position"`
	Bytes    int64    `json:"bytes"`
	Reason   string   `json:"reason"`
	Behind   []string `json:"readers_left_behind,omitempty"`
}

type heldJSON struct {
	Position int64      `json:"position"`
	Reason   string     `json:"reason"`
	Readers  []string   `json:"readers,omitempty"`
	Until    *time.Time `json:"until,omitempty"`
}

func statusJSON(dir string, st journal.DirStatus) journalStatusReport {
	r := journalStatusReport{Dir: dir, Segments: st.Segments, First: st.First, End: st.End, Last: st.Last, Bytes: st.Bytes, OverCap: st.OverCap,
		Deleted: deletedJSON{Segments: st.Retained.DeletedSegments, Bytes: st.Retained.DeletedBytes,
			UnderCap: st.Retained.DeletedUnderCap, RunsListed: len(st.Retained.Runs), RunsDropped: st.Retained.RunsDropped},
		Readers: []readerJSON{}, WouldDelete: []wouldDeleteJSON{}}
	for _, rd := range st.Readers {
		r.Readers = append(r.Readers, readerJSON{Name: rd.Name, Position: rd.Position, LagBytes: rd.LagBytes,
			LagSegments: rd.LagSegments, Ahead: rd.Ahead, Lost: rd.Lost, Updated: rd.Updated.UTC()})
	}
	for _, d := range st.WouldDelete {
		r.WouldDelete = append(r.WouldDelete, wouldDeleteJSON{Position: d.Position, Bytes: d.Size, Reason: d.Reason, Behind: d.Behind})
	}
	if h := st.Held; h != nil {
		r.Held = &heldJSON{Position: h.Position, Reason: h.Reason, Readers: h.Readers}
		if h.Reason == journal.HeldKeep {
			u := h.Until.UTC()
			r.Held.Until = &u
		}
	}
	return r
}
