// SPDX-License-Identifier: Apache-2.0

package inbox_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/journal"
)

// TestALineWithAMemberNamedLikeAKeyIsMalformedAndNothingIsApplied: encoding/json matches member
// names to a struct's fields case-insensitively (and "ſ" to "s"), so a program that decodes such a
// line reads another key than the inbox would apply it under. Apply and ApplyFile stop at it.
func TestALineWithAMemberNamedLikeAKeyIsMalformedAndNothingIsApplied(t *testing.T) {
	t.Parallel()
	for name, bad := range map[string]string{
		"ENGINE_RUN_ID and SEQ":     `{"engine_run_id":"r","seq":2,"ENGINE_RUN_ID":"upstream-7","SEQ":1001}`,
		"Seq":                       `{"engine_run_id":"r","seq":2,"Seq":1001}`,
		"an escaped S":              `{"engine_run_id":"r","seq":2,"\u0053EQ":1001}`,
		"a long s":                  `{"engine_run_id":"r","seq":2,"ſeq":1001}`,
		"an escaped I in the run's": `{"engine_run_id":"r","seq":2,"engine_run_\u0049d":"upstream-7"}`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			in, path := setup(t)
			_, err := in.Apply(ctx, [][]byte{line("r", 1), []byte(bad)}, insertHandler)
			var le *inbox.LineError
			if !errors.Is(err, journal.ErrMalformed) || !errors.As(err, &le) || le.Index != 1 {
				t.Fatalf("Apply: %v, want journal.ErrMalformed at index 1", err)
			}
			d := rawDB(t, path)
			if n := count(t, d, `SELECT count(*) FROM applied`); n != 0 {
				t.Errorf("Apply: %d lines applied", n)
			}

			jpath := filepath.Join(t.TempDir(), "journal.jsonl")
			// The line between two good ones: the file's last line is checked when it is opened.
			file := append(append(append(line("r", 1), '\n'), bad+"\n"...), line("r", 3)...)
			if err := os.WriteFile(jpath, append(file, '\n'), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := in.ApplyFile(ctx, jpath, insertHandler); !errors.Is(err, journal.ErrMalformed) {
				t.Fatalf("ApplyFile: %v, want journal.ErrMalformed", err)
			}
			if n := count(t, d, `SELECT count(*) FROM applied WHERE seq = 2`); n != 0 {
				t.Errorf("ApplyFile: the line was applied")
			}
		})
	}
}
