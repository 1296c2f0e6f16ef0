// SPDX-License-Identifier: Apache-2.0

package inbox_test

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/journal"
)

// FuzzApply: whatever the lines, Apply never panics, never applies a call holding a line the journal
// does not take as a journal line (nothing of it is written), and otherwise counts every line in
// exactly one field of its Report. Lines are separated by 0x1e in the input, so that a line may hold
// a newline.
func FuzzApply(f *testing.F) {
	for _, seed := range []string{
		`{"engine_run_id":"r","seq":1}`,
		"{\"engine_run_id\":\"r\",\"seq\":1}\x1e{\"engine_run_id\":\"r\",\"seq\":2}\x1e{\"engine_run_id\":\"r\",\"seq\":1}",
		"{\"engine_run_id\":\"r\",\"seq\":3}\x1e{\"engine_run_id\":\"s\",\"seq\":1,\"x\":1}\r",
		`{"engine_run_id":"r\ud800","seq":1}`,
		"{\"engine_run_id\":\"r\xff\",\"seq\":1}",
		"{\"engine_run_id\":\"r\",\n\"seq\":1}",
		`{"engine_run_id":"\u0000","seq":9223372036854775807}`,
		`{"seq":1,"engine_run_id":"a","engine_run_id":"b"}`,
		"",
	} {
		f.Add([]byte(seed))
	}
	const limit = 512
	path := filepath.Join(f.TempDir(), "fuzz.db")
	in, err := inbox.Open(context.Background(), path, inbox.WithMaxLineSize(limit), inbox.WithDigestWindow(16))
	if err != nil {
		f.Fatal(err)
	}
	defer in.Close()
	d := rawDB(f, path)
	f.Fuzz(func(t *testing.T, data []byte) {
		ls := bytes.Split(data, []byte{0x1e})
		malformed := false
		for _, l := range ls {
			if _, _, err := journal.LineKey(l); err != nil || len(l) > limit || bytes.IndexByte(l, '\n') >= 0 {
				malformed = true
			}
		}
		before := count(t, d, `SELECT (SELECT count(*) FROM inbox_runs) + (SELECT total(hwm) FROM inbox_runs) + (SELECT total(length(digests)) FROM inbox_digests) + (SELECT count(*) FROM inbox_quarantine)`)
		rep, err := in.Apply(context.Background(), ls, insertNothing)
		after := count(t, d, `SELECT (SELECT count(*) FROM inbox_runs) + (SELECT total(hwm) FROM inbox_runs) + (SELECT total(length(digests)) FROM inbox_digests) + (SELECT count(*) FROM inbox_quarantine)`)
		switch {
		case malformed:
			if !errors.Is(err, journal.ErrMalformed) {
				t.Fatalf("a call holding a malformed line: %v", err)
			}
			if before != after || rep != (inbox.Report{}) {
				t.Fatalf("a refused call wrote: %d → %d, %+v", before, after, rep)
			}
		case err != nil:
			t.Fatalf("Apply: %v", err)
		case rep.Applied+rep.Duplicates+rep.Stale+rep.Quarantined != len(ls):
			t.Fatalf("%+v for %d lines", rep, len(ls))
		}
	})
}
