// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"reflect"
	"sync"
)

// UnknownPolicy is what a Router does with a line whose type has no handler.
type UnknownPolicy int

const (
	// UnknownStop, the default, fails the call (ErrUnknownType), as any handler error does: nothing
	// of it is committed, every run waits, and the next call stops at the same line until a consumer
	// that knows the type is deployed, which then applies it as if nothing had happened. A new type
	// from an engine deployed before its consumer is then a stop an operator sees, not lines lost.
	// (With WithRetry, the handler error is tried again and then quarantines the run, as any other.)
	UnknownStop UnknownPolicy = iota
	// UnknownQuarantine parks the line's run (reason "handler"; ErrQuarantine): the other runs go
	// on, and the run's lines wait, unapplied, for an operator's Release once the consumer knows
	// the type.
	UnknownQuarantine
	// UnknownIgnore applies the line without a handler: it counts as Applied, moves its run's
	// high-water mark and is recognised as a duplicate from then on, but nothing of it is written
	// and it is never offered again, not even to a later consumer that knows its type. For types
	// this consumer has no use for, by design.
	UnknownIgnore
)

func (p UnknownPolicy) String() string {
	switch p {
	case UnknownStop:
		return "stop"
	case UnknownQuarantine:
		return "quarantine"
	case UnknownIgnore:
		return "ignore"
	}
	return fmt.Sprintf("UnknownPolicy(%d)", int(p))
}

// RouterOption configures NewRouter.
type RouterOption func(*Router)

// WithUnknownType sets what the Router does with a line whose type has no handler (the default is
// UnknownStop). An unknown policy panics.
func WithUnknownType(p UnknownPolicy) RouterOption {
	if p < UnknownStop || p > UnknownIgnore {
		panic(fmt.Sprintf("inbox: WithUnknownType(%v)", p))
	}
	return func(r *Router) { r.unknown = p }
}

// Router is a Handler that dispatches each line to the handler registered for its event type, the
// line's "type" member (see journal.Builder for a line's members), so that a consumer need not
// hand-write the envelope's decoding and a switch on the type:
//
//	r := inbox.NewRouter()
//	r.Handle("order_placed", inbox.Decode(func(ctx context.Context, tx *sql.Tx, ev inbox.Event, v OrderPlaced) error {
//		_, err := tx.ExecContext(ctx, `INSERT INTO orders (id, cents) VALUES (?, ?)`, v.ID, v.Cents)
//		return err
//	}))
//	rep, err := in.Apply(ctx, lines, r.Route)
//
// A line that is not a JSON object with a string "type" (read as encoding/json reads it) quarantines
// its run, for the reason Decode gives. A line whose type has no handler follows the router's
// UnknownPolicy. Register every handler before the router is used; it is safe for concurrent use.
type Router struct {
	mu      sync.RWMutex
	routes  map[string]Handler
	unknown UnknownPolicy
}

// NewRouter returns a Router with no handlers.
func NewRouter(opts ...RouterOption) *Router {
	r := &Router{routes: map[string]Handler{}}
	for _, o := range opts {
		if o != nil {
			o(r)
		}
	}
	return r
}

// Handle registers h for the lines of eventType. Like net/http.ServeMux's, it panics on a type that
// already has a handler, an empty type or a nil handler: each is a mistake in the program's setup,
// found when it starts rather than when the first such line comes.
func (r *Router) Handle(eventType string, h Handler) {
	switch {
	case eventType == "":
		panic("inbox: Router.Handle with an empty event type")
	case h == nil:
		panic(fmt.Sprintf("inbox: Router.Handle(%q) with a nil handler", eventType))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.routes[eventType]; ok {
		panic(fmt.Sprintf("inbox: Router.Handle: event type %q has a handler already", eventType))
	}
	r.routes[eventType] = h
}

// Route is the Router as a Handler: pass r.Route to Apply, ApplyFrom, ApplyFile, FollowFile or any
// other source. It reads the line's type and calls the handler registered for it.
func (r *Router) Route(ctx context.Context, tx *sql.Tx, ev Event) error {
	var env struct {
		Type *string `json:"type"`
	}
	if err := json.Unmarshal(ev.Line, &env); err != nil {
		return fmt.Errorf("%w: the line's type cannot be read: %w", ErrQuarantine, err)
	}
	if env.Type == nil {
		return fmt.Errorf("%w: the line has no \"type\"", ErrQuarantine)
	}
	r.mu.RLock()
	h, ok := r.routes[*env.Type]
	unknown := r.unknown
	r.mu.RUnlock()
	if ok {
		return h(ctx, tx, ev)
	}
	switch unknown {
	case UnknownIgnore:
		return nil
	case UnknownQuarantine:
		return fmt.Errorf("%w %q: %w", ErrUnknownType, *env.Type, ErrQuarantine)
	}
	return fmt.Errorf("%w %q", ErrUnknownType, *env.Type)
}

// Decode returns a Handler that decodes the line's "data" member into a T with encoding/json and
// calls f with it (a line without data, or with null, gives T's zero value; members T does not have
// are ignored, so that an engine may add some before its consumers know them).
//
// Data that does not decode as a T quarantines the line's run (ErrQuarantine, the JSON error in the
// quarantine's detail) instead of stopping the call: the line's bytes are fixed for good (the journal
// holds them, and the inbox would take other bytes under its seq as a conflict), so no later attempt
// can decode it, and a stop would stop every run at every restart for the sake of one. Quarantined,
// the run waits with nothing skipped, the other runs go on, and an operator decides once the
// consumer's type is fixed (Release applies the line again).
func Decode[T any](f func(ctx context.Context, tx *sql.Tx, ev Event, v T) error) Handler {
	if f == nil {
		panic("inbox: Decode of a nil function")
	}
	return func(ctx context.Context, tx *sql.Tx, ev Event) error {
		var env struct {
			Data T `json:"data"`
		}
		if err := json.Unmarshal(ev.Line, &env); err != nil {
			return fmt.Errorf("%w: the line's data does not decode as %v: %w", ErrQuarantine, reflect.TypeFor[T](), err)
		}
		return f(ctx, tx, ev, env.Data)
	}
}
