// SPDX-License-Identifier: Apache-2.0

package jetstream

import (
	"strconv"

	"github.com/textmachine/outbox/jetstream/internal/token"
)

// MsgID returns the Nats-Msg-Id of a run's line: Token(runID), a colon, and the seq.
func MsgID(runID string, seq int64) string { return Token(runID) + ":" + strconv.FormatInt(seq, 10) }

// Token encodes a run id as a single subject token, reversibly: letters, digits, '-' and '_' stay, any
// other byte becomes '~' and two lowercase hex digits.
func Token(runID string) string { return token.Encode(runID) }

func tokenByte(c byte) bool { return token.Byte(c) }

// runOfToken decodes a token; ok is false when tok is not one Token makes.
func runOfToken(tok string) (string, bool) { return token.Decode(tok) }
