// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/internal/inboxseam"
	"github.com/textmachine/outbox/outbox"
)

func init() {
	commands["inbox"] = command{
		summary: "a consumer's inbox: stats, quarantined runs, release, accept-gap, accept-retention-gap, migrate",
		run:     runInbox,
	}
}

// inboxCommands are the subcommands of `outbox inbox`.
var inboxCommands = map[string]func(ctx context.Context, args []string, stdout, stderr io.Writer) int{
	"stats":       runInboxStats,
	"quarantined": runInboxQuarantined,
	"release":     runInboxRelease,
	"accept-gap":  runInboxAcceptGap,
}

const inboxAbout = `
Inspects and operates the inbox in a consumer's database (the database an Inbox of package inbox
applies the journal into, never the book):

  stats        per run, the high-water mark (the last seq applied) and any quarantine; per
               source, its position and, for a file or a journal directory, how many bytes
               behind its end it is; for a stream, given the server, how far behind the stream's last sequence
  quarantined  the quarantined runs: why, the seq expected and the one that came, since when
  release      lift a run's quarantine: it goes on from its high-water mark + 1, and every
               source reads again from its start (what was applied is skipped as duplicates)
  accept-gap   give up the seqs of a gap that cannot be filled, recording why, who and when
  accept-retention-gap
               give up what a segmented journal's retention removed before the consumer read
               it (ErrRetentionGap), recording why, who and when; it goes on from the first
               retained segment
  migrate      apply, roll back or report the inbox's schema migrations (up|down|status|version)

stats and quarantined only read: beside a running consumer they read what it has committed, and
on a database no consumer holds open they write nothing and create no file beside it; so do
migrate status and version. release, accept-gap, accept-retention-gap, and migrate up and down
take the inbox's lock: they refuse to run beside a running consumer. Run 'outbox inbox SUBCOMMAND
--help' for a subcommand's flags.`

func runInbox(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	const synopsis = "outbox inbox stats|quarantined|release|accept-gap|accept-retention-gap|migrate --db FILE [flags]"
	if len(args) > 0 {
		switch args[0] {
		case "-h", "-help", "--help", "help":
			fmt.Fprintf(helpOutput(stderr), "usage: %s\n\n%s\n", synopsis, strings.TrimSpace(inboxAbout))
			return exitOK
		}
		if sub, ok := inboxCommands[args[0]]; ok {
			return sub(ctx, args[1:], stdout, stderr)
		}
		return usageError(stderr, "outbox inbox", "unknown subcommand %s (stats, quarantined, release, accept-gap, accept-retention-gap or migrate)", quote(args[0]))
	}
	return usageError(stderr, "outbox inbox", "need a subcommand: stats, quarantined, release, accept-gap, accept-retention-gap or migrate")
}

// openInboxReadOnly opens the consumer's database at path read-only, after refusing a missing file
// or a directory with a message that says which.
func openInboxReadOnly(ctx context.Context, path string) (*inbox.Inbox, error) {
	if err := checkFile(path, "database"); err != nil {
		return nil, err
	}
	return inbox.OpenReadOnly(ctx, path)
}

// inboxStatsReport is the --json output of `outbox inbox stats`. Field names are part of the
// command's interface.
type inboxStatsReport struct {
	DB string `json:"db"`
	// DBEscaped is the path quoted as Go's %q does, given only when it is not valid UTF-8.
	DBEscaped   string           `json:"db_escaped,omitempty"`
	Runs        []inboxRunRow    `json:"runs"`
	Quarantined int              `json:"quarantined"`
	Sources     []inboxSourceRow `json:"sources"`
}

type inboxRunRow struct {
	RunID string `json:"run"`
	// RunEscaped is the run id quoted and escaped as Go's %q does, given only when the id is not
	// valid UTF-8 (JSON cannot carry such bytes; "run" then holds U+FFFD in their place).
	RunEscaped  string           `json:"run_escaped,omitempty"`
	Position    int64            `json:"position"`     // the high-water mark: the last seq applied
	LastApplied *time.Time       `json:"last_applied"` // null for a run quarantined before it applied a line
	Quarantine  *inboxQuarantine `json:"quarantine"`   // null when the run is not quarantined
}

type inboxQuarantine struct {
	RunID         string    `json:"run,omitempty"` // only in the quarantined listing
	RunEscaped    string    `json:"run_escaped,omitempty"`
	Reason        string    `json:"reason"`   // "gap", "conflict" or "handler"
	Expected      int64     `json:"expected"` // 0: none, the run has applied the last seq there is
	Got           int64     `json:"got"`
	Detail        string    `json:"detail"`
	DetailEscaped string    `json:"detail_escaped,omitempty"`
	Since         time.Time `json:"since"`
}

