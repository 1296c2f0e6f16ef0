package jetstream_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/textmachine/outbox/outbox"
)

// BenchmarkSink projects lines of 200 bytes to a one-replica file-storage stream on loopback, in
// batches of 256, beside plain js.Publish of the same lines without headers (the broker's own limit
// for one publisher waiting for each acknowledgement).
func BenchmarkSink(b *testing.B) {
	ctx := context.Background()
	pad := strings.Repeat(" ", 120)
	mk := func(run string, from, n int64) []outbox.EventLine {
		out := make([]outbox.EventLine, n)
		for i := range out {
			seq := from + int64(i)
			out[i] = outbox.EventLine{Seq: seq, Line: fmt.Appendf(nil, `{"engine_run_id":%q,"seq":%d,"type":"spend","pad":"%s"}`, run, seq, pad)}
		}
		return out
	}
	const batch = 256
	b.Run("publish", func(b *testing.B) {
		js := startServer(b).connect(b)
		stream(b, js, time.Minute)
		lines := mk("run", 1, batch)
		for b.Loop() {
			for _, l := range lines {
				if _, err := js.Publish(ctx, "outbox.run", l.Line); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(batch*b.N)/b.Elapsed().Seconds(), "lines/s")
	})
	b.Run("sink", func(b *testing.B) {
		js := startServer(b).connect(b)
		stream(b, js, time.Minute)
		s := sink(b, js)
		next := int64(1)
		for b.Loop() {
			if err := s.Append(ctx, "run", mk("run", next, batch)); err != nil {
				b.Fatal(err)
			}
			next += batch
		}
		b.ReportMetric(float64(batch*b.N)/b.Elapsed().Seconds(), "lines/s")
	})
}
