// SPDX-License-Identifier: Apache-2.0

package outbox_test

import "github.com/textmachine/outbox/db"

// The ledger's queries (queries/outbox_ledger.sql), asserted with the others.
func init() {
	for name, p := range map[string]struct {
		sql    string
		want   []string
		reason string
	}{
		"LedgerLinesToEmpty": {db.LedgerLinesToEmpty,
			[]string{"SCAN o USING INDEX events_outbox_ledger_lines",
				"SEARCH p USING PRIMARY KEY (engine_run_id=?)"}, ""},
		"LedgerLineGet": {db.LedgerLineGet,
			[]string{"SEARCH events_outbox USING PRIMARY KEY (engine_run_id=? AND seq=?)",
				"SEARCH events_lines USING INTEGER PRIMARY KEY (rowid=?)"}, ""},
		"LedgerTakeProjected": {db.LedgerTakeProjected,
			[]string{"SEARCH events_outbox USING PRIMARY KEY (engine_run_id=? AND seq=?)"}, ""},
		"LedgerTakeLine": {db.LedgerTakeLine,
			[]string{"SEARCH events_outbox USING PRIMARY KEY (engine_run_id=? AND seq=?)"}, ""},
		"LedgerPut": {db.LedgerPut, nil, ""},
		"LedgerRunRows": {db.LedgerRunRows,
			[]string{"SEARCH events_outbox USING PRIMARY KEY (engine_run_id=? AND seq>?)",
				"SEARCH events_lines USING INTEGER PRIMARY KEY (rowid=?)"}, ""},
		"LedgerRowGet": {db.LedgerRowGet,
			[]string{"SEARCH events_outbox USING PRIMARY KEY (engine_run_id=? AND seq=?)",
				"SEARCH events_lines USING INTEGER PRIMARY KEY (rowid=?)"}, ""},
	} {
		queryPlans[name] = p
	}
}
