// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/textmachine/outbox/db"
	"github.com/textmachine/outbox/internal/testing/outboxtest"
)

// queryPlans is what each shipping query must plan as. The SQL comes from the constants sqlc exports,
// so the plan asserted is the plan of the SQL that runs, not of a copy. A query that scans
// events_outbox is allowed only with a reason here.
var queryPlans = map[string]struct {
	sql    string
	want   []string // each must appear in the plan
	reason string   // why a SCAN of events_outbox is acceptable; empty means no scan is allowed
}{
	"EventInsert":     {db.EventInsert, nil, ""},
	"EventLineInsert": {db.EventLineInsert, nil, ""},
	"EventDelete": {db.EventDelete,
		[]string{"SEARCH events_outbox USING PRIMARY KEY (engine_run_id=? AND seq=?)"}, ""},
	"EventLineDelete": {db.EventLineDelete,
		[]string{"SEARCH events_lines USING INTEGER PRIMARY KEY (rowid=?)"}, ""},
	"EventLastSeq": {db.EventLastSeq,
		[]string{"SEARCH events_outbox USING PRIMARY KEY (engine_run_id=?)",
			"SEARCH outbox_progress USING PRIMARY KEY (engine_run_id=?)",
			"SEARCH outbox_runs USING PRIMARY KEY (engine_run_id=?)"}, ""},
	"EventKeyHolder": {db.EventKeyHolder,
		[]string{
			"SEARCH events_outbox USING COVERING INDEX events_outbox_once_key (once_key=?)",
			"SEARCH events_outbox USING COVERING INDEX events_outbox_announce_key (announce_key=?)",
		}, ""},
	"EventsForgetRange": {db.EventsForgetRange,
		[]string{"SEARCH events_outbox USING PRIMARY KEY (engine_run_id=? AND seq>? AND seq<?)"}, ""},
	"RunsPage": {db.RunsPage,
		[]string{"SEARCH r USING PRIMARY KEY (engine_run_id>?)",
			"SEARCH o USING PRIMARY KEY (engine_run_id=? AND seq>?)",
			"SEARCH st USING PRIMARY KEY (engine_run_id=?)",
			tailCount, tailLast}, ""},
	"RunsOpenPage": {db.RunsOpenPage,
		[]string{"SEARCH r USING INDEX outbox_runs_open (engine_run_id>?)",
			"SEARCH o USING PRIMARY KEY (engine_run_id=?)",
			"SEARCH o USING PRIMARY KEY (engine_run_id=? AND seq>?)",
			"SEARCH st USING PRIMARY KEY (engine_run_id=?)",
			tailCount, tailLast}, ""},
	"RunsTotals": {db.RunsTotals,
		[]string{"SEARCH r USING PRIMARY KEY (engine_run_id>?)", tailCount, tailLast}, ""},
	"BookMarkGet": {db.BookMarkGet,
		[]string{"SEARCH outbox_book_mark USING INTEGER PRIMARY KEY (rowid=?)"}, ""},
	"BookMarkPut": {db.BookMarkPut, nil, ""},
	"RunGet": {db.RunGet,
		[]string{"SEARCH r USING PRIMARY KEY (engine_run_id=?)", tailCount, tailLast}, ""},
	"RunSetForgotten": {db.RunSetForgotten,
		[]string{"SEARCH outbox_runs USING PRIMARY KEY (engine_run_id=?)"}, ""},
	"RunAddLines": {db.RunAddLines,
		[]string{"SEARCH e USING PRIMARY KEY (engine_run_id=? AND seq>?)",
			"SEARCH f USING PRIMARY KEY (engine_run_id=?)"}, ""},
	"RunFold": {db.RunFold,
		[]string{"SEARCH e USING PRIMARY KEY (engine_run_id=? AND seq>?)",
			"SEARCH f USING PRIMARY KEY (engine_run_id=?)"}, ""},
	"RunsCloseFinished": {db.RunsCloseFinished,
		[]string{"SCAN outbox_runs USING INDEX outbox_runs_open", tailCount}, ""},
	"RunsLedgerSize": {db.RunsLedgerSize, []string{"SCAN outbox_runs"}, ""},
	"EventsLedgerSize": {db.EventsLedgerSize,
		[]string{"SCAN events_outbox USING COVERING INDEX events_outbox_once_key"},
		"counts the ledger by design; it walks the partial index, which holds only ledger rows"},
	"ProgressKeepLastSeq": {db.ProgressKeepLastSeq, nil, ""},
	"EventOnceKey": {db.EventOnceKey,
		[]string{"SEARCH events_outbox USING PRIMARY KEY (engine_run_id=? AND seq=?)"}, ""},
	"EventMarkAnnounced": {db.EventMarkAnnounced,
		[]string{"SEARCH events_outbox USING PRIMARY KEY (engine_run_id=? AND seq=?)",
			"SEARCH other USING COVERING INDEX events_outbox_announce_key (announce_key=?)"}, ""},
	"EventsAnnouncedKeys": {db.EventsAnnouncedKeys,
		[]string{"SCAN events_outbox USING COVERING INDEX events_outbox_once_key"},
		"reads the whole ledger by design; it walks the partial index, which holds only ledger rows"},
	"EventsOnceKeyExists": {db.EventsOnceKeyExists,
		[]string{
			"SEARCH events_outbox USING COVERING INDEX events_outbox_once_key (once_key=?)",
			"SEARCH events_outbox USING COVERING INDEX events_outbox_announce_key (announce_key=?)",
		}, ""},
	"EventsPending": {db.EventsPending,
		[]string{"SEARCH events_outbox USING PRIMARY KEY (engine_run_id=? AND seq>?)",
			"SEARCH events_lines USING INTEGER PRIMARY KEY (rowid=?)"}, ""},
	"EventsRunUsed": {db.EventsRunUsed,
		[]string{"SEARCH events_outbox USING PRIMARY KEY (engine_run_id=?)",
			"SEARCH outbox_progress USING PRIMARY KEY (engine_run_id=?)"}, ""},
	"EventsLastSeq": {db.EventsLastSeq,
		[]string{"SEARCH events_outbox USING PRIMARY KEY (engine_run_id=?)"}, ""},
	"EventsOldestAfter": {db.EventsOldestAfter,
		[]string{"SEARCH events_outbox USING PRIMARY KEY (engine_run_id=? AND seq>?)"}, ""},
	"EventsRuns": {db.EventsRuns,
		[]string{"SEARCH events_outbox USING PRIMARY KEY (engine_run_id>?)",
			"SEARCH p USING PRIMARY KEY (engine_run_id=?)",
			"SEARCH o USING PRIMARY KEY (engine_run_id=? AND seq>?)",
			"SEARCH st USING PRIMARY KEY (engine_run_id=?)"}, ""},
	"ProgressGet": {db.ProgressGet,
		[]string{"SEARCH outbox_progress USING PRIMARY KEY (engine_run_id=?)"}, ""},
	"ProgressPage": {db.ProgressPage,
		[]string{"SEARCH outbox_progress USING PRIMARY KEY (engine_run_id>?)"}, ""},
	"ProgressSet": {db.ProgressSet, nil, ""},
	"StopSet":     {db.StopSet, nil, ""},
	"EventGet": {db.EventGet,
		[]string{"SEARCH events_outbox USING PRIMARY KEY (engine_run_id=? AND seq=?)",
			"SEARCH events_lines USING INTEGER PRIMARY KEY (rowid=?)"}, ""},
	"EventRetire": {db.EventRetire,
		[]string{"SEARCH events_outbox USING PRIMARY KEY (engine_run_id=? AND seq=?)"}, ""},
	"StopClear": {db.StopClear,
		[]string{"SEARCH outbox_stops USING PRIMARY KEY (engine_run_id=?)"}, ""},
}

