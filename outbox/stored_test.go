// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"testing"

	"github.com/textmachine/outbox/outbox"
)

func TestStoredDigestsReadARunsRowsAPageAtATimeAsTheirLinesDigests(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	lines := map[int64][]byte{}
	for i := range 7 {
		seq, err := s.EnqueueEvent(ctx, "r", func(seq int64) ([]byte, error) {
			return fmt.Appendf(nil, `{"engine_run_id":"r","seq":%d,"n":%d}`, seq, i), nil
		})
		if err != nil {
			t.Fatal(err)
		}
		lines[seq] = fmt.Appendf(nil, `{"engine_run_id":"r","seq":%d,"n":%d}`, seq, i)
	}
	var got []outbox.StoredDigest
	for after := int64(0); ; {
		page, err := s.StoredDigests(ctx, "r", after, 3)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) > 3 {
			t.Fatalf("a page of %d rows, the limit is 3", len(page))
		}
		got = append(got, page...)
		if len(page) < 3 {
			break
		}
		after = page[len(page)-1].Seq
	}
	if len(got) != 7 {
		t.Fatalf("%d rows, want 7", len(got))
	}
	for _, d := range got {
		line := lines[d.Seq]
		if same, compared := d.Compare(line, sha256.Sum256(line)); !same || !compared {
			t.Errorf("seq %d: same %v, compared %v", d.Seq, same, compared)
		}
		other := append([]byte(nil), line...)
		other[len(other)-2] ^= 1
		if same, _ := d.Compare(other, sha256.Sum256(other)); same {
			t.Errorf("seq %d: another line compares the same", d.Seq)
		}
	}
	if d, ok, err := s.StoredDigestAt(ctx, "r", 4); err != nil || !ok || d.Sum != sha256.Sum256(lines[4]) {
		t.Errorf("StoredDigestAt(r, 4): %+v, %v, %v", d, ok, err)
	}
	if _, ok, err := s.StoredDigestAt(ctx, "r", 8); err != nil || ok {
		t.Errorf("StoredDigestAt(r, 8): %v, %v; want no row", ok, err)
	}
	if st, ok, err := s.RunOf(ctx, "r"); err != nil || !ok || st.LastSeq != 7 || st.Lines != 7 {
		t.Errorf("RunOf(r): %+v, %v, %v", st, ok, err)
	}
	if _, ok, err := s.RunOf(ctx, "never"); err != nil || ok {
		t.Errorf("RunOf(never): %v, %v; want no run", ok, err)
	}
	if _, err := s.StoredDigests(ctx, "r", 0, 0); err == nil {
		t.Error("StoredDigests with limit 0: no error")
	}
}
