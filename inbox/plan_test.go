// SPDX-License-Identifier: Apache-2.0

package inbox_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/textmachine/outbox/inbox/internal/db"
)

// queryPlans is what each shipping query must plan as. The SQL comes from the constants sqlc exports,
// so the plan asserted is the plan of the SQL that runs, not of a copy. No query may scan a table of
// the inbox's (their sizes grow with the runs); a scan is allowed only with a reason here.
var queryPlans = map[string]struct {
	sql    string
	want   []string // each must appear in the plan
	reason string   // why a SCAN is acceptable; empty means no scan of an inbox table is allowed
}{
	"RunState": {db.RunState, []string{
		"SEARCH r USING PRIMARY KEY (engine_run_id=?)",
		"SEARCH q USING PRIMARY KEY (engine_run_id=?)"}, ""},
	"RunPosition": {db.RunPosition, []string{"SEARCH inbox_runs USING PRIMARY KEY (engine_run_id=?)"}, ""},
	"RunSet":      {db.RunSet, nil, ""},
	"RunsUntrimmed": {db.RunsUntrimmed, []string{"SCAN inbox_runs USING INDEX inbox_runs_untrimmed"},
		"walks the partial index of untrimmed runs from its oldest, for at most LIMIT entries"},
	"RunsAfter":        {db.RunsAfter, []string{"SEARCH inbox_runs USING PRIMARY KEY (engine_run_id>?)"}, ""},
	"RunMarkTrimmed":   {db.RunMarkTrimmed, []string{"SEARCH inbox_runs USING PRIMARY KEY (engine_run_id=?)"}, ""},
	"DigestGet":        {db.DigestGet, []string{"SEARCH inbox_digests USING PRIMARY KEY (engine_run_id=? AND chunk=?)"}, ""},
	"DigestsAppend":    {db.DigestsAppend, nil, ""},
	"DigestsDropBelow": {db.DigestsDropBelow, []string{"SEARCH inbox_digests USING PRIMARY KEY (engine_run_id=? AND chunk<?)"}, ""},
	"DigestsTrim": {db.DigestsTrim, []string{
		"SEARCH inbox_digests USING PRIMARY KEY (engine_run_id=? AND chunk=?)",
		"SEARCH d USING PRIMARY KEY (engine_run_id=?)"}, ""},
	"DigestsKeepLast":   {db.DigestsKeepLast, []string{"SEARCH inbox_digests USING PRIMARY KEY (engine_run_id=? AND chunk=?)"}, ""},
	"QuarantineInsert":  {db.QuarantineInsert, nil, ""},
	"QuarantineGet":     {db.QuarantineGet, []string{"SEARCH inbox_quarantine USING PRIMARY KEY (engine_run_id=?)"}, ""},
	"QuarantineDelete":  {db.QuarantineDelete, []string{"SEARCH inbox_quarantine USING PRIMARY KEY (engine_run_id=?)"}, ""},
	"QuarantinesAfter":  {db.QuarantinesAfter, []string{"SEARCH inbox_quarantine USING PRIMARY KEY (engine_run_id>?)"}, ""},
	"GapAcceptedInsert": {db.GapAcceptedInsert, nil, ""},
	"GapsAcceptedAfter": {db.GapsAcceptedAfter, []string{"SEARCH inbox_gaps_accepted USING INTEGER PRIMARY KEY (rowid>?)"}, ""},
	"SourceGet":         {db.SourceGet, []string{"SEARCH inbox_sources USING PRIMARY KEY (name=?)"}, ""},
	"SourceSet":         {db.SourceSet, nil, ""},
	"CountersAdd":       {db.CountersAdd, nil, ""},
	"CountersGet":       {db.CountersGet, []string{"SEARCH inbox_counters USING INTEGER PRIMARY KEY (rowid=?)"}, ""},
	"SourcesRewind": {db.SourcesRewind, []string{"SCAN inbox_sources"},
		"visits every source by design (a release rewinds them all); there is one row per source an inbox reads"},
	"SourcesAfter":         {db.SourcesAfter, []string{"SEARCH inbox_sources USING PRIMARY KEY (name>?)"}, ""},
	"SourceGetUnmarked":    {db.SourceGetUnmarked, []string{"SEARCH inbox_sources USING PRIMARY KEY (name=?)"}, ""},
	"SourcesAfterUnmarked": {db.SourcesAfterUnmarked, []string{"SEARCH inbox_sources USING PRIMARY KEY (name>?)"}, ""},
}

var paramRE = regexp.MustCompile(`\?(\d+)`)

func TestEveryShippingQueryUsesTheIntendedIndex(t *testing.T) {
	t.Parallel()
	_, path := setup(t)
	d := rawDB(t, path)
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
			if strings.HasPrefix(step, "SCAN ") && !strings.HasPrefix(step, "SCAN CONSTANT ROW") && q.reason == "" {
				t.Errorf("%s scans (%q) and no reason is listed", name, step)
			}
		}
	}
}

// Every query constant in inbox/internal/db must have an entry above, so a new query cannot ship unchecked.
func TestEveryGeneratedQueryHasAPlanAssertion(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("internal/db/*.sql.go")
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
		t.Errorf("inbox/internal/db exports %d queries, queryPlans lists %d", found, len(queryPlans))
	}
}