type inboxSourceRow struct {
	Name        string `json:"source"`
	NameEscaped string `json:"source_escaped,omitempty"`
	// File is a file source's position decoded; null for a source of another kind, and for a
	// source rewound to read again from its start.
	File *inboxFilePosition `json:"file"`
	// Stream is a stream source's position decoded, and the stream's state when a server was given;
	// null for a source of another kind.
	Stream *inboxStreamPosition `json:"stream"`
	// Journal is a segmented journal source's position decoded (inbox.ApplyJournal); null for a
	// source of another kind, and for one rewound.
	Journal     *inboxJournalPosition `json:"journal"`
	PositionHex string                `json:"position_hex,omitempty"` // another kind's position, as stored
	Rewound     bool                  `json:"rewound"`                // no position: it reads again from its start
	Updated     time.Time             `json:"updated"`
	// BehindBytes is how many bytes of the followed file are still to be read; null when it cannot
	// be told (BehindError says why) or the source is not a file. For a stream source, BehindError
	// says why its lag (stream.behind_seqs) is unknown.
	BehindBytes *int64 `json:"behind_bytes"`
	BehindError string `json:"behind_error,omitempty"`
}

type inboxFilePosition struct {
	Path        string `json:"path"`
	PathEscaped string `json:"path_escaped,omitempty"`
	Offset      int64  `json:"offset"`
	Device      uint64 `json:"device"`
	Inode       uint64 `json:"inode"`
}

const inboxStatsAbout = `
Per run: the high-water mark (the last seq applied, or given up by accept-gap), when the run last
applied a line, and its quarantine if it has one. Per source: its position (for a file source the
file it reads, the byte it has read to, its device and inode) and, for a file, how many bytes are
still to be read to the end of the file the path names now (counting the rest of a rotated file
first). For a JetStream stream source (jetstream.ApplyStream, FollowStream): the stream, the
subject filter and the last stream sequence applied; given the server (--nats or --context), also
the stream's last sequence and how many sequences behind it the source is, and a retention gap
(the stream no longer holds what follows the position) said plainly. Without a server the lag is
unknown: stats connects to nothing unless asked. Opens the database read-only: beside a running
consumer it reads what the consumer has committed; on a database no consumer holds open it leaves
the directory exactly as it found it.`

func runInboxStats(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("inbox stats", "outbox inbox stats --db FILE [--json] [--nats URL | --context NAME]", inboxStatsAbout)
	dbPath := fs.String("db", "", "the consumer's database `file`")
	asJSON := fs.Bool("json", false, "print JSON")
	nf := addNATSConnFlags(fs, "read the state of the streams its stream sources read from the server at `url`, to tell how far behind they are")
	pos, code, done := parseFlags(fs, args, stderr)
	if done {
		return code
	}
	if len(pos) != 0 || *dbPath == "" {
		return usageError(stderr, "outbox inbox stats", "need --db FILE and no arguments")
	}
	if p := nf.problem(); p != "" {
		return usageError(stderr, "outbox inbox stats", "%s", p)
	}
	in, err := openInboxReadOnly(ctx, *dbPath)
	if err != nil {
		return failErr(stderr, exitUsage, "inbox stats", err)
	}
	defer in.Close()
	rep, err := collectInboxStats(ctx, in, *dbPath)
	if err != nil {
		return failErr(stderr, exitUsage, "inbox stats", err)
	}
	if nf.chosen() && slices.ContainsFunc(rep.Sources, func(s inboxSourceRow) bool { return s.Stream != nil }) {
		// Read after the database, so that the stream's last sequence is no older than the
		// position it is compared with.
		js, closeConn, err := nf.connect()
		if err != nil {
			return failErr(stderr, exitUsage, "inbox stats", err)
		}
		defer closeConn()
		newStreamLag(js).fill(ctx, rep.Sources)
	}
	if *asJSON {
		err = printJSON(stdout, rep)
	} else {
		err = printInboxStats(stdout, rep)
	}
	if err != nil {
		return failErr(stderr, exitUsage, "inbox stats", err)
	}
	return exitOK
}

// collectInboxStats reads the report; a read that met a consumer opening the database is read again,
// through the consumer's WAL.
func collectInboxStats(ctx context.Context, in *inbox.Inbox, path string) (inboxStatsReport, error) {
	rep, err := readInboxStats(ctx, in, path)
	if errors.Is(err, outbox.ErrBookOpened) {
		rep, err = readInboxStats(ctx, in, path)
	}
	return rep, err
}

