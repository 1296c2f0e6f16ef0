// SPDX-License-Identifier: Apache-2.0

package journal_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/textmachine/outbox/journal"
)

func ln(run string, seq int64, rest string) string {
	return fmt.Sprintf(`{"engine_run_id":%q,"seq":%d%s}`+"\n", run, seq, rest)
}

func verifyString(s string) (journal.Report, error) { return journal.Verify(strings.NewReader(s)) }

func TestVerifyRequiresEachRunToStartAtOneAndGoUpByOne(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		input          string
		line           int
		run            string
		expected, seen int64
	}{
		"first line not 1": {ln("a", 2, ""), 1, "a", 1, 2},
		"skipped seq":      {ln("a", 1, "") + ln("a", 2, "") + ln("a", 4, ""), 3, "a", 3, 4},
		"second run gap":   {ln("a", 1, "") + ln("b", 1, "") + ln("b", 3, ""), 3, "b", 2, 3},
	} {
		rep, err := verifyString(tc.input)
		var ve *journal.Error
		if !errors.Is(err, journal.ErrStreamGap) || !errors.As(err, &ve) {
			t.Errorf("%s: err = %v, want ErrStreamGap", name, err)
			continue
		}
		if ve.Line != tc.line || ve.Run != tc.run || ve.Expected != tc.expected || ve.Seq != tc.seen {
			t.Errorf("%s: error at line %d run %q expected %d found %d; want %d %q %d %d",
				name, ve.Line, ve.Run, ve.Expected, ve.Seq, tc.line, tc.run, tc.expected, tc.seen)
		}
		for _, want := range []string{fmt.Sprint(tc.line), tc.run, fmt.Sprint(tc.expected), fmt.Sprint(tc.seen)} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: message %q does not name %q", name, err, want)
			}
		}
		if rep.Lines != tc.line-1 {
			t.Errorf("%s: report covers %d lines, want the %d before the error", name, rep.Lines, tc.line-1)
		}
	}
}

func TestVerifySkipsIdenticalRedeliveriesAndRefusesConflicts(t *testing.T) {
	t.Parallel()
	in := ln("a", 1, `,"x":1`) + ln("a", 2, "") + ln("a", 1, `,"x":1`) + ln("a", 2, "") + ln("a", 3, "")
	rep, err := verifyString(in)
	if err != nil {
		t.Fatal(err)
	}
	want := journal.Report{Lines: 3, Duplicates: 2, Runs: map[string]journal.RunReport{"a": {Last: 3, Lines: 3, Duplicates: 2}}}
	if diff := cmp.Diff(want, rep); diff != "" {
		t.Errorf("report (-want +got):\n%s", diff)
	}
	_, err = verifyString(ln("a", 1, `,"x":1`) + ln("a", 2, "") + ln("a", 1, `,"x":2`))
	var ve *journal.Error
	if !errors.Is(err, journal.ErrPayloadConflict) || !errors.As(err, &ve) || ve.Line != 3 || ve.Seq != 1 || ve.Run != "a" {
		t.Errorf("conflict: %v", err)
	}
	// Bytes, not meaning: reordered members or other spacing are a conflict too.
	_, err = verifyString(ln("a", 1, `,"x":1`) + `{"seq":1,"engine_run_id":"a","x":1}` + "\n")
	if !errors.Is(err, journal.ErrPayloadConflict) {
		t.Errorf("reordered members: %v, want ErrPayloadConflict", err)
	}
	// A copy that is the first one plus a trailing blank, or the first one less it.
	short, long := `{"engine_run_id":"a","seq":1}`, `{"engine_run_id":"a","seq":1} `
	for _, in := range []string{short + "\n" + long + "\n", long + "\n" + short + "\n"} {
		for _, rest := range []string{"", ln("a", 2, "")} {
			if _, err := verifyString(in + rest); !errors.Is(err, journal.ErrPayloadConflict) {
				t.Errorf("%q: %v, want ErrPayloadConflict", in+rest, err)
			}
		}
	}
}

func TestVerifyChecksInterleavedRunsEachOnItsOwn(t *testing.T) {
	t.Parallel()
	in := ln("a", 1, "") + ln("b", 1, "") + ln("a", 2, "") + ln("c", 1, "") + ln("b", 2, "") + ln("a", 3, "")
	rep, err := verifyString(in)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]journal.RunReport{"a": {Last: 3, Lines: 3}, "b": {Last: 2, Lines: 2}, "c": {Last: 1, Lines: 1}}
	if diff := cmp.Diff(want, rep.Runs); diff != "" {
		t.Errorf("runs (-want +got):\n%s", diff)
	}
}

