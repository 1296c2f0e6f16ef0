// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// In sealedJournal: segment 0 holds x 1–2, the next r 1–3, the next r 4–6, the last r 7.
func TestLocateRunFindsTheFirstSegmentThatCanHoldARunsLineFromTheSealIndexes(t *testing.T) {
	t.Parallel()
	dir := sealedJournal(t)
	segs := segmentsOf(t, dir)
	ctx := context.Background()
	for _, c := range []struct {
		run  string
		seq  int64
		want int64
	}{
		{"x", 1, segs[0].base},
		{"x", 2, segs[0].base},
		{"x", 3, segs[3].base}, // beyond what the sealed segments hold: the last segment can
		{"r", 1, segs[1].base},
		{"r", 3, segs[1].base},
		{"r", 4, segs[2].base},
		{"r", 6, segs[2].base},
		{"r", 7, segs[3].base},
		{"none", 1, segs[3].base},
	} {
		got, err := LocateRun(ctx, dir, c.run, c.seq)
		if err != nil || got != c.want {
			t.Errorf("LocateRun(%q, %d) = %d, %v; want %d", c.run, c.seq, got, err, c.want)
		}
	}
}

func TestLocateRunReadsNoSealedSegmentAndWritesNothing(t *testing.T) {
	t.Parallel()
	dir := sealedJournal(t)
	before := dirState(t, dir)
	// A sealed segment's lines, except its last, overwritten with other bytes of the same length:
	// LocateRun answers from the index and the last line alone, so it cannot have read them.
	path := filepath.Join(dir, segmentName(segmentsOf(t, dir)[1].base))
	st, _ := os.Stat(path)
	b, _ := os.ReadFile(path)
	for i := 0; i < 20; i++ {
		b[i] = ' '
	}
	os.WriteFile(path, b, 0o644)
	os.Chtimes(path, st.ModTime(), st.ModTime())
	if got, err := LocateRun(context.Background(), dir, "r", 2); err != nil || got != segmentsOf(t, dir)[1].base {
		t.Fatalf("LocateRun = %d, %v", got, err)
	}
	if after := dirState(t, dir); !slices.Equal(before, after) {
		t.Fatalf("LocateRun changed the directory: %v, then %v", before, after)
	}
}

func dirState(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

func TestLocateRunDoesNotTrustAnIndexThatDoesNotMatchItsSegment(t *testing.T) {
	t.Parallel()
	for name, damage := range map[string]func(dir string, segs []segment){
		"missing": func(dir string, segs []segment) { os.Remove(filepath.Join(dir, indexName(segs[1].base))) },
		"another segment's": func(dir string, segs []segment) {
			b, _ := os.ReadFile(filepath.Join(dir, indexName(segs[2].base)))
			os.WriteFile(filepath.Join(dir, indexName(segs[1].base)), b, 0o644)
		},
		"torn": func(dir string, segs []segment) {
			p := filepath.Join(dir, indexName(segs[1].base))
			b, _ := os.ReadFile(p)
			os.WriteFile(p, b[:len(b)/2], 0o644)
		},
		"stale": func(dir string, segs []segment) {
			p := filepath.Join(dir, indexName(segs[1].base))
			b, _ := os.ReadFile(p)
			si, err := parseSegIndex(b)
			if err != nil {
				t.Fatal(err)
			}
			si.runs = nil // says segment 1 holds nothing of "r"
			si.lastSum[0] ^= 1
			os.WriteFile(p, si.encode(), 0o644)
		},
	} {
		dir := sealedJournal(t)
		segs := segmentsOf(t, dir)
		damage(dir, segs)
		// Run "r" 5 is in segment 2, but segment 1's index is not trusted: it can hold anything.
		if got, err := LocateRun(context.Background(), dir, "r", 5); err != nil || got != segs[1].base {
			t.Errorf("%s index: LocateRun = %d, %v; want the untrusted segment %d", name, got, err, segs[1].base)
		}
		// Run "x" is found in segment 0, before the untrusted one.
		if got, err := LocateRun(context.Background(), dir, "x", 2); err != nil || got != segs[0].base {
			t.Errorf("%s index: LocateRun(x, 2) = %d, %v", name, got, err)
		}
	}
}

func TestLocateRunGivesTheFirstRetainedSegmentOfARunWhoseEarlierLinesWereTrimmed(t *testing.T) {
	t.Parallel()
	dir := sealedJournal(t)
	segs := segmentsOf(t, dir)
	os.Remove(filepath.Join(dir, segmentName(segs[1].base)))
	os.Remove(filepath.Join(dir, indexName(segs[1].base)))
	os.Remove(filepath.Join(dir, segmentName(segs[0].base)))
	os.Remove(filepath.Join(dir, indexName(segs[0].base)))
	// r 1–3 are gone; the first segment holding r is where a reader meets the gap, not past it.
	if got, err := LocateRun(context.Background(), dir, "r", 2); err != nil || got != segs[2].base {
		t.Fatalf("LocateRun = %d, %v; want %d", got, err, segs[2].base)
	}
}

func TestLocateRunRefusesAPathThatIsNotAJournalDirectory(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "f")
	os.WriteFile(file, []byte("{}\n"), 0o644)
	if _, err := LocateRun(context.Background(), file, "r", 1); !errors.Is(err, ErrNotJournal) {
		t.Fatalf("a file: %v", err)
	}
	if _, err := LocateRun(context.Background(), t.TempDir(), "r", 1); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("an empty directory: %v", err)
	}
}
