// SPDX-License-Identifier: Apache-2.0

package jetstream_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/jetstream"
	"github.com/textmachine/outbox/outbox"
)

// BenchmarkTrimBeside measures, on one server with a one-replica file stream, a sink appending
// benchLines 200-byte lines a run per iteration in batches of 1,000 while FollowStream applies them
// to an inbox, each iteration ending when the inbox has committed the stream's last sequence:
//
//   - without-trim: nothing else runs;
//   - with-trim: Trim (keep 0) runs beside them in a loop, 10 ms apart, so that each pass removes
//     what the reader applied since the one before and records it for the sink.
//
// It reports lines/s through both, and for with-trim the stream's bytes at the end, which stay
// around one iteration's where without-trim's grow with b.N.
func BenchmarkTrimBeside(b *testing.B) {
	for _, withTrim := range []bool{false, true} {
		name := "without-trim"
		if withTrim {
			name = "with-trim"
		}
		b.Run(name, func(b *testing.B) { benchTrimBeside(b, withTrim) })
	}
}

func benchTrimBeside(b *testing.B, withTrim bool) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	js := startServer(b).connect(b)
	st, err := jetstream.CreateStream(ctx, js, "EVENTS")
	if err != nil {
		b.Fatal(err)
	}
	s := sink(b, js)
	in, err := inbox.Open(ctx, filepath.Join(b.TempDir(), "platform.db"), inbox.WithReaderName("bench"),
		inbox.WithPollInterval(5*time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	defer in.Close()
	followed := make(chan error, 1)
	go func() {
		followed <- jetstream.FollowStream(ctx, js, "EVENTS", in, func(context.Context, *sql.Tx, inbox.Event) error { return nil })
	}()
	trimmed := make(chan error, 1)
	if withTrim {
		go func() {
			for ctx.Err() == nil {
				if _, err := jetstream.Trim(ctx, js, "EVENTS", jetstream.WithKeep(0)); err != nil && ctx.Err() == nil {
					trimmed <- err
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
			trimmed <- nil
		}()
	}
	pad := strings.Repeat(" ", 120)
	source := jetstream.StreamSourceName("EVENTS", jetstream.DefaultPrefix)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		run := fmt.Sprintf("run-%d", i)
		lines := make([]outbox.EventLine, benchLines)
		for j := range lines {
			seq := int64(j + 1)
			lines[j] = outbox.EventLine{Seq: seq, Line: fmt.Appendf(nil, `{"engine_run_id":%q,"seq":%d,"type":"spend","pad":"%s"}`, run, seq, pad)}
		}
		for j := 0; j < len(lines); j += 1000 {
			if err := s.Append(ctx, run, lines[j:min(len(lines), j+1000)]); err != nil {
				b.Fatal(err)
			}
		}
		info, err := st.Info(ctx)
		if err != nil {
			b.Fatal(err)
		}
		for {
			pos, err := in.SourcePosition(ctx, source)
			if err != nil {
				b.Fatal(err)
			}
			if pos != nil {
				if p, err := jetstream.ParseStreamPosition(pos); err == nil && p.Seq >= info.State.LastSeq {
					break
				}
			}
			select {
			case err := <-followed:
				b.Fatalf("FollowStream ended: %v", err)
			case err := <-trimmed:
				b.Fatalf("Trim ended: %v", err)
			case <-time.After(time.Millisecond):
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N*benchLines)/b.Elapsed().Seconds(), "lines/s")
	if info, err := st.Info(ctx); err == nil {
		b.ReportMetric(float64(info.State.Bytes), "stream-bytes")
	}
}
