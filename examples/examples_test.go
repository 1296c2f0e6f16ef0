// SPDX-License-Identifier: Apache-2.0

package examples_test

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// The examples are built as a team builds them and run as real processes: an engine started twice
// (so that the second start recovers and must not announce a customer again) and a platform
// following it, each stopped with SIGTERM. Every line the book recorded must then be in the
// platform's tables exactly once, and nothing the engine committed left unprojected.
func TestTheEngineAndThePlatformStopOnSIGTERMWithEveryLineAppliedOnceAndThePlatformRegisteredAtTheJournalsEnd(t *testing.T) {
	bin := t.TempDir()
	for _, name := range []string{"engine", "platform"} {
		build := exec.Command("go", "build", "-o", filepath.Join(bin, name), "./"+name)
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build ./%s: %v\n%s", name, err, out)
		}
	}
	t.Run("journal directory", func(t *testing.T) {
		dir := t.TempDir()
		runExamples(t, bin, dir, "-journal", filepath.Join(dir, "journal"))
		// The platform registered the position it applied to, the journal's end, so that retention
		// keeps every segment it has not read and no other.
		st, err := journal.Status(context.Background(), filepath.Join(dir, "journal"))
		if err != nil || len(st.Readers) != 1 || st.Readers[0].Position != st.End {
			t.Errorf("the journal's readers after the platform stopped: %+v (end %d), %v; want the platform at the end", st.Readers, st.End, err)
		}
	})
	t.Run("jetstream", func(t *testing.T) {
		runExamples(t, bin, t.TempDir(), "-nats", startNATS(t), "-stream", "EVENTS")
	})
}

// runExamples runs the scenario with the engine's and the platform's source flags.
func runExamples(t *testing.T, bin, dir string, sourceFlags ...string) {
	ctx := context.Background()
	book := filepath.Join(dir, "book.db")
	platformDB := filepath.Join(dir, "platform.db")
	var platform *proc
	lastSeq := map[string]int64{} // each run's last seq, as the book says once the engine stopped
	for start := range 2 {
		engine := startProc(t, filepath.Join(bin, "engine"), append([]string{"-book", book, "-pace", "5ms"}, sourceFlags...)...)
		runID := strings.TrimPrefix(engine.waitLine(t, "engine: running: run "), "engine: running: run ")
		if start == 0 {
			// After the engine, whose first start creates the stream: the file source would wait
			// for a missing journal directory, the stream source would not.
			platform = startProc(t, filepath.Join(bin, "platform"), append([]string{"-db", platformDB}, sourceFlags...)...)
			platform.waitLine(t, "platform: following") // its database is created
		}
		// Stop the engine while the platform is applying its run: a signal mid-work.
		waitFor(t, func() bool { return platformPosition(t, platformDB, runID) >= 20 })
		engine.stop(t)
		stats := bookRun(t, book, runID)
		if stats.Pending != 0 {
			t.Fatalf("run %s stopped with %d lines pending, want 0: %+v", runID, stats.Pending, stats)
		}
		lastSeq[runID] = stats.LastSeq
	}
	for runID, last := range lastSeq {
		waitFor(t, func() bool { return platformPosition(t, platformDB, runID) == last })
	}
	platform.stop(t)

	// The book's own rows, and the platform's.
	bookDB, err := outbox.OpenReadOnlyDB(ctx, book)
	if err != nil {
		t.Fatal(err)
	}
	defer bookDB.Close()
	wantOrders := rows(t, bookDB, `SELECT run || ' ' || seq || ' ' || customer || ' ' || cents FROM orders ORDER BY 1`)
	wantCustomers := rows(t, bookDB, `SELECT id FROM customers ORDER BY 1`)
	in, err := inbox.Open(ctx, platformDB)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	var events, orders, customers []string
	if err := in.WriteTx(ctx, func(tx *sql.Tx) error {
		events = rows(t, tx, `SELECT run || ' ' || seq FROM events ORDER BY 1`)
		orders = rows(t, tx, `SELECT run || ' ' || seq || ' ' || customer || ' ' || cents FROM orders ORDER BY 1`)
		customers = rows(t, tx, `SELECT id FROM customers ORDER BY 1`)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var wantEvents []string
	for runID, last := range lastSeq {
		for seq := int64(1); seq <= last; seq++ {
			wantEvents = append(wantEvents, fmt.Sprintf("%s %d", runID, seq))
		}
	}
	slices.Sort(wantEvents)
	if !slices.Equal(events, wantEvents) {
		t.Errorf("the platform's events are not every line of the book's runs once:\n got %d rows %q\nwant %d rows %q", len(events), events, len(wantEvents), wantEvents)
	}
	if len(wantOrders) == 0 || !slices.Equal(orders, wantOrders) {
		t.Errorf("the platform's orders are not the book's:\n got %q\nwant %q", orders, wantOrders)
	}
	if len(wantCustomers) == 0 || !slices.Equal(customers, wantCustomers) {
		t.Errorf("the platform's customers are not the book's:\n got %q\nwant %q", customers, wantCustomers)
	}
}

// proc is an example program running as a child process.
type proc struct {
	cmd   *exec.Cmd
	name  string
	lines chan string // its standard error, line by line
	mu    sync.Mutex
	log   strings.Builder
	done  chan struct{}
}

func startProc(t *testing.T, path string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(path, args...), name: filepath.Base(path), lines: make(chan string, 1024), done: make(chan struct{})}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.mu.Lock()
			p.log.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			select {
			case p.lines <- sc.Text():
			default:
			}
		}
		io.Copy(io.Discard, stderr)
		close(p.lines)
	}()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			p.cmd.Process.Kill()
			p.cmd.Wait()
		}
	})
	return p
}

