// SPDX-License-Identifier: Apache-2.0

//go:build unix

package outbox_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/textmachine/outbox/outbox"
)

// BenchmarkEnqueueCommitCost reports what an enqueue costs in the two measures that a loaded,
// shared machine does not blur: the process's CPU time per event (user and system, every thread:
// wall time moves by a factor of two between runs there) and the WAL frames each commit writes (one
// page each; at FULL the fdatasync carries them). Run it beside another tree's build, alternately.
func BenchmarkEnqueueCommitCost(b *testing.B) {
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		dur   outbox.Durability
		batch int
	}{
		{"NORMAL/single", outbox.DurabilityNormal, 1},
		{"NORMAL/batch100", outbox.DurabilityNormal, 100},
		{"FULL/single", outbox.DurabilityFull, 1},
	} {
		b.Run(c.name, func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "o.db")
			s := openBench(b, path, outbox.WithDurability(c.dur))
			builds := make([]outbox.EventBuilder, c.batch)
			for i := range builds {
				builds[i] = benchBuild
			}
			one := func() {
				var err error
				if c.batch == 1 {
					_, err = s.EnqueueEvent(ctx, "run", benchBuild)
				} else {
					_, err = s.EnqueueEvents(ctx, "run", builds)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			for range 20 { // statements prepared, the run's row made
				one()
			}
			// Fifty small commits from here fit in the WAL before any checkpoint restarts it.
			const commits = 50
			w0 := fileSize(b, path+"-wal")
			for range commits {
				one()
			}
			frames := float64(fileSize(b, path+"-wal")-w0) / float64(4096+24) / commits
			c0 := cpuTime()
			b.ResetTimer()
			for range b.N {
				one()
			}
			b.StopTimer()
			cpu := cpuTime() - c0
			b.ReportMetric(float64(cpu.Nanoseconds())/1e3/float64(b.N*c.batch), "cpu-us/event")
			b.ReportMetric(frames, "wal-frames/commit")
		})
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func fileSize(b *testing.B, path string) int64 {
	b.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	return fi.Size()
}