func readInboxStats(ctx context.Context, in *inbox.Inbox, path string) (inboxStatsReport, error) {
	rep := inboxStatsReport{DB: path, DBEscaped: escapedIfInvalid(path), Runs: []inboxRunRow{}, Sources: []inboxSourceRow{}}
	qs, err := in.Quarantined(ctx)
	if err != nil {
		return rep, err
	}
	rep.Quarantined = len(qs)
	// Both listings are in run id order: merge them, so that a run quarantined before it applied
	// anything is listed too.
	next := 0
	flush := func(upTo string, all bool) {
		for ; next < len(qs) && (all || qs[next].RunID < upTo); next++ {
			rep.Runs = append(rep.Runs, inboxRunRow{RunID: qs[next].RunID, RunEscaped: escapedIfInvalid(qs[next].RunID),
				Quarantine: quarantineRow(qs[next], false)})
		}
	}
	for r, err := range in.AllRuns(ctx) {
		if err != nil {
			return rep, err
		}
		flush(r.RunID, false)
		row := inboxRunRow{RunID: r.RunID, RunEscaped: escapedIfInvalid(r.RunID), Position: r.Position}
		applied := r.LastApply.UTC()
		row.LastApplied = &applied
		if next < len(qs) && qs[next].RunID == r.RunID {
			row.Quarantine = quarantineRow(qs[next], false)
			next++
		}
		rep.Runs = append(rep.Runs, row)
	}
	flush("", true)
	srcs, err := in.Sources(ctx)
	if err != nil {
		return rep, err
	}
	for _, s := range srcs {
		rep.Sources = append(rep.Sources, sourceRow(s))
	}
	return rep, nil
}

func quarantineRow(q inbox.Quarantine, withRun bool) *inboxQuarantine {
	row := &inboxQuarantine{Reason: q.Reason, Expected: q.Expected, Got: q.Got, Detail: q.Detail,
		DetailEscaped: escapedIfInvalid(q.Detail), Since: q.Since.UTC()}
	if withRun {
		row.RunID, row.RunEscaped = q.RunID, escapedIfInvalid(q.RunID)
	}
	return row
}

func sourceRow(s inbox.Source) inboxSourceRow {
	row := inboxSourceRow{Name: s.Name, NameEscaped: escapedIfInvalid(s.Name), Rewound: s.Position == nil, Updated: s.Updated.UTC()}
	if strings.HasPrefix(s.Name, inboxseam.StreamSourcePrefix) {
		return streamSourceRow(s, row)
	}
	if strings.HasPrefix(s.Name, inboxseam.JournalSourcePrefix) {
		return journalSourceRow(s, row)
	}
	if !strings.HasPrefix(s.Name, inboxseam.FileSourcePrefix) {
		if s.Position != nil {
			row.PositionHex = hex.EncodeToString(s.Position)
		}
		return row
	}
	path := strings.TrimPrefix(s.Name, inboxseam.FileSourcePrefix)
	if s.Position == nil && s.RewoundFrom != nil {
		// Rewound: the file its position named is read again from its start, then on to the path's.
		if p, err := inbox.ParseFilePosition(s.RewoundFrom); err == nil {
			p.Offset = 0
			if behind, found, err := inbox.FileBehind(path, p); err == nil && found {
				row.BehindBytes = &behind
				return row
			}
		}
	}
	if s.Position == nil {
		// Rewound: the whole file is read again.
		st, err := os.Stat(path)
		if err != nil {
			row.BehindError = message(err)
			return row
		}
		behind := st.Size()
		row.BehindBytes = &behind
		return row
	}
	p, err := inbox.ParseFilePosition(s.Position)
	if err != nil {
		row.PositionHex = hex.EncodeToString(s.Position)
		row.BehindError = message(err)
		return row
	}
	row.File = &inboxFilePosition{Path: p.Path, PathEscaped: escapedIfInvalid(p.Path), Offset: p.Offset, Device: p.Device, Inode: p.Inode}
	behind, found, err := inbox.FileBehind(path, p)
	switch {
	case err != nil:
		row.BehindError = message(err)
	case !found:
		row.BehindError = fmt.Sprintf("the file it was reading (%s, device %d, inode %d) is not in its directory any more", quote(p.Path), p.Device, p.Inode)
	default:
		row.BehindBytes = &behind
	}
	return row
}

