// SPDX-License-Identifier: Apache-2.0

//go:build unix

package outbox_test

import (
	"context"
	"encoding/binary"
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
			// The frames are counted in the WAL's own headers, not from its file's size: a checkpoint
			// that restarts the WAL inside the window (a batch's commits fill the 1,000 frames of the
			// automatic checkpoint in some dozens) rewrites the file from its start, and the window is
			// measured again.
			commits := 50 / min(c.batch, 5)
			var frames float64
			for try := 0; ; try++ {
				salt0, f0 := walFrames(b, path+"-wal")
				for range commits {
					one()
				}
				salt1, f1 := walFrames(b, path+"-wal")
				if salt1 == salt0 {
					frames = float64(f1-f0) / float64(commits)
					break
				}
				if try == 5 {
					b.Fatal("the WAL restarted in every window")
				}
			}
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

// walFrames returns the WAL's salt and how many frames of the generation that salt names follow its
// header: every frame a commit writes since the WAL last restarted (a frame of an older generation,
// left further on in the file, has another salt). The book's pages are 4,096 bytes.
func walFrames(b *testing.B, path string) (salt uint64, frames int64) {
	b.Helper()
	wal, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	const header, frame = 32, 24 + 4096
	if len(wal) < header {
		return 0, 0
	}
	salt = binary.BigEndian.Uint64(wal[16:24])
	for off := header; off+frame <= len(wal) && binary.BigEndian.Uint64(wal[off+8:off+16]) == salt; off += frame {
		frames++
	}
	return salt, frames
}
