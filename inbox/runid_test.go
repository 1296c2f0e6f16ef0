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
	rs, err := in.Runs(ctx)
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
