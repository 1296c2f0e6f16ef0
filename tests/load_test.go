// SPDX-License-Identifier: Apache-2.0

package tests

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/journal"
)

// TestSustainedLoadKeepsMemoryFlatAndLosesNothing runs 16 producers and a relay into a journal for a
// while (3 s here; OUTBOX_LOAD_SECONDS for longer): the heap after GC stays flat, every acknowledged
// event reaches the journal, and the latency of EnqueueEvent is reported.
//
// It does not run in parallel with the package's other tests: the heap it samples is the process's, and
// a test moving a 64 MiB line beside it would read as growth.
func TestSustainedLoadKeepsMemoryFlatAndLosesNothing(t *testing.T) {
	seconds := 3
	if v, err := strconv.Atoi(os.Getenv("OUTBOX_LOAD_SECONDS")); err == nil && v > 0 {
		seconds = v
	}
	ctx := context.Background()
	s, _ := outboxtest.Setup(t)
	jpath := filepath.Join(t.TempDir(), "j.jsonl")
	j, err := journal.OpenFile(jpath)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	relayCtx, stopRelay := context.WithCancel(ctx)
	relayDone := make(chan error, 1)
	relay := outboxtest.NewRelay(t, s, j, "load")
	go func() { relayDone <- relay.Run(relayCtx) }()

	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapInuse
	}
	var acked atomic.Int64
	var mu sync.Mutex
	var lat []time.Duration
	deadline := time.Now().Add(time.Duration(seconds) * time.Second)
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for time.Now().Before(deadline) {
				t0 := time.Now()
				if _, err := s.EnqueueEvent(ctx, "load", journal.Builder("load", "x", g)); err != nil {
					t.Error(err)
					return
				}
				mine = append(mine, time.Since(t0))
				acked.Add(1)
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	// The heap is sampled once the load is running, and at the end of it.
	time.Sleep(time.Duration(seconds) * time.Second / 4)
	early := heap()
	wg.Wait()
	late := heap()

	outboxtest.WaitProjected(t, s, "load", acked.Load(), 30*time.Second)
	stopRelay()
	<-relayDone
	f, _ := os.Open(jpath)
	defer f.Close()
	rep, err := journal.Verify(f)
	if err != nil || rep.Runs["load"].Last != acked.Load() {
		t.Errorf("journal: (%+v, %v), %d events acknowledged", rep, err, acked.Load())
	}
	// Flat: the late heap may not exceed the early one by more than a few MiB, whatever the count.
	if late > early+16<<20 {
		t.Errorf("heap grew from %d to %d bytes under steady load", early, late)
	}
	slices.Sort(lat)
	t.Logf("%d events in %ds (%.0f/s) with 16 producers and a relay; EnqueueEvent p50 %v, p99 %v, max %v; heap %d -> %d KiB",
		acked.Load(), seconds, float64(acked.Load())/float64(seconds), lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1], early>>10, late>>10)
}