// waitLine returns the first line of the process's standard error that starts with prefix.
func (p *proc) waitLine(t *testing.T, prefix string) string {
	t.Helper()
	for l := range p.lines {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	p.cmd.Wait()
	t.Fatalf("%s exited (%v) without printing %q:\n%s", p.name, p.cmd.ProcessState, prefix, p.output())
	return ""
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// stop sends SIGTERM and requires a clean exit that says it stopped.
func (p *proc) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-p.done
	err := p.cmd.Wait()
	if err != nil || !strings.Contains(p.output(), p.name+": stopped") {
		t.Fatalf("%s after SIGTERM: %v, want exit 0 after saying it stopped:\n%s", p.name, err, p.output())
	}
}

// waitFor polls cond until it holds; the test's own deadline bounds it.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for !cond() {
		time.Sleep(20 * time.Millisecond)
	}
}

// platformPosition is how far the platform has applied a run, read beside the running platform.
func platformPosition(t *testing.T, path, runID string) int64 {
	t.Helper()
	in, err := inbox.OpenReadOnly(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	pos, err := in.Position(context.Background(), runID)
	if err != nil {
		t.Fatal(err)
	}
	return pos
}

// bookRun is a run's statistics, read from the book.
func bookRun(t *testing.T, path, runID string) outbox.RunStats {
	t.Helper()
	s, err := outbox.OpenReadOnly(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Every run, those whose projected rows the relay has forgotten too.
	var runs []outbox.RunStats
	for r, err := range s.EveryRun(context.Background()) {
		if err != nil {
			t.Fatal(err)
		}
		if r.RunID == runID {
			return r
		}
		runs = append(runs, r)
	}
	t.Fatalf("the book has no run %s: %+v", runID, runs)
	return outbox.RunStats{}
}

func rows(t *testing.T, q interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}, query string) []string {
	t.Helper()
	rs, err := q.QueryContext(context.Background(), query)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	var out []string
	for rs.Next() {
		var s string
		if err := rs.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// startNATS starts a JetStream server in the test's process, its store in a temporary directory,
// and returns its URL.
func startNATS(t *testing.T) string {
	t.Helper()
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	if !srv.ReadyForConnections(time.Minute) {
		t.Fatal("nats server not ready")
	}
	return srv.ClientURL()
}
