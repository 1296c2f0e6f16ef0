// SPDX-License-Identifier: Apache-2.0

package inbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/journal"
)

func TestAMalformedLineStopsTheCallBeforeAnythingIsWritten(t *testing.T) {
	t.Parallel()
	const limit = 200
	for name, bad := range map[string][]byte{
		"no key":                []byte(`{"type":"x"}`),
		"no seq":                []byte(`{"engine_run_id":"r"}`),
		"seq zero":              []byte(`{"engine_run_id":"r","seq":0}`),
		"empty run id":          []byte(`{"engine_run_id":"","seq":1}`),
		"not JSON":              []byte(`engine_run_id=r seq=1`),
		"empty":                 {},
		"invalid UTF-8":         []byte("{\"engine_run_id\":\"r\xff\",\"seq\":1}"),
		"invalid UTF-8 outside": []byte("{\"engine_run_id\":\"r\",\"seq\":1,\"x\":\"\xc3\"}"),
		"lone surrogate run id": []byte(`{"engine_run_id":"r\ud800","seq":1}`),
		"over the limit":        append(line("r", 1, strings.Repeat("x", limit)), ' '),
		"holding a newline":     []byte("{\"engine_run_id\":\"r\",\n\"seq\":1}"),
		"two lines in one":      append(append(line("r", 1), '\n'), line("r", 2)...),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			in, path := setup(t, inbox.WithMaxLineSize(limit))
			// A gap and an applied line before the bad one: neither may be written.
			call := [][]byte{line("g", 5), line("r", 1), bad, line("r", 2)}
			rep, err := in.Apply(context.Background(), call, insertHandler)
			if !errors.Is(err, journal.ErrMalformed) {
				t.Fatalf("Apply: %v, want journal.ErrMalformed", err)
			}
			var le *inbox.LineError
			if !errors.As(err, &le) || le.Index != 2 {
				t.Fatalf("Apply: %v, want a *LineError at index 2", err)
			}
			if !strings.Contains(err.Error(), "line 3 of the batch") {
				t.Errorf("%q does not name the line's position", err)
			}
			if rep != (inbox.Report{}) {
				t.Errorf("report %+v beside an error", rep)
			}
			d := rawDB(t, path)
			for _, table := range []string{"applied", "inbox_runs", "inbox_digests", "inbox_quarantine"} {
				if n := count(t, d, `SELECT count(*) FROM `+table); n != 0 {
					t.Errorf("%s: %d rows written", table, n)
				}
			}
		})
	}
}

func TestALineAtTheLimitIsAppliedAndOneByteMoreIsMalformed(t *testing.T) {
	t.Parallel()
	at := line("r", 1, strings.Repeat("x", 100))
	in, _ := setup(t, inbox.WithMaxLineSize(len(at)))
	if rep := mustApply(t, in, [][]byte{at}); rep.Applied != 1 {
		t.Fatalf("%+v", rep)
	}
	over := line("r", 2, strings.Repeat("x", 101))
	if _, err := in.Apply(context.Background(), [][]byte{over}, insertHandler); !errors.Is(err, journal.ErrMalformed) {
		t.Fatalf("one byte over: %v", err)
	}
}
