// SPDX-License-Identifier: Apache-2.0

package inbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/journal"
)

func TestRunIDsWithNULControlBytesAndLengthAreDistinctRuns(t *testing.T) {
	ctx := context.Background()
	in, _ := setup(t)
	long := strings.Repeat("x", 70000)
	runs := []string{"a\x00b", "a\x00c", "a", "a\x00", "\x01\x7f\t", long, long + "y"}
	mk := func(run string, seq int64, body string) []byte {
		j, _ := jsonString(run)
		return fmt.Appendf(nil, `{"engine_run_id":%s,"seq":%d,"type":"t","data":%q}`, j, seq, body)
	}
	for i, r := range runs {
		var ls [][]byte
		for s := int64(1); s <= int64(i+1); s++ {
			ls = append(ls, mk(r, s, ""))
		}
		rep, err := in.Apply(ctx, ls, insertNothing)
		if err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		if rep.Applied != i+1 {
			t.Fatalf("run %d: %+v", i, rep)
		}
	}
	for i, r := range runs {
		if p := position(t, in, r); p != int64(i+1) {
			t.Fatalf("run %d position %d", i, p)
		}
	}
	// a conflict on one NUL run quarantines that one only
	if rep, err := in.Apply(ctx, [][]byte{mk(runs[0], 1, "x")}, insertNothing); err != nil || rep.Quarantined != 1 {
		t.Fatalf("%+v %v", rep, err)
	}
	q := quarantined(t, in)
	if len(q) != 1 || q[0].RunID != runs[0] {
		t.Fatalf("%+v", q)
	}
	if err := in.Release(ctx, runs[1]); !errors.Is(err, inbox.ErrNotQuarantined) {
		t.Fatalf("release of the other NUL run: %v", err)
	}
	if err := in.Release(ctx, runs[0]); err != nil {
		t.Fatal(err)
	}
	rs, err := collect(in.AllRuns(ctx))
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != len(runs) {
		t.Fatalf("%d runs listed", len(rs))
	}
	// invalid UTF-8 in the run id is malformed and leaves nothing
	_, err = in.Apply(ctx, [][]byte{[]byte("{\"engine_run_id\":\"a\xffb\",\"seq\":1}")}, insertNothing)
	var le *inbox.LineError
	if !errors.As(err, &le) {
		t.Fatalf("invalid UTF-8: %v", err)
	}
}

func jsonString(s string) (string, error) {
	b, err := jsonMarshal(s)
	return string(b), err
}

var jsonMarshal = json.Marshal

func TestHostileRunIDsAreKeptApartAndNeverMerged(t *testing.T) {
	t.Parallel()
	in, path := setup(t)
	long := strings.Repeat("é", 5000)
	ids := map[string]string{ // as written in JSON → the run id it decodes to
		`a`:            "a",
		`a\u0000b`:     "a\x00b",
		`a\u0001`:      "a\x01",
		`a\n`:          "a\n",
		`a\r`:          "a\r",
		`a\u007f`:      "a\x7f",
		`a\u2028`:      "a\u2028",
		`\u00e9`:       "é",
		`e\u0301`:      "e\u0301", // the same glyph as é, not the same run
		`\ud83d\ude00`: "😀",
		long:           long,
	}
	var call [][]byte
	for raw := range ids {
		call = append(call, []byte(`{"engine_run_id":"`+raw+`","seq":1}`))
	}
	// An escape that decodes to an id already seen continues that run.
	call = append(call, []byte(`{"engine_run_id":"\u0061","seq":2}`))
	rep, err := in.Apply(context.Background(), call, insertHandler)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Applied != len(ids)+1 {
		t.Errorf("%+v", rep)
	}
	for _, id := range ids {
		want := int64(1)
		if id == "a" {
			want = 2
		}
		if p := position(t, in, id); p != want {
			t.Errorf("run %q at %d, want %d", id, p, want)
		}
	}
	if n := count(t, rawDB(t, path), `SELECT count(*) FROM inbox_runs`); n != len(ids) {
		t.Errorf("%d runs stored, want %d", n, len(ids))
	}
	// Invalid UTF-8 in the JSON, raw or in the run id, is malformed, never a run.
	for _, bad := range []string{"{\"engine_run_id\":\"a\x80\",\"seq\":3}", "{\"engine_run_id\":\"a\",\"seq\":3,\"x\":\"\xed\xa0\x80\"}"} {
		if _, err := in.Apply(context.Background(), [][]byte{[]byte(bad)}, insertHandler); !errors.Is(err, journal.ErrMalformed) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}
