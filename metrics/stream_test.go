// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"context"
	"errors"
	"testing"
)

func TestTheStreamCollectorShowsEachReadersLagAndWhatTheCapTookFromIt(t *testing.T) {
	read := func(context.Context) (StreamFigures, error) {
		return StreamFigures{Bytes: 4096, Msgs: 20, LastSeq: 120, CappedBelow: 101, Readers: []StreamReaderFigures{
			{Name: "billing", Lag: 3}, {Name: "audit", Lag: 70, CapTook: 50}}}, nil
	}
	got := scrape(t, NewStreamCollector("EVENTS", read))
	want := map[string]float64{
		"outbox_stream_up{stream=EVENTS}":                                1,
		"outbox_stream_bytes{stream=EVENTS}":                             4096,
		"outbox_stream_messages{stream=EVENTS}":                          20,
		"outbox_stream_last_seq{stream=EVENTS}":                          120,
		"outbox_stream_capped_below{stream=EVENTS}":                      101,
		"outbox_stream_reader_lag_seqs{reader=billing,stream=EVENTS}":    3,
		"outbox_stream_reader_capped_seqs{reader=billing,stream=EVENTS}": 0,
		"outbox_stream_reader_lag_seqs{reader=audit,stream=EVENTS}":      70,
		"outbox_stream_reader_capped_seqs{reader=audit,stream=EVENTS}":   50,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d samples, want %d: %v", len(got), len(want), got)
	}
}

func TestTheStreamCollectorAnswersUpZeroAndNothingElseWhenTheReadFails(t *testing.T) {
	var heard error
	read := func(context.Context) (StreamFigures, error) {
		return StreamFigures{}, errors.New("no servers available")
	}
	got := scrape(t, NewStreamCollector("EVENTS", read, WithErrorHandler(func(err error) { heard = err })))
	if len(got) != 1 || got["outbox_stream_up{stream=EVENTS}"] != 0 || heard == nil {
		t.Errorf("scrape %v, error heard %v: want only outbox_stream_up 0", got, heard)
	}
}

func TestTwoStreamsCollectorsShareARegistry(t *testing.T) {
	read := func(context.Context) (StreamFigures, error) {
		return StreamFigures{LastSeq: 1, Readers: []StreamReaderFigures{{Name: "r", Lag: 1}}}, nil
	}
	got := scrape(t, NewStreamCollector("A", read), NewStreamCollector("B", read))
	if got["outbox_stream_reader_lag_seqs{reader=r,stream=A}"] != 1 || got["outbox_stream_reader_lag_seqs{reader=r,stream=B}"] != 1 {
		t.Errorf("scrape %v: want a reader's series under each stream", got)
	}
}
