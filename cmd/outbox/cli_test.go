// SPDX-License-Identifier: Apache-2.0

package main

import (
	"errors"
	"fmt"
	"testing"
)

func TestErrorMessagesSayEachThingOnce(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("outbox: open b.db: %w", errors.New("outbox: open b.db: sqlite3: file is not a database")), "open b.db: file is not a database"},
		{fmt.Errorf("journal: line 2: %w", errors.New("journal: malformed line")), "line 2: malformed line"},
		{errors.New("run \"a\x1b\" failed"), `run "a\x1b" failed`},
	} {
		if got := message(tc.err); got != tc.want {
			t.Errorf("message(%q) = %q, want %q", tc.err, got, tc.want)
		}
	}
}
