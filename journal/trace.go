// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// TraceMember is the name of the line member that carries a W3C trace context:
//
//	"trace":{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","tracestate":"congo=t61rcWkgMzE"}
//
// It is the producer's member as far as the journal's rules go: the key rules, Verify, CheckLine and
// File ignore it, and a malformed one leaves the line a good journal line. A reader that uses it
// (LineTraceContext) checks it and ignores a malformed one, so a producer's bad trace context costs
// the trace, never the line.
const TraceMember = "trace"

// MaxTracestateLen is the longest tracestate a line carries: the W3C limit a propagator keeps to.
const MaxTracestateLen = 512

// TraceContext is a W3C trace context (https://www.w3.org/TR/trace-context/) as its two headers
// carry it. The zero TraceContext is none.
type TraceContext struct {
	// Traceparent is version-traceid-parentid-flags in lowercase hex, 55 characters:
	// "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01". The ids are not all zeros, and
	// the version is not "ff".
	Traceparent string `json:"traceparent"`
	// Tracestate is the vendors' list, "key=value" members separated by commas, at most
	// MaxTracestateLen bytes and 32 members; empty when there is none.
	Tracestate string `json:"tracestate,omitempty"`
}

// IsZero reports whether tc is no trace context.
func (tc TraceContext) IsZero() bool { return tc == TraceContext{} }

// Validate returns nil for the zero TraceContext and for a well-formed one, and an error wrapping
// ErrTraceContext otherwise: a traceparent that is not of the form above, a tracestate without a
// traceparent, or one that breaks the W3C list rules (keys, values, duplicates, length, leading or
// trailing whitespace, which header transports trim).
func (tc TraceContext) Validate() error {
	if tc.IsZero() {
		return nil
	}
	if tc.Traceparent == "" {
		return fmt.Errorf("%w: a tracestate without a traceparent", ErrTraceContext)
	}
	if err := validTraceparent(tc.Traceparent); err != nil {
		return fmt.Errorf("%w: traceparent %.64q: %s", ErrTraceContext, tc.Traceparent, err)
	}
	if err := validTracestate(tc.Tracestate); err != nil {
		return fmt.Errorf("%w: tracestate %.64q: %s", ErrTraceContext, tc.Tracestate, err)
	}
	return nil
}

type traceError string

func (e traceError) Error() string { return string(e) }

func validTraceparent(s string) error {
	if len(s) != 55 {
		return traceError(fmt.Sprintf("%d characters, not 55", len(s)))
	}
	if s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return traceError("not version-traceid-parentid-flags")
	}
	for _, f := range [...]string{s[0:2], s[3:35], s[36:52], s[53:55]} {
		for i := 0; i < len(f); i++ {
			if !isLowerHexDigit(f[i]) {
				return traceError("not lowercase hex")
			}
		}
	}
	switch {
	case s[0:2] == "ff":
		return traceError(`version "ff"`)
	case s[3:35] == strings.Repeat("0", 32):
		return traceError("an all-zero trace id")
	case s[36:52] == strings.Repeat("0", 16):
		return traceError("an all-zero parent id")
	}
	return nil
}

