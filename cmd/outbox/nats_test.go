package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

func TestDemoProjectsToAnEmbeddedJetStreamServer(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "demo")
	code, out, errOut := cli(t, "demo", "--sink", "nats", "--dir", dir, "--units", "200", "--crashes", "2", "--seed", "3")
	if code != exitOK {
		t.Fatalf("demo --sink nats: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{"2 killed with SIGKILL", "duplicates skipped            0", "units announced exactly once  200 of 200",
		"platform: units 200 of 200, spend 99900 cents, duplicates skipped 0, restarts 0", "OK: nothing lost"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if code, _, _ := cli(t, "demo", "--sink", "kafka"); code != exitUsage {
		t.Errorf("unknown sink: exit %d", code)
	}
}

func TestRelayAndVerifyWorkAgainstAJetStreamStream(t *testing.T) {
	ctx := context.Background()
	url, stop, err := embeddedNATS(ctx, t.TempDir(), "EVENTS", "outbox")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	dbPath, _ := book(t)
	code, out, errOut := cli(t, "relay", "--db", dbPath, "--nats", url, "--stream", "EVENTS")
	// "old" was projected to its journal when the book was made; the three lines of "dead" were not.
	if code != exitOK || !strings.Contains(out, "projected 3 lines") {
		t.Fatalf("relay --nats: %d %q %q", code, out, errOut)
	}
	code, out, errOut = cli(t, "verify", "--json", "--nats", url, "--stream", "EVENTS")
	var rep verifyReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != exitOK || !rep.OK || rep.Lines != 3 || rep.Runs["dead"].Last != 3 {
		t.Errorf("verify --nats: %d %v %+v %s", code, err, rep, errOut)
	}
	// A line published around the sink, with a gap: the stream verifier finds it like the file one.
	js, closeConn, err := connectJetStream(url)
	if err != nil {
		t.Fatal(err)
	}
	defer closeConn()
	if _, err := js.Publish(ctx, "outbox.dead", []byte(`{"engine_run_id":"dead","seq":9}`)); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := cli(t, "verify", "--nats", url, "--stream", "EVENTS"); code != exitFindings || !strings.Contains(errOut, "expected seq 4, found 9") {
		t.Errorf("verify of a stream with a gap: %d %q", code, errOut)
	}
	for _, args := range [][]string{
		{"relay", "--db", dbPath, "--journal", "j", "--nats", url, "--stream", "EVENTS"},
		{"relay", "--db", dbPath, "--nats", url},
		{"verify", "file", "--nats", url, "--stream", "EVENTS"},
	} {
		if code, _, errOut := cli(t, args...); code != exitUsage || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%v: exit %d %q, want a one-line usage error", args, code, errOut)
		}
	}
	if code, _, _ := cli(t, "verify", "--nats", "nats://127.0.0.1:1", "--stream", "EVENTS"); code != exitUsage {
		t.Errorf("verify against no server: exit %d, want 2", code)
	}
}