// A run's tail (migrations/00010), as the figures' readers add it: its rows after counted_to, a range
// of the primary key, and its highest stored seq, one probe of it.
const (
	tailCount = "SEARCH t USING PRIMARY KEY (engine_run_id=? AND seq>?)"
	tailLast  = "SEARCH t USING PRIMARY KEY (engine_run_id=?)"
)

var paramRE = regexp.MustCompile(`\?(\d+)`)

func TestEveryShippingQueryUsesTheIntendedIndex(t *testing.T) {
	t.Parallel()
	_, path := outboxtest.Setup(t)
	d := outboxtest.RawDB(t, path)
	for name, q := range queryPlans {
		nparams := 0
		for _, m := range paramRE.FindAllStringSubmatch(q.sql, -1) {
			n, _ := strconv.Atoi(m[1])
			nparams = max(nparams, n)
		}
		args := make([]any, nparams)
		for i := range args {
			args[i] = "x"
		}
		rows, err := d.Query("EXPLAIN QUERY PLAN "+q.sql, args...)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		var plan []string
		for rows.Next() {
			var id, parent, notused int
			var detail string
			if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		joined := strings.Join(plan, "\n")
		for _, w := range q.want {
			if !strings.Contains(joined, w) {
				t.Errorf("%s plans as\n\t%s\nwant %q", name, strings.Join(plan, "\n\t"), w)
			}
		}
		for _, step := range plan {
			if strings.HasPrefix(step, "SCAN events_outbox") && q.reason == "" {
				t.Errorf("%s scans events_outbox (%q) and no reason is listed", name, step)
			}
		}
	}
}

// Every query constant in db/ must have an entry above, so a new query cannot ship unchecked.
func TestEveryGeneratedQueryHasAPlanAssertion(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("../db/*.sql.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no generated files: %v", err)
	}
	fset := token.NewFileSet()
	found := 0
	for _, f := range files {
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range file.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				for _, n := range spec.(*ast.ValueSpec).Names {
					if !n.IsExported() {
						continue
					}
					found++
					if _, ok := queryPlans[n.Name]; !ok {
						t.Errorf("query %s has no plan assertion in queryPlans", n.Name)
					}
				}
			}
		}
	}
	if found != len(queryPlans) {
		t.Errorf("db/ exports %d queries, queryPlans lists %d", found, len(queryPlans))
	}
}
