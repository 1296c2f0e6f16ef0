// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

func init() {
	commands["reconcile"] = command{
		summary: "make a book restored from an older backup accept its journal's positions and once keys",
		run:     runReconcile,
	}
}

const reconcileAbout = `
A relay stops at its first call with ErrBookBehind when its journal holds lines the book never
recorded: the book was restored from a backup older than the journal. Either restore the journal's
copy that matches the book too, or accept the journal's positions with this command.

It lists each run the journal holds further than the book, and how many once keys the journal's
lines of those runs carry that the book never had (the "once_key" member journal.Event writes; a
line without one gives the book no key back). With --yes it records them: each run projected up to
the journal's last seq (its next seq follows it), and each key into the ledger, so that EnqueueOnce
refuses to announce those events again. Lines the book holds pending up to there are taken as
projected, their keys entering the ledger. Without --yes nothing is changed.

It reads the journal once, in order, holding a few numbers per run. It takes the database's
writer lock and the journal's lock: stop the engine first. A key the book already holds on another
line (an event announced again after the book lost its ledger) stops it, naming both lines: retire
the book's line (outbox retire) and run it again. What was recorded before a stop stays recorded;
running it again goes on from there.

Exit status: 0 when the book already agrees with the journal, or with --yes once everything is
recorded; 1 when there are changes and --yes was not given, or a change was refused (a key the book
holds elsewhere); 2 on a usage or I/O error.`

func runReconcile(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("reconcile", "outbox reconcile --db FILE --journal DIR [--yes]", reconcileAbout)
	dbPath := fs.String("db", "", "the database `file`")
	dir := fs.String("journal", "", "the journal's `directory`")
	yes := fs.Bool("yes", false, "record the changes (without it, only list them)")
	pos, code, done := parseFlags(fs, args, stderr)
	if done {
		return code
	}
	if len(pos) != 0 || *dbPath == "" || *dir == "" {
		return usageError(stderr, "outbox reconcile", "need --db FILE and --journal DIR")
	}
	if err := requireBook(ctx, *dbPath); err != nil {
		return failErr(stderr, exitUsage, "reconcile", err)
	}
	s, err := outbox.Open(ctx, *dbPath)
	if errors.Is(err, outbox.ErrLocked) {
		return fail(stderr, exitUsage, "reconcile: database %s is locked (is the engine running?); nothing was changed", quote(*dbPath))
	}
	if err != nil {
		return failErr(stderr, exitUsage, "reconcile", err)
	}
	defer s.Close()
	rep, err := journal.Reconcile(ctx, s, *dir, *yes)
	for _, r := range rep.Runs {
		if r.Known {
			fmt.Fprintf(stdout, "run %s: book %d -> journal %d\n", quote(r.RunID), r.BookLast, r.SinkLast)
		} else {
			fmt.Fprintf(stdout, "run %s: not in the book -> journal %d\n", quote(r.RunID), r.SinkLast)
		}
	}
	switch {
	case errors.Is(err, journal.ErrLocked):
		return fail(stderr, exitUsage, "reconcile: journal %s is open in another process (is the engine running?); nothing was changed", quote(*dir))
	case errors.Is(err, outbox.ErrAnnounceConflict):
		return failErr(stderr, exitFindings, "reconcile", fmt.Errorf("%w; the changes recorded before it stay (run it again once resolved)", err))
	case err != nil:
		return failErr(stderr, exitUsage, "reconcile", err)
	case len(rep.Runs) == 0:
		fmt.Fprintln(stdout, "the book agrees with the journal: nothing to change")
		return exitOK
	case !rep.Applied:
		fmt.Fprintf(stdout, "%s, %s the ledger lacks: nothing was changed; run again with --yes to record them\n",
			plural(int64(len(rep.Runs)), "run"), plural(rep.Keys, "once key"))
		return exitFindings
	}
	fmt.Fprintf(stdout, "recorded %s and %s into the ledger\n", plural(int64(len(rep.Runs)), "run position"), plural(rep.Keys, "once key"))
	return exitOK
}
