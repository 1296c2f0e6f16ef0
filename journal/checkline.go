// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"fmt"

	"github.com/textmachine/outbox/outbox"
)

// CheckLine is the journal's check of a line an outbox builder rendered, for outbox.WithLineCheck:
// the line must be a journal line (a JSON object beginning with '{', with a string "engine_run_id"
// and an integer "seq", by Verify's rules) keyed by exactly runID and seq, and at most
// outbox.DefaultMaxLineSize bytes, the limit File.Append applies. A line it passes is one File.Append
// takes for that run and seq, so a builder that writes the wrong key fails its enqueue instead of
// stopping the run's projection later.
func CheckLine(runID string, seq int64, line []byte) error {
	switch {
	case len(line) > outbox.DefaultMaxLineSize:
		return fmt.Errorf("journal: the line is %d bytes, more than the limit of %d", len(line), outbox.DefaultMaxLineSize)
	case len(line) == 0 || line[0] != '{':
		return fmt.Errorf("%w: the line does not begin with '{'", ErrMalformed)
	}
	run, got, why := parseLine(line)
	switch {
	case why != "":
		return fmt.Errorf("%w: %s", ErrMalformed, why)
	case string(run) != runID || got != seq:
		return fmt.Errorf("journal: the line says engine_run_id %q, seq %d, for line %d of run %q", run, got, seq, runID)
	}
	return nil
}