func printInboxStats(w io.Writer, rep inboxStatsReport) error {
	fmt.Fprintf(w, "%s: %s, %d quarantined; %s\n\n", quote(rep.DB), plural(int64(len(rep.Runs)), "run"), rep.Quarantined, plural(int64(len(rep.Sources)), "source"))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "run\tapplied up to\tlast applied\tquarantine")
	for _, r := range rep.Runs {
		last := "-"
		if r.LastApplied != nil {
			last = r.LastApplied.Format(time.RFC3339)
		}
		q := "-"
		if r.Quarantine != nil {
			q = quarantineSummary(r.Quarantine)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", quote(r.RunID), r.Position, last, q)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(rep.Sources) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "source\tposition\tbehind the end\tupdated")
	for _, s := range rep.Sources {
		pos := "opaque, " + fmt.Sprint(len(s.PositionHex)/2) + " bytes"
		switch {
		case s.Stream != nil:
			pos = streamPositionText(s.Stream)
		case s.Rewound:
			pos = "none: reads again from its start"
		case s.File != nil:
			pos = fmt.Sprintf("%s at byte %d (device %d, inode %d)", quote(s.File.Path), s.File.Offset, s.File.Device, s.File.Inode)
		case s.Journal != nil:
			pos = fmt.Sprintf("byte %d of the journal (segment %020d)", s.Journal.Position, s.Journal.Segment)
		}
		behind := "-"
		switch {
		case s.Stream != nil && s.BehindError == "":
			behind = streamBehindText(s.Stream)
		case s.BehindBytes != nil:
			behind = fmt.Sprintf("%d bytes", *s.BehindBytes)
		case s.BehindError != "":
			behind = "unknown: " + s.BehindError
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", quote(s.Name), pos, behind, s.Updated.Format(time.RFC3339))
	}
	return tw.Flush()
}

// seqOrNone shows a seq, or "none" for the 0 that stands for no seq.
func seqOrNone(seq int64) string {
	if seq == 0 {
		return "none"
	}
	return strconv.FormatInt(seq, 10)
}

// quarantineSummary is a quarantine on one line, for a table.
func quarantineSummary(q *inboxQuarantine) string {
	switch q.Reason {
	case "gap":
		return fmt.Sprintf("gap: expected seq %d, got %d", q.Expected, q.Got)
	case "conflict":
		return fmt.Sprintf("conflict at seq %d", q.Got)
	default:
		return fmt.Sprintf("%s at seq %d", sanitize(q.Reason), q.Got)
	}
}

const inboxQuarantinedAbout = `
Lists the quarantined runs, in run id order: why (a gap, a conflict, or the handler's refusal),
the seq the run needed next ("none" once it has applied seq 9223372036854775807, the last there
is) and the one that came, what happened, and since when. Nothing more of
such a run is applied until 'outbox inbox release' (or, for a gap that cannot be filled,
'outbox inbox accept-gap'). Opens the database read-only, as stats does.

Exit status: 0 no run is quarantined, 1 runs are quarantined (they are listed), 2 a usage or I/O
error: a script branches on it as on grep's.`

// inboxQuarantinedReport is the --json output of `outbox inbox quarantined`.
type inboxQuarantinedReport struct {
	DB string `json:"db"`
	// DBEscaped is the path quoted as Go's %q does, given only when it is not valid UTF-8.
	DBEscaped   string            `json:"db_escaped,omitempty"`
	Quarantined []inboxQuarantine `json:"quarantined"`
}

func runInboxQuarantined(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("inbox quarantined", "outbox inbox quarantined --db FILE [--json]", inboxQuarantinedAbout)
	dbPath := fs.String("db", "", "the consumer's database `file`")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, code, done := parseFlags(fs, args, stderr)
	if done {
		return code
	}
	if len(pos) != 0 || *dbPath == "" {
		return usageError(stderr, "outbox inbox quarantined", "need --db FILE and no arguments")
	}
	in, err := openInboxReadOnly(ctx, *dbPath)
	if err != nil {
		return failErr(stderr, exitUsage, "inbox quarantined", err)
	}
	defer in.Close()
	qs, err := in.Quarantined(ctx)
	if errors.Is(err, outbox.ErrBookOpened) {
		qs, err = in.Quarantined(ctx)
	}
	if err != nil {
		return failErr(stderr, exitUsage, "inbox quarantined", err)
	}
	rep := inboxQuarantinedReport{DB: *dbPath, DBEscaped: escapedIfInvalid(*dbPath), Quarantined: []inboxQuarantine{}}
	for _, q := range qs {
		rep.Quarantined = append(rep.Quarantined, *quarantineRow(q, true))
	}
	if *asJSON {
		err = printJSON(stdout, rep)
	} else {
		err = printQuarantined(stdout, rep)
	}
	if err != nil {
		return failErr(stderr, exitUsage, "inbox quarantined", err)
	}
	if len(qs) > 0 {
		return exitFindings
	}
	return exitOK
}

func printQuarantined(w io.Writer, rep inboxQuarantinedReport) error {
	fmt.Fprintf(w, "%s: %s quarantined\n", quote(rep.DB), plural(int64(len(rep.Quarantined)), "run"))
	if len(rep.Quarantined) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "run\treason\texpected\tgot\tsince\tdetail")
	for _, q := range rep.Quarantined {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", quote(q.RunID), sanitize(q.Reason), seqOrNone(q.Expected), q.Got,
			q.Since.Format(time.RFC3339), quote(q.Detail))
	}
	return tw.Flush()
}
