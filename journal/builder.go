// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"encoding/json"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/textmachine/outbox/outbox"
)

// TimeFormat is the layout of a line's "at": RFC 3339 in UTC with all nine fractional digits, so
// lines sort by time as text and every line has the same width of timestamp.
const TimeFormat = "2006-01-02T15:04:05.000000000Z"

// Builder returns an EventBuilder that renders
//
//	{"engine_run_id":…,"seq":…,"type":…,"at":…,"data":…}
//
// for the seq the outbox assigns. The time is taken when the line is rendered, inside the enqueue's
// transaction, and stored with it: a re-delivery re-sends the same bytes. data is encoded with
// encoding/json; an encoding error fails the enqueue and stores nothing, as does an event type that
// is empty or not valid UTF-8 (ErrEventType).
//
// Options add to the line: WithOnceKey writes the enqueue's once key as a "once_key" member after
// "at" (OnceKeyMember), and WithTraceContext writes a W3C trace context as a "trace" member before
// "data". Without options the line is exactly the one above. Builder renders without the store's
// help, so it does not see the once key of the EnqueueOnce it is passed to: Event does, and writes it
// by itself.
func Builder(runID, eventType string, data any, opts ...BuilderOption) outbox.EventBuilder {
	c, bad := builderOptions(eventType, opts)
	return func(seq int64) ([]byte, error) {
		if bad != nil {
			return nil, fmt.Errorf("journal: render %.64q line %d: %w", eventType, seq, bad)
		}
		return c.render(runID, seq, eventType, c.onceKey, data)
	}
}

// builderOptions applies opts and checks what a line cannot carry, reported at render so that the
// enqueue fails and stores nothing.
func builderOptions(eventType string, opts []BuilderOption) (builderConfig, error) {
	var c builderConfig
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	bad := checkEventType(eventType)
	if bad == nil && !c.trace.IsZero() {
		bad = c.trace.Validate()
	}
	if bad == nil && c.onceKey != "" {
		bad = checkOnceKeyMember(c.onceKey)
	}
	return c, bad
}

func (c *builderConfig) render(runID string, seq int64, eventType, onceKey string, data any) ([]byte, error) {
	var trace *TraceContext
	if !c.trace.IsZero() {
		trace = &c.trace
	}
	b, err := json.Marshal(line{RunID: runID, Seq: seq, Type: eventType, At: now().UTC().Format(TimeFormat),
		OnceKey: onceKey, Trace: trace, Data: data})
	if err != nil {
		return nil, fmt.Errorf("journal: render %s line %d: %w", eventType, seq, err)
	}
	return b, nil
}

// OnceKeyMember is the name of the member in which Event (and Builder given WithOnceKey) writes the
// once key of the enqueue, at the line's top level after "at": a reader may ignore it; outbox
// reconcile reads it to put the key back into a book's ledger.
const OnceKeyMember = "once_key"

// WithOnceKey makes Builder write key as the line's "once_key" member (OnceKeyMember): give it the
// key of the EnqueueOnce the builder is passed to, no other. Event writes the call's key by itself;
// given to Event, the option must name the call's key or the build fails. An empty key writes
// nothing.
func WithOnceKey(key string) BuilderOption {
	return func(c *builderConfig) { c.onceKey = key }
}

func checkOnceKeyMember(key string) error {
	if !utf8.ValidString(key) {
		return fmt.Errorf("%w: not valid UTF-8", ErrOnceKey)
	}
	return nil
}

func checkEventType(t string) error {
	switch {
	case t == "":
		return fmt.Errorf("%w: empty", ErrEventType)
	case !utf8.ValidString(t):
		return fmt.Errorf("%w: not valid UTF-8", ErrEventType)
	}
	return nil
}

// Handshake is the Builder of a run's first line (seq 1): type "run_started", with Builder's options. Given any other seq it
// fails, so the enqueue stores nothing: a run id reused by mistake (EventsUsed says whether one is
// fresh) is caught at the handshake instead of continuing the earlier run's numbers.
func Handshake(runID string, data any, opts ...BuilderOption) outbox.EventBuilder {
	build := Builder(runID, "run_started", data, opts...)
	return func(seq int64) ([]byte, error) {
		if seq != 1 {
			return nil, fmt.Errorf("journal: the handshake of run %q is given seq %d, not 1: the run id was used before", runID, seq)
		}
		return build(seq)
	}
}

type line struct {
	RunID   string        `json:"engine_run_id"`
	Seq     int64         `json:"seq"`
	Type    string        `json:"type"`
	At      string        `json:"at"`
	OnceKey string        `json:"once_key,omitempty"`
	Trace   *TraceContext `json:"trace,omitempty"`
	Data    any           `json:"data"`
}

func render(runID string, seq int64, eventType string, at time.Time, data any) ([]byte, error) {
	return renderTraced(runID, seq, eventType, at, nil, data)
}

// renderTraced is render with a trace context; nil writes no "trace" member.
func renderTraced(runID string, seq int64, eventType string, at time.Time, trace *TraceContext, data any) ([]byte, error) {
	b, err := json.Marshal(line{RunID: runID, Seq: seq, Type: eventType, At: at.UTC().Format(TimeFormat), Trace: trace, Data: data})
	if err != nil {
		return nil, fmt.Errorf("journal: render %s line %d: %w", eventType, seq, err)
	}
	return b, nil
}
