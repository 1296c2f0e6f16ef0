// SPDX-License-Identifier: Apache-2.0

package tests

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/textmachine/outbox/internal/demo"
	"github.com/textmachine/outbox/internal/faultpoint"
	"github.com/textmachine/outbox/internal/testing/crashtest"
)

// crashEngine runs one start of the demo engine and, when told (crashtest.KillAt), kills itself with
// SIGKILL at a fault point.
func crashEngine() int {
	crashtest.ArmFromEnv()
	units, _ := strconv.Atoi(os.Getenv("UNITS"))
	pace, _ := time.ParseDuration(os.Getenv("PACE"))
	err := demo.RunEngine(context.Background(), demo.EngineConfig{
		DB: os.Getenv("DB"), Journal: os.Getenv("JOURNAL"), Units: units, RunID: os.Getenv("RUN"),
		Committed: os.Getenv("COMMITTED"), Pace: pace, BatchSize: crashBatch,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "engine:", err)
		return 1
	}
	return 0
}

// crashBatch is the relay's batch size in the crash children: small, so that "at most one batch
// re-sent per crash" (the one appended and not yet recorded) is a sharp bound.
const crashBatch = 4

// A planned start: killed at the at-th hit of point, or by the parent after delay when point is
// "timer", or not at all when point is "".
type start struct {
	point string
	at    int
	delay time.Duration
}

func crashPlan(rng *rand.Rand, units int) []start {
	write := []string{faultpoint.BeforeCommit, faultpoint.AfterCommit, faultpoint.JournalMidWrite,
		faultpoint.JournalBeforeSync, faultpoint.RelayAfterAppend}
	rng.Shuffle(len(write), func(i, j int) { write[i], write[j] = write[j], write[i] })
	var plan []start
	for i, p := range write {
		n := 1 + rng.IntN(2*units)
		if p == faultpoint.JournalMidWrite || p == faultpoint.JournalBeforeSync || p == faultpoint.RelayAfterAppend {
			n = 1 + rng.IntN(units/2)
		}
		plan = append(plan, start{point: p, at: n})
		// Recovery is killed right after a start that left lines behind.
		if i == 1 {
			plan = append(plan, start{point: faultpoint.RecoverBeforeForget, at: 1})
		}
		if i == 3 {
			plan = append(plan, start{point: faultpoint.RecoverAfterForget, at: 1})
		}
	}
	plan = append(plan, start{point: "timer", delay: time.Duration(20+rng.IntN(200)) * time.Millisecond})
	return append(plan, start{}) // the clean start that finishes the book
}

// crashSeeds is how many kill plans the crash test runs: one by default, each plan a dozen engine
// starts that reach every crash point; make reliability runs OUTBOX_CRASH_SEEDS=25.
func crashSeeds() int {
	if n, err := strconv.Atoi(os.Getenv("OUTBOX_CRASH_SEEDS")); err == nil && n > 0 {
		return n
	}
	return 1
}

// TestCrashesAtEveryPointLoseNothingAndCountNothingTwice kills real engine processes with SIGKILL at
// each named point of the write path, the relay and recovery, restarts them, and then checks the
// journal against the database.
func TestCrashesAtEveryPointLoseNothingAndCountNothingTwice(t *testing.T) {
	t.Parallel()
	const units = 60
	for seed := 1; seed <= crashSeeds(); seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(seed), 0x6f7574626f78))
			dir := t.TempDir()
			db, jpath, committed := filepath.Join(dir, "book.db"), filepath.Join(dir, "journal.jsonl"), filepath.Join(dir, "committed")
			kills := 0
			for i, st := range crashPlan(rng, units) {
				env := []string{"DB=" + db, "JOURNAL=" + jpath, "COMMITTED=" + committed,
					"UNITS=" + strconv.Itoa(units), fmt.Sprintf("RUN=run-%d-%d", seed, i)}
				switch {
				case runEngineStart(t, env, st):
					kills++
				case st.point != "":
					t.Logf("start %d finished the book before reaching %s #%d", i, st.point, st.at)
				}
			}
			res, err := demo.Check(context.Background(), db, jpath, units, committed)
			if err != nil {
				t.Fatal(err)
			}
			if !res.OK() {
				t.Errorf("after %d kills: %v", kills, res.Problems())
			}
			// Each crash re-sends at most the one batch it had in flight.
			if max := kills * crashBatch; res.Report.Duplicates > max {
				t.Errorf("%d duplicates after %d kills, more than %d", res.Report.Duplicates, kills, max)
			}
			if res.CommittedChecked < units {
				t.Errorf("only %d committed events were logged", res.CommittedChecked)
			}
			t.Logf("%d kills, %d lines, %d duplicates, %d runs, %d committed events checked",
				kills, res.Report.Lines, res.Report.Duplicates, len(res.Report.Runs), res.CommittedChecked)
		})
	}
}
