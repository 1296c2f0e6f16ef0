package journal

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"unicode/utf8"
)

// Errors of the journal package. Verify's errors are *Error values that wrap one of the last three.
var (
	// ErrLocked: another File, in this process or another, has the journal open.
	ErrLocked = errors.New("journal: file is locked by another writer")
	// ErrStreamGap: a run's line is not the one after its last (a run must start at seq 1). The reader
	// cannot continue past a gap.
	ErrStreamGap = errors.New("journal: stream gap")
	// ErrPayloadConflict: a (run, seq) seen before arrives with other bytes. The reader quarantines
	// the run.
	ErrPayloadConflict = errors.New("journal: payload conflict")
	// ErrMalformed: a complete line that is not a UTF-8 JSON object with a non-empty string
	// "engine_run_id" and an integer "seq" of at least 1.
	ErrMalformed = errors.New("journal: malformed line")
)

// Report is what Verify found.
type Report struct {
	Lines      int  // distinct lines accepted
	Duplicates int  // byte-identical re-deliveries of an accepted (run, seq), skipped
	TornTail   bool // the input ended in a line without its newline (not an error)
	Runs       map[string]RunReport
}

// RunReport is one run's part of a Report.
type RunReport struct {
	Last       int64 // the highest seq accepted; the run's lines are 1..Last
	Lines      int
	Duplicates int
}

// Error locates a problem Verify found. It wraps ErrStreamGap, ErrPayloadConflict or ErrMalformed.
type Error struct {
	Line     int    // 1-based line number in the input
	Run      string // the line's run, when it could be read
	Seq      int64  // the line's seq, when it could be read
	Expected int64  // for a gap: the seq that should have come
	Reason   string // for a malformed line: what is wrong with it
	Err      error
}

func (e *Error) Error() string {
	switch e.Err {
	case ErrStreamGap:
		return fmt.Sprintf("journal: line %d: stream gap in run %q: expected seq %d, found %d", e.Line, e.Run, e.Expected, e.Seq)
	case ErrPayloadConflict:
		return fmt.Sprintf("journal: line %d: payload conflict in run %q at seq %d: same seq, other bytes", e.Line, e.Run, e.Seq)
	}
	return fmt.Sprintf("journal: line %d: malformed line: %s", e.Line, e.Reason)
}

func (e *Error) Unwrap() error { return e.Err }

// Verifier checks a journal line by line. Verify reads a whole stream with one; a reader of another
// transport (a broker's stream) feeds its lines to Check. The zero value is not usable: use
// NewVerifier.
type Verifier struct {
	line  int
	lines int
	dups  int
	torn  bool
	runs  map[string]*runState
}

// runState keeps a digest of every accepted line of a run, indexed by seq-1: a re-delivery is
// compared by SHA-256, so no collision short of breaking SHA-256 lets a conflict pass as a duplicate,
// at 32 bytes per line instead of the line itself.
type runState struct {
	digests [][sha256.Size]byte
	lines   int
	dups    int
}

// NewVerifier returns a Verifier with nothing seen.
func NewVerifier() *Verifier { return &Verifier{runs: map[string]*runState{}} }

// Check checks the next complete line (without its newline). It returns an *Error for a gap, a
// conflict or a malformed line; the line is then not counted, and the Verifier's state is what it
// was before it.
func (v *Verifier) Check(line []byte) error {
	v.line++
	runID, seq, reason := parseLine(line)
	if reason != "" {
		return &Error{Line: v.line, Run: runID, Seq: seq, Reason: reason, Err: ErrMalformed}
	}
	st := v.runs[runID]
	var last int64
	if st != nil {
		last = int64(len(st.digests))
	}
	switch {
	case seq == last+1:
		if st == nil {
			st = &runState{}
			v.runs[runID] = st
		}
		st.digests = append(st.digests, sha256.Sum256(line))
		st.lines++
		v.lines++
	case seq <= last:
		if sha256.Sum256(line) != st.digests[seq-1] {
			return &Error{Line: v.line, Run: runID, Seq: seq, Err: ErrPayloadConflict}
		}
		st.dups++
		v.dups++
	default:
		return &Error{Line: v.line, Run: runID, Seq: seq, Expected: last + 1, Err: ErrStreamGap}
	}
	return nil
}

