// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"github.com/textmachine/outbox/inbox/internal/db"
)

// The statements a call of Apply runs per line or per run, prepared once on the writer connection
// (litedb.Statements).
// They still run through sqlc's generated calls (see txn.on), which bind the arguments from each
// query's ...Params struct, so the argument order is the generated code's, never spelled by hand.
type stmtID int

const (
	stmtRunState stmtID = iota
	stmtRunSet
	stmtDigestGet
	stmtDigestsAppend
	stmtDigestsDrop
	stmtRunsUntrimmed
	stmtSourceGet
	stmtSourceSet
	stmtCountersAdd
	numStmts
)

var stmtSQL = [numStmts]string{
	stmtRunState:      db.RunState,
	stmtRunSet:        db.RunSet,
	stmtDigestGet:     db.DigestGet,
	stmtDigestsAppend: db.DigestsAppend,
	stmtDigestsDrop:   db.DigestsDropBelow,
	stmtRunsUntrimmed: db.RunsUntrimmed,
	stmtSourceGet:     db.SourceGet,
	stmtSourceSet:     db.SourceSet,
	stmtCountersAdd:   db.CountersAdd,
}
