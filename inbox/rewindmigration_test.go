// SPDX-License-Identifier: Apache-2.0

package inbox_test

import (
	"context"
	"testing"

	"github.com/textmachine/outbox/inbox"
)

// The migration that keeps a rewound source's position goes down to what the release before it
// stored for a rewound source (no position), keeping the positions of the others, and up again.
func TestTheRewoundMarkMigrationGoesDownToNoPositionAndUpAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in, path := setup(t)
	if _, err := in.ApplyFrom(ctx, "s1", nil, []byte("p1"), [][]byte{line("q", 2)}, insertHandler); err != nil {
		t.Fatal(err)
	}
	if _, err := in.ApplyFrom(ctx, "s2", nil, []byte("p2"), nil, insertHandler); err != nil {
		t.Fatal(err)
	}
	if err := in.Release(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	if _, err := in.ApplyFrom(ctx, "s2", nil, []byte("p3"), nil, insertHandler); err != nil {
		t.Fatal(err)
	}
	in.Close()
	d := rawDBRW(t, path)
	p := gooseCLI(t, d)
	if _, err := p.DownTo(ctx, 2); err != nil {
		t.Fatalf("down: %v", err)
	}
	rows := func() map[string]string {
		out := map[string]string{}
		r, err := d.Query(`SELECT name, coalesce(position, 'NULL') FROM inbox_sources`)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		for r.Next() {
			var n, pos string
			if err := r.Scan(&n, &pos); err != nil {
				t.Fatal(err)
			}
			out[n] = pos
		}
		return out
	}
	if got := rows(); got["s1"] != "NULL" || got["s2"] != "p3" || len(got) != 2 {
		t.Fatalf("after down: %v", got)
	}
	if n := count(t, d, `SELECT count(*) FROM pragma_table_info('inbox_sources') WHERE name = 'rewound'`); n != 0 {
		t.Fatal("the column is still there after down")
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("up: %v", err)
	}
	d.Close()
	in, err := inbox.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	for name, want := range map[string]string{"s1": "", "s2": "p3"} {
		pos, from, err := in.SourceState(ctx, name)
		if err != nil || string(pos) != want || from != nil {
			t.Errorf("%s after down and up: %q, %q, %v", name, pos, from, err)
		}
	}
}

// The tools that read beside a consumer (OpenReadOnly) read the sources of a database an earlier
// release keeps, which has no rewound mark.
func TestOpenReadOnlyReadsTheSourcesOfADatabaseWithoutTheRewoundMark(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in, path := setup(t)
	if _, err := in.ApplyFrom(ctx, "s1", nil, []byte("p1"), nil, insertHandler); err != nil {
		t.Fatal(err)
	}
	in.Close()
	d := rawDBRW(t, path)
	if _, err := gooseCLI(t, d).DownTo(ctx, 2); err != nil {
		t.Fatalf("down: %v", err)
	}
	d.Close()
	ro, err := inbox.OpenReadOnly(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if pos, err := ro.SourcePosition(ctx, "s1"); err != nil || string(pos) != "p1" {
		t.Fatalf("SourcePosition = %q, %v", pos, err)
	}
	if srcs, err := ro.Sources(ctx); err != nil || len(srcs) != 1 || string(srcs[0].Position) != "p1" || srcs[0].RewoundFrom != nil {
		t.Fatalf("Sources = %+v, %v", srcs, err)
	}
}
