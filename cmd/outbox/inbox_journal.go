// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/internal/inboxseam"
)

func init() {
	inboxCommands["accept-retention-gap"] = runInboxAcceptRetentionGap
}

const inboxAcceptRetentionGapAbout = `
The operator's explicit way past a segmented journal's retention gap (ErrRetentionGap: the
journal's retention removed segments the consumer had not applied, or a new consumer met a journal
whose first segment does not begin at byte 0). Records the decision (the journal's bytes given up,
the reason, who and when, listed with the accepted gaps) and sets the consumer's position in DIR
to the start of the first retained segment, in one transaction. The lines that went with the gap
are not skipped for all that: each run that lost lines is quarantined for a gap when its next line
comes, for 'outbox inbox accept-gap' or 'release'. A consumer with no gap is refused, and nothing
changes. Takes the inbox's lock: it refuses to run beside a running consumer.`

func runInboxAcceptRetentionGap(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	const name = "inbox accept-retention-gap"
	fs := newFlags(name, "outbox inbox accept-retention-gap --db FILE --journal DIR --reason TEXT", inboxAcceptRetentionGapAbout)
	dbPath := fs.String("db", "", "the consumer's database `file`")
	dir := fs.String("journal", "", "the journal `directory` the consumer reads (ApplyJournal, FollowJournal)")
	reason := fs.String("reason", "", "why the bytes are given up, recorded with the decision: `text`")
	pos, code, done := parseFlags(fs, args, stderr)
	if done {
		return code
	}
	if len(pos) != 0 || *dbPath == "" || *dir == "" || *reason == "" {
		return usageError(stderr, "outbox "+name, "need --db FILE, --journal DIR and --reason TEXT")
	}
	in, err := openInboxWriter(ctx, *dbPath)
	if err != nil {
		return failErr(stderr, exitUsage, name, err)
	}
	defer in.Close()
	if err := in.AcceptRetentionGap(ctx, *dir, *reason); err != nil {
		if strings.Contains(err.Error(), "no retention gap to accept") {
			return fail(stderr, exitFindings, "%s: %s; nothing changed", name, sanitize(err.Error()))
		}
		return failErr(stderr, exitUsage, name, err)
	}
	gaps, err := in.AcceptedGaps(ctx)
	if err != nil {
		return failErr(stderr, exitUsage, name, err)
	}
	if err := in.Close(); err != nil {
		return failErr(stderr, exitUsage, name, err)
	}
	if len(gaps) == 0 {
		return fail(stderr, exitUsage, "%s: the accepted gap is not recorded", name)
	}
	g := gaps[len(gaps)-1]
	fmt.Fprintf(stdout, "journal %s: bytes %d to %d given up, recorded as accepted by %s; the consumer goes on from byte %d, and a run that lost lines is quarantined for a gap\n",
		quote(strings.TrimPrefix(g.RunID, inboxseam.JournalSourcePrefix)), g.FirstSeq, g.LastSeq, quote(g.AcceptedBy), g.LastSeq+1)
	return exitOK
}

// inboxJournalPosition is a segmented journal source's position, decoded, in `outbox inbox stats`.
type inboxJournalPosition struct {
	Dir        string `json:"dir"`
	DirEscaped string `json:"dir_escaped,omitempty"`
	Position   int64  `json:"position"` // the journal-wide byte position: the first byte not applied
	Segment    int64  `json:"segment"`  // the segment the position is proven in
}

// journalSourceRow fills a journal source's row: its position and how many bytes of the journal
// are still to be read.
func journalSourceRow(s inbox.Source, row inboxSourceRow) inboxSourceRow {
	dir := strings.TrimPrefix(s.Name, inboxseam.JournalSourcePrefix)
	if s.Position == nil {
		return row // rewound: it reads again from a segment its next read finds
	}
	p, err := inbox.ParseJournalPosition(s.Position)
	if err != nil {
		row.BehindError = message(err)
		return row
	}
	row.Journal = &inboxJournalPosition{Dir: dir, DirEscaped: escapedIfInvalid(dir), Position: p.Position, Segment: p.Segment}
	end, err := journalEnd(dir)
	switch {
	case err != nil:
		row.BehindError = message(err)
	case end < p.Position:
		row.BehindError = fmt.Sprintf("the journal ends at byte %d, before the position", end)
	default:
		behind := end - p.Position
		row.BehindBytes = &behind
	}
	return row
}

// journalEnd is the journal-wide position after the last byte of the journal in dir.
func journalEnd(dir string) (int64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var names []string
	for _, e := range ents {
		if n := e.Name(); len(n) == 26 && strings.HasSuffix(n, ".jsonl") && strings.Trim(n[:20], "0123456789") == "" {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return 0, errors.New("the journal directory holds no segment")
	}
	last := slices.Max(names)
	var base int64
	fmt.Sscan(last[:20], &base)
	st, err := os.Stat(filepath.Join(dir, last))
	if err != nil {
		return 0, err
	}
	return base + st.Size(), nil
}
