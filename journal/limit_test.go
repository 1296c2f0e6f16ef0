// SPDX-License-Identifier: Apache-2.0

package journal_test

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// longLine is an input of lines before, then a line whose string member is n bytes long, then after,
// made as it is read: it is never in memory whole.
type longLine struct {
	before, after string
	n             int64
	pos           int64 // within the whole input
	read          int64
}

func (r *longLine) Read(p []byte) (int, error) {
	head := r.before + `{"engine_run_id":"a","seq":2,"x":"`
	tail := `"}` + "\n" + r.after
	total := int64(len(head)) + r.n + int64(len(tail))
	if r.pos >= total {
		return 0, io.EOF
	}
	k := 0
	for k < len(p) && r.pos < total {
		switch {
		case r.pos < int64(len(head)):
			c := copy(p[k:], head[r.pos:])
			k, r.pos = k+c, r.pos+int64(c)
		case r.pos < int64(len(head))+r.n:
			c := int(min(int64(len(p)-k), int64(len(head))+r.n-r.pos))
			fill(p[k : k+c])
			k, r.pos = k+c, r.pos+int64(c)
		default:
			c := copy(p[k:], tail[r.pos-int64(len(head))-r.n:])
			k, r.pos = k+c, r.pos+int64(c)
		}
	}
	r.read += int64(k)
	return k, nil
}

func fill(b []byte) {
	for i := range b {
		b[i] = 'x'
	}
}

func checkTooLong(t *testing.T, what string, err error, line int, limit int) {
	t.Helper()
	var ve *journal.Error
	if !errors.Is(err, journal.ErrMalformed) || !errors.As(err, &ve) {
		t.Errorf("%s: %v, want ErrMalformed", what, err)
		return
	}
	if ve.Reason != "line too long" || ve.Line != line || ve.Limit != limit || ve.Length <= int64(limit) {
		t.Errorf("%s: %+v, want line too long at line %d", what, ve, line)
	}
	for _, want := range []string{"line too long", fmt.Sprint(limit), fmt.Sprintf("line %d", line)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %q does not say %q", what, err, want)
		}
	}
}

func TestVerifyRefusesALineLongerThanTheLimit(t *testing.T) {
	t.Parallel()
	const limit = 100
	first := ln("a", 1, "")
	exactly := strings.TrimSuffix(ln("a", 2, `,"x":"`+strings.Repeat("x", limit-len(ln("a", 2, `,"x":""`))+1)+`"`), "\n")
	if len(exactly) != limit {
		t.Fatalf("the line is %d bytes", len(exactly))
	}
	over := strings.Replace(exactly, `"x":"`, `"x":"y`, 1)
	for _, mode := range []struct {
		name string
		in   func(string) io.Reader
	}{
		{"file", func(s string) io.Reader { return strings.NewReader(s) }},
		{"stream", func(s string) io.Reader { return struct{ io.Reader }{strings.NewReader(s)} }},
	} {
		if rep, err := journal.Verify(mode.in(first+exactly+"\n"), journal.WithMaxLineSize(limit)); err != nil || rep.Lines != 2 {
			t.Errorf("%s: a line of the limit: (%+v, %v)", mode.name, rep, err)
		}
		rep, err := journal.Verify(mode.in(first+over+"\n"+ln("a", 2, "")), journal.WithMaxLineSize(limit))
		checkTooLong(t, mode.name+": a complete line", err, 2, limit)
		if rep.Lines != 1 {
			t.Errorf("%s: the report covers %d lines, want 1", mode.name, rep.Lines)
		}
		// Without its newline: a torn tail shorter than the limit is torn, a longer one too long.
		if rep, err := journal.Verify(mode.in(first+exactly[:limit-1]), journal.WithMaxLineSize(limit)); err != nil || !rep.TornTail {
			t.Errorf("%s: a torn tail: (%+v, %v)", mode.name, rep, err)
		}
		_, err = journal.Verify(mode.in(first+over[:limit]+over), journal.WithMaxLineSize(limit))
		checkTooLong(t, mode.name+": a tail without its newline", err, 2, limit)
	}
	v := journal.NewVerifier(journal.WithMaxLineSize(limit))
	if err := v.Check([]byte(strings.TrimSuffix(first, "\n"))); err != nil {
		t.Fatal(err)
	}
	checkTooLong(t, "Check", v.Check([]byte(over)), 2, limit)
	// The default is the store's.
	_, err := journal.Verify(strings.NewReader(`{"engine_run_id":"a","seq":1,"x":"` + strings.Repeat("x", outbox.DefaultMaxLineSize) + `"}` + "\n"))
	checkTooLong(t, "the default limit", err, 1, outbox.DefaultMaxLineSize)
}

func TestWithMaxLineSizeRefusesALimitVerifyCannotKeep(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, -1, journal.MaxLineSizeLimit + 1} {
		if _, err := journal.Verify(strings.NewReader(ln("a", 1, "")), journal.WithMaxLineSize(n)); err == nil {
			t.Errorf("WithMaxLineSize(%d) accepted", n)
		}
		if err := journal.NewVerifier(journal.WithMaxLineSize(n)).Check([]byte(ln("a", 1, ""))); err == nil {
			t.Errorf("Check with WithMaxLineSize(%d) accepted", n)
		}
	}
}

// TestVerifyFindsALongLineWhileReading: a line of 64 MiB, with a limit of 1 MiB, is refused after
// reading about the limit and a buffer, not the line.
func TestVerifyFindsALongLineWhileReading(t *testing.T) {
	t.Parallel()
	r := &longLine{before: ln("a", 1, ""), after: ln("a", 3, ""), n: 64 << 20}
	_, err := journal.Verify(r, journal.WithMaxLineSize(1<<20))
	checkTooLong(t, "a 64 MiB line", err, 2, 1<<20)
	if r.read > 4<<20 {
		t.Errorf("%d bytes read of a line refused at 1 MiB", r.read)
	}
}

// TestVerifyRefusesALineOver2GiBWithoutPanicking feeds a line of 2.2 GiB through a reader that makes
// it as it is read: with the default limit, and with the largest limit Verify takes, which holds a
// gigabyte of it. Set OUTBOX_VERIFY_HUGE=1 to run it (make reliability does).
func TestVerifyRefusesALineOver2GiBWithoutPanicking(t *testing.T) {
	if testing.Short() || os.Getenv("OUTBOX_VERIFY_HUGE") == "" {
		t.Skip("set OUTBOX_VERIFY_HUGE=1 to read a 2.2 GiB line")
	}
	for _, limit := range []int{outbox.DefaultMaxLineSize, journal.MaxLineSizeLimit} {
		r := &longLine{before: ln("a", 1, ""), after: ln("a", 3, ""), n: 2200 << 20}
		_, err := journal.Verify(r, journal.WithMaxLineSize(limit))
		checkTooLong(t, fmt.Sprintf("limit %d", limit), err, 2, limit)
		if r.read > int64(limit)+4<<20 {
			t.Errorf("limit %d: %d bytes read", limit, r.read)
		}
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		t.Logf("limit %d: %d bytes read, heap peak so far %d MiB", limit, r.read, m.HeapSys>>20)
	}
	// Not refused: every line within the limit, around a string of the limit's length.
	r := &longLine{before: ln("a", 1, ""), after: ln("a", 3, ""), n: 64 << 20}
	if rep, err := journal.Verify(r, journal.WithMaxLineSize(128<<20)); err != nil || rep.Lines != 3 {
		t.Errorf("a 64 MiB line within the limit: (%+v, %v)", rep, err)
	}
}
