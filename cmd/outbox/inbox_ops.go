// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/textmachine/outbox/inbox"
)

const inboxReleaseAbout = `
Lifts the run's quarantine: the run goes on from its high-water mark + 1, and in the same
transaction every source's position is rewound, so that each reads again from its start (the lines
already applied are skipped as duplicates), still reading everything its position needed: a file
source finishes a rotated file it had not read to its end (or stops, as before, when that file is
lost), a stream source keeps its position as the floor of its retention-gap check. A gap that is
still there quarantines the run again at the next read. Exits 1 when the run is not quarantined.

Takes the inbox's exclusive lock: beside a running consumer it refuses (exit 2) and changes
nothing; stop the consumer, release, start it again.`

func runInboxRelease(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("inbox release", "outbox inbox release --db FILE --run ID", inboxReleaseAbout)
	dbPath := fs.String("db", "", "the consumer's database `file`")
	runID := fs.String("run", "", "the quarantined run's `id`")
	pos, code, done := parseFlags(fs, args, stderr)
	if done {
		return code
	}
	if len(pos) != 0 || *dbPath == "" || *runID == "" {
		return usageError(stderr, "outbox inbox release", "need --db FILE and --run ID")
	}
	in, err := openInboxWriter(ctx, *dbPath)
	if err != nil {
		return failErr(stderr, exitUsage, "inbox release", err)
	}
	defer in.Close()
	position, err := in.Position(ctx, *runID)
	if err != nil {
		return failErr(stderr, exitUsage, "inbox release", err)
	}
	err = in.Release(ctx, *runID)
	switch {
	case errors.Is(err, inbox.ErrNotQuarantined):
		return fail(stderr, exitFindings, "inbox release: run %s is not quarantined; nothing changed", quote(*runID))
	case err != nil:
		return failErr(stderr, exitUsage, "inbox release", err)
	}
	if err := in.Close(); err != nil {
		return failErr(stderr, exitUsage, "inbox release", err)
	}
	fmt.Fprintf(stdout, "run %s released: %s; every source reads again from its start\n", quote(*runID), goesOn(position))
	return exitOK
}

const inboxAcceptGapAbout = `
For a run quarantined for a gap that cannot be filled (a line really lost), gives up the missing
seqs: records the decision (the run, the seqs, REASON, the operating system's user, the time),
moves the run's high-water mark past the gap and lifts the quarantine, in one transaction; every
source then reads again from its start, as after a release. The seqs given up are never applied, even if they come
later. A run quarantined for a conflict or by its handler is refused: moving past it would apply
the wrong bytes or skip a line the handler refused; release it once the cause is fixed. Exits 1
when the run is not quarantined for a gap, 2 on a usage error.

Takes the inbox's exclusive lock: beside a running consumer it refuses (exit 2) and changes
nothing.`

func runInboxAcceptGap(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("inbox accept-gap", "outbox inbox accept-gap --db FILE --run ID --reason TEXT", inboxAcceptGapAbout)
	dbPath := fs.String("db", "", "the consumer's database `file`")
	runID := fs.String("run", "", "the run's `id`")
	reason := fs.String("reason", "", "why the seqs are given up, recorded with the decision: `text`")
	pos, code, done := parseFlags(fs, args, stderr)
	if done {
		return code
	}
	if len(pos) != 0 || *dbPath == "" || *runID == "" || *reason == "" {
		return usageError(stderr, "outbox inbox accept-gap", "need --db FILE, --run ID and --reason TEXT")
	}
	in, err := openInboxWriter(ctx, *dbPath)
	if err != nil {
		return failErr(stderr, exitUsage, "inbox accept-gap", err)
	}
	defer in.Close()
	err = in.AcceptGap(ctx, *runID, *reason)
	switch {
	case errors.Is(err, inbox.ErrNotQuarantined):
		return fail(stderr, exitFindings, "inbox accept-gap: run %s is not quarantined; nothing changed", quote(*runID))
	case errors.Is(err, inbox.ErrNotGap):
		q := quarantineOf(ctx, in, *runID)
		return fail(stderr, exitFindings, "inbox accept-gap: run %s is quarantined for a %s, not a gap: only a gap is accepted; nothing changed (release it once the cause is fixed)",
			quote(*runID), q)
	case err != nil:
		return failErr(stderr, exitUsage, "inbox accept-gap", err)
	}
	gaps, err := in.AcceptedGaps(ctx)
	if err != nil {
		return failErr(stderr, exitUsage, "inbox accept-gap", err)
	}
	if err := in.Close(); err != nil {
		return failErr(stderr, exitUsage, "inbox accept-gap", err)
	}
	if len(gaps) == 0 {
		return fail(stderr, exitUsage, "inbox accept-gap: the accepted gap is not recorded")
	}
	g := gaps[len(gaps)-1]
	fmt.Fprintf(stdout, "run %s: seqs %d to %d given up, recorded as accepted by %s; %s; every source reads again from its start\n",
		quote(*runID), g.FirstSeq, g.LastSeq, quote(g.AcceptedBy), goesOn(g.LastSeq))
	return exitOK
}

// goesOn says where a run at high-water mark position goes on from: nowhere past the last seq a
// run can have.
func goesOn(position int64) string {
	if position < math.MaxInt64 {
		return fmt.Sprintf("it goes on from seq %d", position+1)
	}
	return fmt.Sprintf("it has applied seq %d, the last a run can have, so no line of it follows", position)
}

// quarantineOf names why run is quarantined, for a message.
func quarantineOf(ctx context.Context, in *inbox.Inbox, run string) string {
	qs, err := in.Quarantined(ctx)
	if err == nil {
		for _, q := range qs {
			if q.RunID == run {
				return sanitize(q.Reason)
			}
		}
	}
	return "reason other than a gap"
}

// openInboxWriter opens the consumer's database with the inbox's exclusive lock, for release and
// accept-gap. It first checks, reading only, that the file is an inbox's database, so that a wrong
// path is refused as it is and never given the inbox's tables; a running consumer holds the lock,
// and that is said plainly.
func openInboxWriter(ctx context.Context, path string) (*inbox.Inbox, error) {
	ro, err := openInboxReadOnly(ctx, path)
	if err != nil {
		return nil, err
	}
	if err := ro.Close(); err != nil {
		return nil, err
	}
	in, err := inbox.Open(ctx, path)
	if errors.Is(err, inbox.ErrLocked) {
		return nil, fmt.Errorf("%s is open by a running consumer (it holds the inbox's lock): stop it first; nothing changed", quote(path))
	}
	return in, err
}
