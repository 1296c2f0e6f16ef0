// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/textmachine/outbox/inbox"
)

const topSeq = int64(math.MaxInt64)

// topDB makes a consumer's database where run "r" has applied seq 2^63-1, the last a run can have,
// past an accepted gap, and is then quarantined for a conflict at that seq.
func topDB(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	dbPath := filepath.Join(t.TempDir(), "consumer.db")
	in, err := inbox.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	nothing := func(context.Context, *sql.Tx, inbox.Event) error { return nil }
	apply := func(ls ...string) {
		t.Helper()
		var b [][]byte
		for _, l := range ls {
			b = append(b, []byte(strings.TrimSuffix(l, "\n")))
		}
		if _, err := in.Apply(ctx, b, nothing); err != nil {
			t.Fatal(err)
		}
	}
	apply(jline("r", 1, ""), jline("r", topSeq-1, ""))
	if err := in.AcceptGap(ctx, "r", "lost"); err != nil {
		t.Fatal(err)
	}
	apply(jline("r", topSeq-1, ""), jline("r", topSeq, ""))
	apply(jline("r", topSeq, "other"))
	if qs, err := in.Quarantined(ctx); err != nil || len(qs) != 1 || qs[0].Reason != "conflict" {
		t.Fatalf("quarantined %+v, %v", qs, err)
	}
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	return dbPath
}

func TestInboxCommandsShowAConflictAtTheLastSeqWithoutAnOverflowedSeq(t *testing.T) {
	dbPath := topDB(t)
	top := strconv.FormatInt(topSeq, 10)
	for _, args := range [][]string{
		{"inbox", "quarantined", "--db", dbPath},
		{"inbox", "quarantined", "--db", dbPath, "--json"},
		{"inbox", "stats", "--db", dbPath},
		{"inbox", "stats", "--db", dbPath, "--json"},
	} {
		code, out, errOut := cli(t, args...)
		if code == exitUsage { // quarantined exits 1: the run is
			t.Fatalf("%s: exit %d, %s", strings.Join(args, " "), code, errOut)
		}
		if strings.Contains(out, "-9223372036854775808") || !strings.Contains(out, top) {
			t.Errorf("%s:\n%s", strings.Join(args, " "), out)
		}
	}
	_, out, _ := cli(t, "inbox", "quarantined", "--db", dbPath)
	var row []string
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 3 && f[0] == "r" {
			row = f
		}
	}
	if row == nil || row[1] != "conflict" || row[2] != "none" || row[3] != top {
		t.Errorf("the seq expected is not shown as none:\n%s", out)
	}
	_, out, _ = cli(t, "inbox", "quarantined", "--db", dbPath, "--json")
	var rep inboxQuarantinedReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Quarantined) != 1 || rep.Quarantined[0].Expected != 0 || rep.Quarantined[0].Got != topSeq {
		t.Errorf("%+v", rep.Quarantined)
	}
}

func TestInboxReleaseOfARunAtTheLastSeqSaysNoSeqFollows(t *testing.T) {
	dbPath := topDB(t)
	code, out, errOut := cli(t, "inbox", "release", "--db", dbPath, "--run", "r")
	want := "run r released: it has applied seq 9223372036854775807, the last a run can have, so no line of it follows; every source reads again from its start\n"
	if code != exitOK || out != want || errOut != "" {
		t.Errorf("exit %d, %q %q, want %q", code, out, errOut, want)
	}
}

func TestInboxAcceptGapUpToTheLastSeqSaysTheRunGoesOnFromIt(t *testing.T) {
	ctx := context.Background()
	dbPath := filepath.Join(t.TempDir(), "consumer.db")
	in, err := inbox.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	ls := [][]byte{[]byte(strings.TrimSuffix(jline("r", 1, ""), "\n")), []byte(strings.TrimSuffix(jline("r", topSeq, ""), "\n"))}
	if _, err := in.Apply(ctx, ls, func(context.Context, *sql.Tx, inbox.Event) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := cli(t, "inbox", "accept-gap", "--db", dbPath, "--run", "r", "--reason", "lost")
	if code != exitOK || !strings.Contains(out, "seqs 2 to 9223372036854775806 given up") || !strings.Contains(out, "it goes on from seq 9223372036854775807;") {
		t.Errorf("exit %d, %q %q", code, out, errOut)
	}
}

func TestInboxStatsJudgesAStreamPositionAtTheLastSequenceWithoutAnOverflow(t *testing.T) {
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	seq := uint64(math.MaxUint64)
	sp := &inboxStreamPosition{Stream: "EVENTS", Seq: &seq, Created: &created}
	sp.lag(&njs.StreamInfo{Created: created, State: njs.StreamState{FirstSeq: 1, LastSeq: math.MaxUint64}}, 0)
	if sp.RetentionGap || sp.ReadAgain || sp.BehindSeqs == nil || *sp.BehindSeqs != 0 {
		t.Errorf("a position at the stream's last sequence: %+v", sp)
	}
	if got := streamBehindText(sp); got != "0 sequences behind (the stream's last is 18446744073709551615)" {
		t.Errorf("%q", got)
	}
}