func isLowerHexDigit(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' }

func validTracestate(s string) error {
	switch {
	case s == "":
		return nil
	case len(s) > MaxTracestateLen:
		return traceError(fmt.Sprintf("%d bytes, more than %d", len(s), MaxTracestateLen))
	case isOWS(s[0]) || isOWS(s[len(s)-1]):
		return traceError("leading or trailing whitespace")
	}
	seen := map[string]bool{}
	for m := range strings.SplitSeq(s, ",") {
		m = strings.TrimFunc(m, func(r rune) bool { return r == ' ' || r == '\t' })
		if m == "" {
			continue // the list rules allow empty members
		}
		key, val, ok := strings.Cut(m, "=")
		if !ok {
			return traceError(fmt.Sprintf("member %.32q is not key=value", m))
		}
		if !validStateKey(key) {
			return traceError(fmt.Sprintf("key %.32q", key))
		}
		if !validStateValue(val) {
			return traceError(fmt.Sprintf("the value of key %.32q", key))
		}
		if seen[key] {
			return traceError(fmt.Sprintf("key %.32q given twice", key))
		}
		seen[key] = true
		if len(seen) > 32 {
			return traceError("more than 32 members")
		}
	}
	return nil
}

func isOWS(c byte) bool { return c == ' ' || c == '\t' }

// validStateKey is the W3C key: a simple key, lcalpha followed by up to 255 of lcalpha, digits and
// "_-*/", or tenant@system, where the tenant starts with lcalpha or a digit (up to 241 characters) and
// the system with lcalpha (up to 14).
func validStateKey(k string) bool {
	part := func(p string, max int, digitFirst bool) bool {
		if p == "" || len(p) > max {
			return false
		}
		c := p[0]
		if !(c >= 'a' && c <= 'z' || digitFirst && c >= '0' && c <= '9') {
			return false
		}
		for i := 1; i < len(p); i++ {
			c := p[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '*' || c == '/') {
				return false
			}
		}
		return true
	}
	if tenant, system, ok := strings.Cut(k, "@"); ok {
		return part(tenant, 241, true) && part(system, 14, false)
	}
	return part(k, 256, false)
}

// validStateValue is the W3C value: up to 256 printable ASCII characters but ',' and '=', the last
// not a space.
func validStateValue(v string) bool {
	if v == "" || len(v) > 256 || v[len(v)-1] == ' ' {
		return false
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < 0x20 || c > 0x7e || c == ',' || c == '=' {
			return false
		}
	}
	return true
}

// BuilderOption adds to the lines a Builder renders.
type BuilderOption func(*builderConfig)

type builderConfig struct {
	trace   TraceContext
	onceKey string
}

// WithTraceContext makes the builder write tc as the line's "trace" member (TraceMember), between
// "at" and "data". The zero TraceContext writes nothing: the line is byte for byte the one without
// the option. A malformed one fails the build (an error wrapping ErrTraceContext), so the enqueue
// stores nothing. Package github.com/textmachine/outbox/otel gives the option for the span of a
// context.
func WithTraceContext(tc TraceContext) BuilderOption {
	return func(c *builderConfig) { c.trace = tc }
}

// LineTraceContext returns the trace context a journal line carries in its top-level "trace"
// member: the zero TraceContext and nil when it has none, and an error wrapping ErrTraceContext when
// the member is there but is not one (not an object, a member given twice or named like one but not
// exactly it, as encoding/json would fold it, a traceparent missing or not a string, values that
// fail Validate, or a line that is not a JSON object). The object's other members are ignored.
func LineTraceContext(line []byte) (TraceContext, error) {
	if !containsTraceFold(line) && !bytes.Contains(line, []byte(`\u`)) {
		return TraceContext{}, nil // the common line: no name that is, or reads as, "trace"
	}
	s := scanner{b: line}
	var val []byte
	found := false
	err := s.members(func(name, v []byte) error {
		switch {
		case string(name) == TraceMember:
			if found {
				return traceError(`"trace" given twice`)
			}
			found, val = true, v
		case foldsTo(name, "TRACE"):
			return traceError(fmt.Sprintf("a member named %.32q, which encoding/json reads as \"trace\"", name))
		}
		return nil
	})
	if err != nil {
		return TraceContext{}, fmt.Errorf("%w: %w", ErrTraceContext, err)
	}
	if !found {
		return TraceContext{}, nil
	}
	tc, err := parseTraceMember(val)
	if err != nil {
		return TraceContext{}, fmt.Errorf("%w: %w", ErrTraceContext, err)
	}
	if err := tc.Validate(); err != nil {
		return TraceContext{}, err
	}
	return tc, nil
}

// containsTraceFold reports whether line holds "trace" in any mix of cases: every name that
// encoding/json reads as "trace" does, unless it is escaped (no character outside ASCII folds to one
// of its letters).
func containsTraceFold(line []byte) bool {
	for i := 0; i+len(TraceMember) <= len(line); i++ {
		j := bytes.IndexAny(line[i:], "tT")
		if j < 0 {
			return false
		}
		i += j
		if i+len(TraceMember) <= len(line) && bytes.EqualFold(line[i:i+len(TraceMember)], []byte(TraceMember)) {
			return true
		}
	}
	return false
}

func parseTraceMember(v []byte) (TraceContext, error) {
	if len(v) == 0 || v[0] != '{' {
		return TraceContext{}, traceError(`"trace" is not an object`)
	}
	var tc TraceContext
	var haveParent, haveState bool
	s := scanner{b: v}
	str := func(name string, v []byte) (string, error) {
		if v[0] != '"' {
			return "", traceError(fmt.Sprintf("%q is not a string", name))
		}
		var out string
		if err := json.Unmarshal(v, &out); err != nil {
			return "", traceError(fmt.Sprintf("%q: %v", name, err))
		}
		return out, nil
	}
	err := s.members(func(name, v []byte) error {
		var err error
		switch {
		case string(name) == "traceparent":
			if haveParent {
				return traceError(`"traceparent" given twice`)
			}
			haveParent = true
			tc.Traceparent, err = str("traceparent", v)
		case string(name) == "tracestate":
			if haveState {
				return traceError(`"tracestate" given twice`)
			}
			haveState = true
			tc.Tracestate, err = str("tracestate", v)
		case foldsTo(name, "TRACEPARENT"), foldsTo(name, "TRACESTATE"):
			return traceError(fmt.Sprintf("a member named %.32q, which encoding/json folds to another", name))
		}
		return err
	})
	if err != nil {
		return TraceContext{}, err
	}
	if !haveParent {
		return TraceContext{}, traceError(`"trace" has no "traceparent"`)
	}
	return tc, nil
}

// members calls fn with the name (unescaped) and the raw value of each member of the JSON object
// s.b holds, in order, and fails when s.b is not one.
func (s *scanner) members(fn func(name, val []byte) error) error {
	s.i = 0
	s.skipSpace()
	if !s.peek('{') {
		return traceError("not a JSON object")
	}
	s.i++
	s.skipSpace()
	if s.peek('}') {
		s.i++
	} else {
		for {
			if !s.peek('"') {
				return traceError("not JSON")
			}
			k0 := s.i
			if !s.skipString() {
				return traceError("not JSON")
			}
			name := s.b[k0+1 : s.i-1]
			if s.esc {
				var k string
				json.Unmarshal(s.b[k0:s.i], &k) // a valid string: cannot fail
				name = []byte(k)
			}
			s.skipSpace()
			if !s.peek(':') {
				return traceError("not JSON")
			}
			s.i++
			s.skipSpace()
			v0 := s.i
			if !s.value() {
				return traceError("not JSON")
			}
			if err := fn(name, s.b[v0:s.i]); err != nil {
				return err
			}
			s.skipSpace()
			if s.peek(',') {
				s.i++
				s.skipSpace()
				continue
			}
			if s.peek('}') {
				s.i++
				break
			}
			return traceError("not JSON")
		}
	}
	if !s.onlySpaceLeft() {
		return traceError("not JSON (text after the object)")
	}
	return nil
}
