// SPDX-License-Identifier: Apache-2.0

package migrations_test

import (
	"testing"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
)

// bookMarks counts the book's marks of its sink; -1 when the book has no table for them.
func bookMarks(t *testing.T, dbPath string) int {
	t.Helper()
	d := outboxtest.RawDB(t, dbPath)
	var tables int
	if err := d.QueryRow(`SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'outbox_book_mark'`).Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if tables == 0 {
		return -1
	}
	var n int
	if err := d.QueryRow(`SELECT count(*) FROM outbox_book_mark`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestABookMigratedDownPastItsMarkForgetsItAndUpMarksItsSinkAgain: the down step of version 9 drops
// the mark of the sink, so that the next start of an older release compares every run as it always
// did; up again the book holds no mark until a start's check passes, and that start compares every
// run and marks the sink's end.
func TestABookMigratedDownPastItsMarkForgetsItAndUpMarksItsSinkAgain(t *testing.T) {
	t.Parallel()
	dbPath, jPath := recoveredBook(t)
	if n := bookMarks(t, dbPath); n != 1 {
		t.Fatalf("the recovered book holds %d marks, want 1", n)
	}
	migrateDownTo(t, dbPath, 8)
	if n := bookMarks(t, dbPath); n != -1 {
		t.Fatalf("after the down step the book has its table of marks (%d rows)", n)
	}
	rep := recoverInto(t, dbPath, jPath) // migrates up first
	if n := bookMarks(t, dbPath); n != 1 {
		t.Fatalf("after up and a start the book holds %d marks, want 1", n)
	}
	if rep.Runs["live"].Last != 4 {
		t.Errorf("journal after up and recovery: live %+v; want up to 4", rep.Runs["live"])
	}
}