// Report returns what the Verifier has accepted so far.
func (v *Verifier) Report() Report {
	r := Report{Lines: v.lines, Duplicates: v.dups, TornTail: v.torn, Runs: make(map[string]RunReport, len(v.runs))}
	for id, st := range v.runs {
		r.Runs[id] = RunReport{Last: int64(len(st.digests)), Lines: st.lines, Duplicates: st.dups}
	}
	return r
}

// Verify reads a journal and checks it: each run starts at seq 1 and goes up by one; a (run, seq)
// seen before is a duplicate when its bytes are identical and a conflict when not; runs interleave
// freely. A last line without its newline is a torn tail, reported but not an error. On an error, the
// Report covers the lines before it.
func Verify(r io.Reader) (Report, error) {
	v := NewVerifier()
	br := bufio.NewReaderSize(r, 1<<20)
	var long []byte // a line longer than the buffer, gathered across reads
	for {
		chunk, err := br.ReadSlice('\n')
		switch {
		case err == nil:
			line := chunk[:len(chunk)-1]
			if long != nil {
				line = append(long, line...)
				long = nil
			}
			if cerr := v.Check(line); cerr != nil {
				return v.Report(), cerr
			}
		case errors.Is(err, bufio.ErrBufferFull):
			long = append(long, chunk...)
		case errors.Is(err, io.EOF):
			v.torn = len(chunk) > 0 || len(long) > 0
			return v.Report(), nil
		default:
			return v.Report(), fmt.Errorf("journal: read: %w", err)
		}
	}
}

// parseLine finds the top-level "engine_run_id" and "seq" members of a line. Member names match
// exactly, byte for byte after unescaping (encoding/json's struct decoding would also accept
// "Seq" or "SEQ"); a member given twice is ambiguous and refused; seq must be a JSON integer, with no
// fraction or exponent. It returns a reason when the line is malformed.
func parseLine(b []byte) (runID string, seq int64, reason string) {
	if !utf8.Valid(b) {
		return "", 0, "not UTF-8"
	}
	if !json.Valid(b) {
		return "", 0, "not JSON"
	}
	i := skipWS(b, 0)
	if b[i] != '{' {
		return "", 0, "not a JSON object"
	}
	i = skipWS(b, i+1)
	var haveRun, haveSeq bool
	for b[i] != '}' {
		kend := stringEnd(b, i)
		key := b[i+1 : kend-1]
		if bytes.IndexByte(key, '\\') >= 0 {
			var s string
			json.Unmarshal(b[i:kend], &s) // valid JSON, cannot fail
			key = []byte(s)
		}
		i = skipWS(b, kend) + 1 // past the colon
		i = skipWS(b, i)
		vend := valueEnd(b, i)
		switch string(key) {
		case "engine_run_id":
			if haveRun {
				return "", 0, `"engine_run_id" given twice`
			}
			haveRun = true
			if b[i] != '"' {
				return "", 0, `"engine_run_id" is not a string`
			}
			raw := b[i+1 : vend-1]
			if bytes.IndexByte(raw, '\\') < 0 {
				runID = string(raw)
			} else {
				json.Unmarshal(b[i:vend], &runID)
			}
			if runID == "" {
				return "", 0, `"engine_run_id" is empty`
			}
		case "seq":
			if haveSeq {
				return runID, 0, `"seq" given twice`
			}
			haveSeq = true
			num := b[i:vend]
			if bytes.ContainsAny(num, ".eE") || (num[0] != '-' && (num[0] < '0' || num[0] > '9')) {
				return runID, 0, `"seq" is not an integer`
			}
			n, err := strconv.ParseInt(string(num), 10, 64)
			if err != nil {
				return runID, 0, `"seq" is out of range`
			}
			if n < 1 {
				return runID, n, `"seq" is below 1`
			}
			seq = n
		}
		i = skipWS(b, vend)
		if b[i] == ',' {
			i = skipWS(b, i+1)
		}
	}
	switch {
	case !haveRun:
		return "", seq, `no "engine_run_id"`
	case !haveSeq:
		return runID, 0, `no "seq"`
	}
	return runID, seq, ""
}

// The scanners below run only on input json.Valid accepted, so they need not check the grammar.

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// stringEnd returns the index just past the string that starts at b[i] == '"'.
func stringEnd(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return len(b)
}

// valueEnd returns the index just past the value that starts at b[i].
func valueEnd(b []byte, i int) int {
	switch b[i] {
	case '"':
		return stringEnd(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				j = stringEnd(b, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return len(b)
	}
	j := i
	for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\t' && b[j] != '\n' && b[j] != '\r' {
		j++
	}
	return j
}
