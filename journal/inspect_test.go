// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Inspect says what OpenFile would say of a file, without locking it or cutting its torn tail.
func TestInspectRefusesWhatOpenFileRefusesAndChangesNothing(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name, content string
		journal       bool
	}{
		{"empty", "", true},
		{"journal", "{\"engine_run_id\":\"a\",\"seq\":1}\n{\"engine_run_id\":\"a\",\"seq\":2}\n", true},
		{"torn", "{\"engine_run_id\":\"a\",\"seq\":1}\n{\"engine_ru", true},
		{"log", "started\nstopped\n", false},
		{"nul", "{\"engine_run_id\":\"a\",\"seq\":1}\n\x00\x00\x00\x00", false},
		{"database", "SQLite format 3\x00", false},
	}
	for _, c := range cases {
		path := filepath.Join(dir, c.name)
		if err := os.WriteFile(path, []byte(c.content), 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		err = Inspect(f)
		f.Close()
		switch {
		case c.journal && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case !c.journal && (!errors.Is(err, ErrNotJournal) || !strings.Contains(err.Error(), path)):
			t.Errorf("%s: %v; want ErrNotJournal naming the file", c.name, err)
		}
		if b, _ := os.ReadFile(path); string(b) != c.content {
			t.Errorf("%s: Inspect changed the file", c.name)
		}
		if j, err := OpenFile(path); (err == nil) != c.journal {
			t.Errorf("%s: OpenFile says %v, Inspect the opposite", c.name, err)
		} else if err == nil {
			j.Close()
		}
	}
}
