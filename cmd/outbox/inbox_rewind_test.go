// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"os"
	"testing"

	"github.com/textmachine/outbox/inbox"
)

// A file source rewound by a Release reads the file its position named again from its start, then
// the path's file: inbox stats counts both, not only the file the path names now.
func TestInboxStatsCountsARewoundFileSourceFromTheStartOfTheFileItsPositionNamed(t *testing.T) {
	ctx := context.Background()
	dbPath, jPath := consumerDB(t)
	if err := os.Rename(jPath, jPath+".1"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(jPath, []byte(jline("a", 5, "")), 0o644); err != nil {
		t.Fatal(err)
	}
	in, err := inbox.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Release(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	in.Close()
	old, _ := os.Stat(jPath + ".1")
	cur, _ := os.Stat(jPath)
	got := statsSource(t, "--db", dbPath)
	if want := old.Size() + cur.Size(); !got.Rewound || got.BehindBytes == nil || *got.BehindBytes != want {
		t.Fatalf("a rewound file source: %+v, want %d bytes behind", got, want)
	}
}
