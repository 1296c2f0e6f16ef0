// SPDX-License-Identifier: Apache-2.0

package journal_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// foldedKeyLines are lines keyed (r, 1) by their exact members that also hold a member whose name
// encoding/json folds to "engine_run_id" or "seq" without being it: a reader that decodes them into
// a struct tagged `json:"seq"` may read another key. Renamed from folded to plain, the line is a
// good line with the same members otherwise.
var foldedKeyLines = []struct{ name, line, folded, plain string }{
	{"both in upper case after the keys", `{"engine_run_id":"r","seq":1,"ENGINE_RUN_ID":"upstream-7","SEQ":1001}`, `"ENGINE_RUN_ID":"upstream-7","SEQ"`, `"ENGINE_RUN_IX":"upstream-7","SEX"`},
	{"Seq", `{"engine_run_id":"r","seq":1,"Seq":1001}`, `"Seq"`, `"Sex"`},
	{"SEQ before the key", `{"SEQ":1001,"engine_run_id":"r","seq":1}`, `"SEQ"`, `"SEX"`},
	{"an escaped S", `{"engine_run_id":"r","seq":1,"\u0053EQ":1001}`, `"\u0053EQ"`, `"\u0053EX"`},
	{"a long s", `{"engine_run_id":"r","seq":1,"ſeq":1001}`, `"ſeq"`, `"ſex"`},
	{"an escaped long s", `{"engine_run_id":"r","seq":1,"\u017feq":1001}`, `"\u017feq"`, `"\u017fex"`},
	{"an escaped I in the run's name", `{"engine_run_id":"r","seq":1,"engine_run_\u0049d":"upstream-7"}`, `"engine_run_\u0049d"`, `"engine_run_\u0049x"`},
	{"Engine_Run_Id before the key", `{"Engine_Run_Id":"upstream-7","engine_run_id":"r","seq":1}`, `"Engine_Run_Id"`, `"Engine_Run_Ix"`},
	{"only a folded seq", `{"engine_run_id":"r","Seq":1}`, `"Seq"`, `"seq"`},
	{"only a folded run", `{"ENGINE_RUN_ID":"r","seq":1}`, `"ENGINE_RUN_ID"`, `"engine_run_id"`},
}

// notFolded are lines whose members look like the keys but that encoding/json does not read as them:
// they stay journal lines.
var notFolded = []string{
	`{"engine_run_id":"r","seq":1,"d":{"SEQ":2,"ENGINE_RUN_ID":"x"}}`,
	`{"engine_run_id":"r","seq":1,"seq_":2,"sequence":3,"SE":4,"şeq":5,"engine-run-id":"x","ENGINE_RUN_ID_":"y","EngineRunID":"z"}`,
	`{"engine_run_id":"r","seq":1,"s\u0065q2":2}`,
}

func TestAMemberWhoseNameFoldsToAKeyIsRefusedLikeASecondKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, c := range foldedKeyLines {
		line := []byte(c.line)
		good := strings.Replace(c.line, c.folded, c.plain, 1)
		if run, seq, err := journal.LineKey([]byte(good)); err != nil || run != "r" || seq != 1 {
			t.Fatalf("%s: the good line %s: (%q, %d, %v)", c.name, good, run, seq, err)
		}
		if _, _, err := journal.LineKey(line); !errors.Is(err, journal.ErrMalformed) {
			t.Errorf("%s: LineKey: %v, want ErrMalformed", c.name, err)
		}
		if err := journal.CheckLine("r", 1, line); !errors.Is(err, journal.ErrMalformed) {
			t.Errorf("%s: CheckLine: %v, want ErrMalformed", c.name, err)
		}

		// An enqueue checked by the journal stores nothing.
		s, err := outbox.Open(ctx, filepath.Join(t.TempDir(), "book.db"), outbox.WithLineCheck(journal.CheckLine))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.EnqueueEvent(ctx, "r", func(int64) ([]byte, error) { return line, nil }); !errors.Is(err, outbox.ErrInvalidLine) {
			t.Errorf("%s: EnqueueEvent: %v, want ErrInvalidLine", c.name, err)
		}
		if pending, err := s.PendingEvents(ctx, "r", 0, 10); err != nil || len(pending) != 0 {
			t.Errorf("%s: %d lines stored, %v", c.name, len(pending), err)
		}
		s.Close()

		// File.Append refuses the batch and writes nothing.
		path := filepath.Join(t.TempDir(), "journal.jsonl")
		j, err := journal.OpenFile(path)
		if err != nil {
			t.Fatal(err)
		}
		err = j.Append(ctx, "r", []outbox.EventLine{{Seq: 1, Line: line}})
		if !errors.Is(err, journal.ErrMalformed) || !errors.Is(err, outbox.ErrSinkRefused) {
			t.Errorf("%s: Append: %v, want ErrMalformed and ErrSinkRefused", c.name, err)
		}
		j.Close()
		if b, _ := os.ReadFile(path); len(b) != 0 {
			t.Errorf("%s: the journal holds %q", c.name, b)
		}

		// The verifier: as the first line, and after good lines that differ from it only in the
		// folded member's name; from a file and from a stream.
		for _, in := range []string{
			c.line + "\n",
			strings.Replace(good, `"r"`, `"p"`, 1) + "\n" + strings.Replace(good, `"r"`, `"q"`, 1) + "\n" + c.line + "\n",
		} {
			want := strings.Count(in, "\n")
			for _, r := range []io.Reader{strings.NewReader(in), struct{ io.Reader }{strings.NewReader(in)}} {
				_, err := journal.Verify(r)
				var ve *journal.Error
				if !errors.Is(err, journal.ErrMalformed) || !errors.As(err, &ve) || ve.Line != want {
					t.Errorf("%s: Verify(%q): %v, want ErrMalformed at line %d", c.name, in, err, want)
				}
			}
		}
		// A journal file that already holds such a line is refused when it is opened.
		if err := os.WriteFile(path, []byte(good+"\n"+strings.Replace(c.line, `"seq":1`, `"seq":2`, 1)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if j, err := journal.OpenFile(path); err == nil {
			j.Close()
			t.Errorf("%s: OpenFile took a journal holding the line", c.name)
		}
	}
	for _, l := range notFolded {
		if run, seq, err := journal.LineKey([]byte(l)); err != nil || run != "r" || seq != 1 {
			t.Errorf("LineKey(%s) = (%q, %d, %v), want (r, 1)", l, run, seq, err)
		}
		if rep, err := journal.Verify(strings.NewReader(l + "\n")); err != nil || rep.Lines != 1 {
			t.Errorf("Verify(%s) = (%+v, %v)", l, rep, err)
		}
	}
}
