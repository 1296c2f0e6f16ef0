// SPDX-License-Identifier: Apache-2.0

package jetstream

import (
	"github.com/nats-io/nats.go"

	"github.com/textmachine/outbox/journal"
)

// The headers that carry a line's W3C trace context (its "trace" member, journal.TraceMember), named
// as the W3C Trace Context specification names them for HTTP, which is what NATS tooling and
// OpenTelemetry's propagators read.
const (
	TraceparentHeader = "traceparent"
	TracestateHeader  = "tracestate"
)

// setTraceHeaders sets the trace headers of the message that carries line: from the line's trace
// member, checked (journal.LineTraceContext), or none when the line has none or a malformed one.
// The line is published as it is either way: a trace context is the producer's, and its being
// malformed costs the trace only.
func setTraceHeaders(h nats.Header, line []byte) {
	tc, err := journal.LineTraceContext(line)
	if err != nil || tc.IsZero() {
		return
	}
	h.Set(TraceparentHeader, tc.Traceparent)
	if tc.Tracestate != "" {
		h.Set(TracestateHeader, tc.Tracestate)
	}
}

// traceHeaderLen is what the trace headers of line's message take of it, framing included.
func traceHeaderLen(line []byte) int {
	tc, err := journal.LineTraceContext(line)
	if err != nil || tc.IsZero() {
		return 0
	}
	n := len(TraceparentHeader) + 2 + len(tc.Traceparent) + 2
	if tc.Tracestate != "" {
		n += len(TracestateHeader) + 2 + len(tc.Tracestate) + 2
	}
	return n
}