func TestVerifyReportsATornTailAndRefusesMalformedLines(t *testing.T) {
	t.Parallel()
	rep, err := verifyString(ln("a", 1, "") + `{"engine_run_id":"a","se`)
	if err != nil || !rep.TornTail || rep.Lines != 1 {
		t.Errorf("torn tail: (%+v, %v)", rep, err)
	}
	rep, err = verifyString(ln("a", 1, ""))
	if err != nil || rep.TornTail {
		t.Errorf("clean end: (%+v, %v)", rep, err)
	}
	malformed := []string{
		"",
		"   ",
		"[1,2]",
		`"a string"`,
		`{"engine_run_id":"a"}`,
		`{"seq":1}`,
		`{"engine_run_id":1,"seq":1}`,
		`{"engine_run_id":"","seq":1}`,
		`{"engine_run_id":"a","seq":"1"}`,
		`{"engine_run_id":"a","seq":1.0}`,
		`{"engine_run_id":"a","seq":1e0}`,
		`{"engine_run_id":"a","seq":0}`,
		`{"engine_run_id":"a","seq":-1}`,
		`{"engine_run_id":"a","seq":99999999999999999999}`,
		`{"Engine_Run_ID":"a","seq":1}`,
		`{"engine_run_id":"a","SEQ":1}`,
		`{"engine_run_id":"a","seq":1,"seq":2}`,
		`{"engine_run_id":"a","engine_run_id":"b","seq":1}`,
		`{"engine_run_id":"a","seq":1`,
		"{\"engine_run_id\":\"a\xff\",\"seq\":1}",
	}
	for _, m := range malformed {
		rep, err := verifyString(ln("ok", 1, "") + m + "\n" + ln("ok", 2, ""))
		var ve *journal.Error
		if !errors.Is(err, journal.ErrMalformed) || !errors.As(err, &ve) || ve.Line != 2 {
			t.Errorf("%q: err = %v, want ErrMalformed at line 2", m, err)
			continue
		}
		if !strings.Contains(err.Error(), "line 2") {
			t.Errorf("%q: message %q does not name the line", m, err)
		}
		if rep.Lines != 1 {
			t.Errorf("%q: report covers %d lines, want 1", m, rep.Lines)
		}
	}
	// Nested members named like the keys do not count; escaped names that decode to them do.
	for _, ok := range []string{
		`{"data":{"seq":5,"engine_run_id":"x"},"engine_run_id":"a","seq":1}`,
		`{"engine_run_id":"a","seq":1,"list":[{"seq":9}],"s":"\"seq\":3"}`,
		`{"engine\u005frun_id":"a","s\u0065q":1}`,
		` { "engine_run_id" : "a" , "seq" : 1 } `,
	} {
		if _, err := verifyString(ok + "\n"); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
}

func TestVerifyComparesRedeliveriesOfAStreamByDigest(t *testing.T) {
	t.Parallel()
	stream := func(s string) io.Reader { return struct{ io.Reader }{strings.NewReader(s)} }
	rep, err := journal.Verify(stream(ln("a", 1, `,"x":1`) + ln("a", 1, `,"x":1`)))
	if err != nil || rep.Duplicates != 1 {
		t.Errorf("identical re-delivery: (%+v, %v)", rep, err)
	}
	if _, err := journal.Verify(stream(ln("a", 1, `,"x":1`) + ln("a", 1, `,"x":2`))); !errors.Is(err, journal.ErrPayloadConflict) {
		t.Errorf("conflict: %v", err)
	}
	v := journal.NewVerifier()
	for _, l := range []string{ln("a", 1, ""), ln("a", 1, ""), ln("a", 2, "")} {
		if err := v.Check([]byte(strings.TrimSuffix(l, "\n"))); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff(journal.Report{Lines: 2, Duplicates: 1, Runs: map[string]journal.RunReport{"a": {Last: 2, Lines: 2, Duplicates: 1}}}, v.Report()); diff != "" {
		t.Errorf("Check (-want +got):\n%s", diff)
	}
}

func TestVerifyHandlesLinesLongerThanItsBuffer(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", 3<<20)
	in := ln("a", 1, `,"big":"`+big+`"`) + ln("a", 2, "") + ln("a", 1, `,"big":"`+big+`"`)
	rep, err := verifyString(in)
	if err != nil || rep.Lines != 2 || rep.Duplicates != 1 {
		t.Errorf("(%+v, %v)", rep, err)
	}
	// Starting inside a buffer, after lines of their own, and ending one byte short of a newline.
	pad := strings.Repeat(ln("p", 1, "")+ln("p", 1, ""), 10_000)
	in = ln("p", 1, "") + pad + ln("a", 1, `,"big":"`+big+`"`) + pad + ln("a", 2, "") + ln("a", 1, `,"big":"`+big+`"`) + strings.TrimSuffix(ln("a", 3, `,"big":"`+big), "\n")
	for _, r := range []io.Reader{strings.NewReader(in), struct{ io.Reader }{strings.NewReader(in)}} {
		rep, err := journal.Verify(r)
		if err != nil || rep.Lines != 3 || rep.Duplicates != 1+40_000 || !rep.TornTail {
			t.Errorf("(%+v, %v)", rep, err)
		}
	}
}

// FuzzVerify: Verify never panics, and whenever it accepts its input, an independent reading of the
// same lines with encoding/json finds no gap and no conflict.
func FuzzVerify(f *testing.F) {
	f.Add([]byte(ln("a", 1, "") + ln("a", 2, "") + ln("a", 1, "")))
	f.Add([]byte(ln("a", 1, "") + ln("b", 1, "") + ln("a", 3, "")))
	f.Add([]byte(ln("a", 1, `,"x":1`) + ln("a", 1, `,"x":2`)))
	f.Add([]byte(`{"engine_run_id":"a","seq":1,"d":{"seq":2}}` + "\n" + `{"engine_run_id":"a","se`))
	f.Add([]byte(`{"engine\u005frun_id":"a","seq":1}` + "\n"))
	f.Add([]byte(`{"engine_run_id":"\ud800","seq":1}` + "\n" + `{"engine_run_id":"\udfff","seq":2}` + "\n"))
	f.Add([]byte(ln("a", 1, `,"x":1`) + ln("a", 2, `,"x":1`) + ln("a", 3, `,"SEQ":1`)))
	f.Add([]byte(ln("a", 1, `,"Seq":1`) + `{"engine_run_id":"a","seq":2,"\u017feq":1}` + "\n" + `{"engine_run_\u0049d":"b","engine_run_id":"a","seq":3}` + "\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		rep, err := journal.Verify(bytes.NewReader(in))
		// A stream that cannot be read back is checked by digest instead of by re-reading: the same
		// verdict either way.
		streamRep, streamErr := journal.Verify(struct{ io.Reader }{bytes.NewReader(in)})
		if (err == nil) != (streamErr == nil) || !cmp.Equal(rep, streamRep) {
			t.Fatalf("file mode (%+v, %v) and stream mode (%+v, %v) disagree", rep, err, streamRep, streamErr)
		}
		// With a small line limit, the two modes agree too, and nothing longer passes.
		const limit = 40
		small, smallErr := journal.Verify(bytes.NewReader(in), journal.WithMaxLineSize(limit))
		smallStream, smallStreamErr := journal.Verify(struct{ io.Reader }{bytes.NewReader(in)}, journal.WithMaxLineSize(limit))
		if (smallErr == nil) != (smallStreamErr == nil) || !cmp.Equal(small, smallStream) {
			t.Fatalf("with a limit, file mode (%+v, %v) and stream mode (%+v, %v) disagree", small, smallErr, smallStream, smallStreamErr)
		}
		if smallErr == nil {
			for _, l := range bytes.Split(in, []byte("\n")) {
				if len(l) > limit {
					t.Fatalf("a line of %d bytes passed a limit of %d", len(l), limit)
				}
			}
		}
		if rep.Lines < 0 || rep.Duplicates < 0 {
			t.Fatalf("negative counts %+v", rep)
		}
		if err != nil {
			return
		}
		lines := bytes.Split(in, []byte("\n"))
		if !bytes.HasSuffix(in, []byte("\n")) != rep.TornTail && len(in) > 0 {
			t.Fatalf("TornTail = %v for input ending %q", rep.TornTail, in[max(0, len(in)-5):])
		}
		lines = lines[:len(lines)-1] // the torn tail, or the empty string after the last newline
		seen := map[string][][]byte{}
		total := 0
		for i, l := range lines {
			var m map[string]json.RawMessage
			if err := json.Unmarshal(l, &m); err != nil {
				t.Fatalf("line %d accepted but not a JSON object: %v", i+1, err)
			}
			var run string
			var seq int64
			if json.Unmarshal(m["engine_run_id"], &run) != nil || json.Unmarshal(m["seq"], &seq) != nil {
				t.Fatalf("line %d accepted without a string run and an integer seq: %q", i+1, l)
			}
			// A program that decodes the line into a struct reads the same key.
			var k struct {
				Run string `json:"engine_run_id"`
				Seq int64  `json:"seq"`
			}
			if err := json.Unmarshal(l, &k); err != nil || k.Run != run || k.Seq != seq {
				t.Fatalf("line %d (%q): the journal's key (%q, %d), encoding/json into a struct (%q, %d, %v)", i+1, l, run, seq, k.Run, k.Seq, err)
			}
			prev := seen[run]
			switch {
			case seq == int64(len(prev))+1:
				seen[run] = append(prev, l)
				total++
			case seq >= 1 && seq <= int64(len(prev)):
				if !bytes.Equal(prev[seq-1], l) {
					t.Fatalf("line %d: conflict accepted", i+1)
				}
			default:
				t.Fatalf("line %d: gap accepted (run %q, seq %d after %d)", i+1, run, seq, len(prev))
			}
		}
		if total != rep.Lines {
			t.Fatalf("report says %d lines, the model %d", rep.Lines, total)
		}
	})
}

// TestRunIDsThatAreNotCharactersAreMalformed: decoded, a lone surrogate becomes U+FFFD, so runs
// "\ud800", "\udfff" and "\ufffd" would be one run; they are refused instead, in Verify (as the
// first line and after a good one) and in LineKey.
func TestRunIDsThatAreNotCharactersAreMalformed(t *testing.T) {
	t.Parallel()
	for _, run := range []string{`\ud800`, `\udfff`, `r\ud800n`, `\ud800\u0041`, `\udc00\ud800`, `\ud800\ud800`, `\ud83d`} {
		line := `{"engine_run_id":"` + run + `","seq":1}`
		// After a line of the same shape, and as the first line.
		for _, in := range []string{ln("ok", 1, "") + line + "\n", `{"engine_run_id":"x","seq":1}` + "\n" + line + "\n"} {
			_, err := verifyString(in)
			var ve *journal.Error
			if !errors.Is(err, journal.ErrMalformed) || !errors.As(err, &ve) || ve.Line != 2 || !strings.Contains(ve.Reason, "surrogate") {
				t.Errorf("%s: %v, want ErrMalformed at line 2", line, err)
			}
		}
		if _, _, err := journal.LineKey([]byte(line)); !errors.Is(err, journal.ErrMalformed) {
			t.Errorf("LineKey(%s): %v, want ErrMalformed", line, err)
		}
	}
	// Three lines that once passed as one dense run.
	in := `{"engine_run_id":"\ud800","seq":1}` + "\n" + `{"engine_run_id":"\udfff","seq":2}` + "\n" + `{"engine_run_id":"\ufffd","seq":3}` + "\n"
	if rep, err := verifyString(in); !errors.Is(err, journal.ErrMalformed) {
		t.Errorf("(%+v, %v), want ErrMalformed", rep, err)
	}
	// A pair is one character, the same run as the character written out.
	rep, err := verifyString(`{"engine_run_id":"\ud83d\ude00","seq":1}` + "\n" + `{"engine_run_id":"😀","seq":2}` + "\n")
	if err != nil || rep.Runs["😀"].Last != 2 {
		t.Errorf("a surrogate pair: (%+v, %v)", rep, err)
	}
	if run, _, err := journal.LineKey([]byte(`{"engine_run_id":"\ud83d\ude00","seq":1}`)); err != nil || run != "😀" {
		t.Errorf("LineKey of a surrogate pair: (%q, %v)", run, err)
	}
}

func TestLineKeyReadsTheKeyWithVerifysRules(t *testing.T) {
	t.Parallel()
	run, seq, err := journal.LineKey([]byte(`{"seq":7,"engine_run_id":"r\u0031","x":[1]}`))
	if err != nil || run != "r1" || seq != 7 {
		t.Errorf("LineKey = (%q, %d, %v)", run, seq, err)
	}
	for _, bad := range []string{`{"seq":7}`, `{"engine_run_id":"r","seq":1.5}`, `not json`} {
		if _, _, err := journal.LineKey([]byte(bad)); !errors.Is(err, journal.ErrMalformed) {
			t.Errorf("LineKey(%s): %v, want ErrMalformed", bad, err)
		}
	}
}
