// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"

	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/textmachine/outbox/jetstream"
	"github.com/textmachine/outbox/metrics"
)

// streamFigures reads a stream's figures for the metrics module's stream collector, which does not
// depend on NATS.
func streamFigures(js njs.JetStream, stream string) func(context.Context) (metrics.StreamFigures, error) {
	return func(ctx context.Context) (metrics.StreamFigures, error) {
		st, err := jetstream.Status(ctx, js, stream)
		if err != nil {
			return metrics.StreamFigures{}, err
		}
		f := metrics.StreamFigures{Bytes: st.Bytes, Msgs: st.Msgs, LastSeq: st.LastSeq, CappedBelow: st.CappedBelow}
		for _, r := range st.Readers {
			f.Readers = append(f.Readers, metrics.StreamReaderFigures{Name: r.Name, Lag: r.Lag, CapTook: r.CapTook})
		}
		return f, nil
	}
}
