// SPDX-License-Identifier: Apache-2.0

package outbox

import "github.com/textmachine/outbox/internal/litedb"

// An error of the store's wraps a context's error only when the caller's context ended, or the
// operation timeout that stands in for the caller's missing deadline (WithOpTimeout) passed; see
// litedb.WithEnd.

var (
	// errGroupOverran ends the statements of a group commit that run past the operation timeout.
	errGroupOverran = &litedb.BoundErr{Msg: "outbox: a statement of the group commit ran past the operation timeout (WithOpTimeout)"}
	// errRecordOverran ends the record of a relay's batch that runs past the operation timeout
	// (DefaultOpTimeout when the store has none).
	errRecordOverran = &litedb.BoundErr{Msg: "outbox: the record of the batch ran past the operation timeout (WithOpTimeout)"}
)

// The store's contexts and the mapping of their ends are the floor's.
var (
	bounded = litedb.Bounded
	endOf   = litedb.EndOf
	withEnd = litedb.WithEnd
)
