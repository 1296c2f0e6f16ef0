// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/textmachine/outbox/outbox"
)

func init() {
	commands["vacuum"] = command{
		summary: "rewrite a stopped engine's book so that it gives its free pages back to the file system",
		run:     runVacuum,
	}
}

const vacuumAbout = `
Rewrites the book whole, in the mode in which it gives the pages its forgets free back to the file
system (auto_vacuum=INCREMENTAL), and prints its size before and after. A book created by this
release is in that mode from its start; one created by an earlier release keeps every page it ever
used until it is vacuumed once. Run it after the upgraded engine's first start, whose recovery
replaces the ledger's lines with their digests, so that it rewrites what is left.

Takes the database's writer lock, so it refuses to run beside an engine. It writes the whole book
into the WAL and back: it needs free disk as large as the book, and took 3 to 11 s for a million
ledger keys on the project's machines (docs/BENCHMARKS.md).`

func runVacuum(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("vacuum", "outbox vacuum --db FILE", vacuumAbout)
	dbPath := fs.String("db", "", "the database `file`")
	pos, code, done := parseFlags(fs, args, stderr)
	if done {
		return code
	}
	if len(pos) != 0 || *dbPath == "" {
		return usageError(stderr, "outbox vacuum", "need --db FILE")
	}
	if err := requireBook(ctx, *dbPath); err != nil {
		return failErr(stderr, exitUsage, "vacuum", err)
	}
	before, err := os.Stat(*dbPath)
	if err != nil {
		return failErr(stderr, exitUsage, "vacuum", err)
	}
	s, err := outbox.Open(ctx, *dbPath)
	if errors.Is(err, outbox.ErrLocked) {
		return fail(stderr, exitUsage, "vacuum: database %s is locked (is the engine running?)", quote(*dbPath))
	}
	if err != nil {
		return failErr(stderr, exitUsage, "vacuum", err)
	}
	took, err := s.Vacuum(ctx)
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return failErr(stderr, exitUsage, "vacuum", err)
	}
	after, err := os.Stat(*dbPath)
	if err != nil {
		return failErr(stderr, exitUsage, "vacuum", err)
	}
	fmt.Fprintf(stdout, "vacuumed %s in %.1f s: %s before, %s after\n", quote(*dbPath), took.Seconds(),
		plural(before.Size(), "byte"), plural(after.Size(), "byte"))
	return exitOK
}
