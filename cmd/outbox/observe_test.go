// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/textmachine/outbox/internal/dirstate"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// startMetrics starts `outbox metrics` on dbPath as a process of its own and returns the URL it
// serves and a function that interrupts it and returns its exit status and standard error.
func startMetrics(t *testing.T, dbPath string) (string, func() (int, string)) {
	t.Helper()
	cmd := outboxCmd(t, "metrics", "--db", dbPath, "--listen", "127.0.0.1:0")
	var errOut strings.Builder
	cmd.Stderr = &errOut
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("metrics printed no address: %v (%s)", err, errOut.String())
	}
	url := regexp.MustCompile(`http://\S+/metrics`).FindString(line)
	if url == "" {
		t.Fatalf("metrics printed %q", line)
	}
	return url, func() (int, string) {
		cmd.Process.Signal(os.Interrupt)
		err := cmd.Wait()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatal(err)
		}
		return cmd.ProcessState.ExitCode(), errOut.String()
	}
}

// scrape returns the samples at url, by metric and labels as written ("name{run=\"r\"}").
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: %d %v\n%s", resp.StatusCode, err, body)
	}
	out := map[string]float64{}
	for _, l := range strings.Split(string(body), "\n") {
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		v, err := strconv.ParseFloat(l[i+1:], 64)
		if err != nil {
			t.Fatalf("sample %q: %v", l, err)
		}
		out[l[:i]] = v
	}
	return out
}

func TestMetricsServesTheBooksFiguresBesideARunningEngine(t *testing.T) {
	ctx := context.Background()
	dbPath, _ := book(t) // "old": 2 lines projected; "dead": 3 lines, none projected
	url, stop := startMetrics(t, dbPath)

	m := scrape(t, url)
	want := map[string]float64{
		`outbox_up`: 1, `outbox_run_last_seq{run="dead"}`: 3, `outbox_run_projected_seq{run="dead"}`: 0,
		`outbox_run_pending_lines{run="dead"}`: 3, `outbox_runs`: 2, `outbox_pending_lines`: 3,
	}
	for k, v := range want {
		if got, ok := m[k]; !ok || got != v {
			t.Errorf("before the engine: %s = %v (present %v), want %v", k, got, ok, v)
		}
	}
	for _, k := range []string{`outbox_run_oldest_pending_age_seconds{run="dead"}`, `outbox_ledger_keys`, `outbox_database_bytes`, `outbox_wal_bytes`} {
		if _, ok := m[k]; !ok {
			t.Errorf("no %s in the scrape", k)
		}
	}

	// An engine opens the book after the exporter started, and commits while it is scraped.
	s, err := outbox.Open(ctx, dbPath)
	if err != nil {
		t.Fatalf("an engine cannot open the book beside the exporter: %v", err)
	}
	// Its first commit comes before the scrapes: Open leaves the -wal empty until a transaction
	// writes to it, and only from then on does a WAL beside the open engine hold frames (a
	// checkpoint restarts it from the start without cutting the file below journal_size_limit).
	if _, err := s.EnqueueEvent(ctx, "live", journal.Builder("live", "tick", 0)); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 1; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			if _, err := s.EnqueueEvent(ctx, "live", journal.Builder("live", "tick", i)); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	var last float64
	for range 5 {
		m := scrape(t, url)
		if m[`outbox_up`] != 1 {
			t.Errorf("a scrape beside the engine failed: %v", m)
		}
		seq := m[`outbox_run_last_seq{run="live"}`]
		if seq < last {
			t.Errorf("the engine's highest seq went back from %v to %v", last, seq)
		}
		last = seq
		if m[`outbox_wal_bytes`] == 0 {
			t.Error("the WAL's size is 0 beside a committing engine")
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(done)
	wg.Wait()
	committed, err := collect(s.AllRuns(ctx))
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	var liveLast int64
	for _, r := range committed {
		if r.RunID == "live" {
			liveLast = r.LastSeq
		}
	}
	if m := scrape(t, url); m[`outbox_run_last_seq{run="live"}`] != float64(liveLast) || liveLast == 0 {
		t.Errorf("after the engine stopped: live's highest seq %v, want %d", m[`outbox_run_last_seq{run="live"}`], liveLast)
	}
	if code, errOut := stop(); code != exitOK {
		t.Errorf("metrics after an interrupt: exit %d, %s", code, errOut)
	}
}

func TestMetricsLeavesAClosedBooksDirectoryAsItFoundIt(t *testing.T) {
	dbPath, _ := book(t)
	dir := filepath.Dir(dbPath)
	before := dirstate.Snapshot(t, dir)
	url, stop := startMetrics(t, dbPath)
	for range 3 {
		if m := scrape(t, url); m[`outbox_up`] != 1 {
			t.Errorf("scrape: %v", m)
		}
	}
	if code, errOut := stop(); code != exitOK {
		t.Errorf("exit %d, %s", code, errOut)
	}
	if diff := cmp.Diff(before, dirstate.Snapshot(t, dir)); diff != "" {
		t.Errorf("the directory changed (-before +after):\n%s", diff)
	}
}

func TestStatsWatchRedrawsEveryDurationUntilInterrupted(t *testing.T) {
	dbPath, _ := book(t)
	cmd := outboxCmd(t, "stats", "--db", dbPath, "--watch", "50ms")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	// Off a terminal, one block per refresh: count the header lines.
	sc := bufio.NewScanner(out)
	blocks := 0
	var seen strings.Builder
	for blocks < 3 && sc.Scan() {
		fmt.Fprintln(&seen, sc.Text())
		if strings.Contains(sc.Text(), "highest seq") {
			blocks++
		}
	}
	cmd.Process.Signal(syscall.SIGINT)
	rest, _ := io.ReadAll(out)
	err = cmd.Wait()
	if blocks < 3 || err != nil {
		t.Errorf("stats --watch: %d blocks, exit %v\n%s%s", blocks, err, seen.String(), rest)
	}
	if strings.Contains(seen.String(), "\x1b[") {
		t.Error("stats --watch drew terminal escapes into a pipe")
	}
}
