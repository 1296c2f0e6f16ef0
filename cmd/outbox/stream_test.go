// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	njs "github.com/nats-io/nats.go/jetstream"
)

// builtCommand returns a function that runs the command as a process of its own, returning its exit
// status, standard output and standard error. The process is this test binary (see asOutbox), built
// with the flags of the test run: a go build of its own would link the whole command again, seconds
// each time, and without the race detector.
func builtCommand(t *testing.T) func(args ...string) (int, string, string) {
	t.Helper()
	return func(args ...string) (int, string, string) {
		t.Helper()
		return runOutbox(t, args...)
	}
}

// bareNATS starts a JetStream server with no stream and returns its URL.
func bareNATS(t *testing.T) string {
	t.Helper()
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true,
		StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	return srv.ClientURL()
}

func TestStreamCreateMakesTheStreamTheRelayProjectsInto(t *testing.T) {
	outbox := builtCommand(t)
	url := bareNATS(t)
	code, out, errOut := outbox("stream", "create", "--nats", url, "--stream", "EVENTS", "--subject-prefix", "book")
	if code != exitOK || !strings.Contains(out, "subjects book.>, file storage, 1 replica, atomic publish") {
		t.Fatalf("stream create: %d %q %q", code, out, errOut)
	}
	js, closeConn, err := connectJetStream(url)
	if err != nil {
		t.Fatal(err)
	}
	defer closeConn()
	st, err := js.Stream(context.Background(), "EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	if c := st.CachedInfo().Config; !c.AllowAtomicPublish || c.Storage != njs.FileStorage || c.Subjects[0] != "book.>" {
		t.Errorf("created stream: %+v", c)
	}
	// Again with the same settings: nothing to do. With other settings: what differs, and no change.
	if code, _, errOut := outbox("stream", "create", "--nats", url, "--stream", "EVENTS", "--subject-prefix", "book"); code != exitOK {
		t.Errorf("stream create again: %d %q", code, errOut)
	}
	code, _, errOut = outbox("stream", "create", "--nats", url, "--stream", "EVENTS", "--replicas", "3")
	if code != exitUsage || !strings.Contains(errOut, "want 3") || !strings.Contains(errOut, "do not capture outbox.>") || strings.Count(errOut, "\n") != 1 {
		t.Errorf("stream create with other settings: %d %q", code, errOut)
	}

	if code, out, errOut := outbox("stream", "create", "--nats", url, "--stream", "DEFAULT"); code != exitOK || !strings.Contains(out, "outbox.>") {
		t.Fatalf("stream create with the default prefix: %d %q %q", code, out, errOut)
	}
	dbPath, _ := book(t)
	if code, out, errOut := outbox("relay", "--db", dbPath, "--nats", url, "--stream", "DEFAULT"); code != exitOK || !strings.Contains(out, "projected 3 lines") {
		t.Errorf("relay into the created stream: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := outbox("verify", "--nats", url, "--stream", "DEFAULT"); code != exitOK || !strings.Contains(out, "3 unique lines") {
		t.Errorf("verify the created stream: %d %q %q", code, out, errOut)
	}
}

func TestRelayAndVerifyOnAMissingStreamNameTheCommandThatCreatesIt(t *testing.T) {
	outbox := builtCommand(t)
	url := bareNATS(t)
	dbPath, _ := book(t)
	for _, args := range [][]string{
		{"relay", "--db", dbPath, "--nats", url, "--stream", "MISSING"},
		{"verify", "--nats", url, "--stream", "MISSING"},
	} {
		code, _, errOut := outbox(args...)
		if code != exitUsage || !strings.Contains(errOut, "outbox stream create --nats "+url+" --stream MISSING") || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%s on a missing stream: %d %q", args[0], code, errOut)
		}
	}
}

func TestStreamHelpGoesToStdoutAndUsageErrorsExitTwo(t *testing.T) {
	outbox := builtCommand(t)
	for _, args := range [][]string{{"stream", "--help"}, {"stream", "create", "--help"}, {"stream", "create", "-h"}} {
		code, out, errOut := outbox(args...)
		if code != exitOK || errOut != "" || !strings.Contains(out, "usage: outbox stream create (--nats URL | --context NAME) --stream NAME") {
			t.Errorf("%v: %d %q %q", args, code, out, errOut)
		}
		for _, want := range []string{"--nats URL", "--stream NAME", "--replicas N", "--subject-prefix PREFIX", "--replicas 3 survives"} {
			if !strings.Contains(out, want) {
				t.Errorf("%v: the help lacks %q", args, want)
			}
		}
		if strings.Contains(out, "  -nats") {
			t.Errorf("%v: a flag shown with one dash:\n%s", args, out)
		}
	}
	for _, args := range [][]string{
		{"stream"},
		{"stream", "delete", "--nats", "u", "--stream", "S"},
		{"stream", "create"},
		{"stream", "create", "--nats", "nats://127.0.0.1:1"},
		{"stream", "create", "--nats", "u", "--stream", "S", "--replicas", "0"},
		{"stream", "create", "--nats", "u", "--stream", "S", "extra"},
		{"stream", "create", "--bogus"},
		{"stream", "create", "--nats", "nats://127.0.0.1:1", "--stream", "S"}, // no server there
	} {
		code, out, errOut := outbox(args...)
		if code != exitUsage || out != "" || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q: want 2 and one line on stderr", args, code, out, errOut)
		}
	}
}

func TestStreamCreateUsageErrorsNameStreamCreate(t *testing.T) {
	for _, args := range [][]string{
		{"stream", "create", "--bogus"},
		{"stream", "create", "--json", "--nats", "nats://127.0.0.1:1", "--stream", "S"},
		{"stream", "create"},
		{"stream", "create", "extra", "--nats", "nats://127.0.0.1:1", "--stream", "S"},
		{"stream", "create", "--nats", "nats://127.0.0.1:1", "--stream", "S", "--replicas", "9"},
		{"stream", "--nats", "nats://127.0.0.1:1", "--stream", "S", "create", "extra"},
	} {
		code, out, errOut := cli(t, args...)
		if code != exitUsage || out != "" || strings.Count(errOut, "\n") != 1 ||
			!strings.HasPrefix(errOut, "outbox stream create: ") || !strings.HasSuffix(errOut, "(run 'outbox stream create --help')\n") {
			t.Errorf("%q: exit %d, stderr %q; want exit 2 and one line from outbox stream create", args, code, errOut)
		}
	}
	if code, _, errOut := cli(t, "stream", "delete"); code != exitUsage || !strings.HasPrefix(errOut, "outbox stream: ") {
		t.Errorf("stream delete: exit %d, stderr %q", code, errOut)
	}
}

// TestStreamCreateRefusesBadNamesAndPrefixesAndCreatesNothing: against a running server, a stream
// name or subject prefix that JetStream cannot take is a usage error of one line on stderr, nothing
// on stdout, and the server is left without a stream. Flags before the subcommand are read as after it.
func TestStreamCreateRefusesBadNamesAndPrefixesAndCreatesNothing(t *testing.T) {
	outbox := builtCommand(t)
	url := bareNATS(t)
	for _, args := range [][]string{
		{"--stream", "a b"},
		{"--stream", "a.b"},
		{"--stream", "A>"},
		{"--stream", "S", "--subject-prefix", ""},
		{"--stream", "S", "--subject-prefix", "a.>"},
		{"--stream", "S", "--subject-prefix", "a b"},
		{"--stream", "S", "--subject-prefix", "a.*"},
		{"--stream", "S", "--subject-prefix", "\xff"},
		{"--stream", "S", "--replicas", "-1"},
		{"--stream", "S", "--replicas", "99999999999999999999"},
	} {
		full := append([]string{"stream", "create", "--nats", url}, args...)
		code, out, errOut := outbox(full...)
		if code != exitUsage || out != "" || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%q: exit %d, stdout %q, stderr %q: want 2 and one line on stderr", args, code, out, errOut)
		}
	}
	js, closeConn, err := connectJetStream(url)
	if err != nil {
		t.Fatal(err)
	}
	defer closeConn()
	names := js.StreamNames(context.Background())
	for n := range names.Name() {
		t.Errorf("a refused stream create left stream %q", n)
	}
	if code, out, errOut := outbox("stream", "--nats", url, "--stream", "EARLY", "create"); code != exitOK || errOut != "" || !strings.Contains(out, "stream EARLY") {
		t.Errorf("flags before the subcommand: %d %q %q", code, out, errOut)
	}
}

func TestStreamCreateSaysWhetherItCreatedTheStreamOrFoundIt(t *testing.T) {
	url := bareNATS(t)
	code, out, errOut := cli(t, "stream", "create", "--nats", url, "--stream", "EVENTS")
	if code != exitOK || !strings.HasPrefix(out, "created stream EVENTS at "+url+": subjects outbox.>, file storage, 1 replica,") {
		t.Errorf("stream create: %d %q %q", code, out, errOut)
	}
	code, out, errOut = cli(t, "stream", "create", "--nats", url, "--stream", "EVENTS")
	if code != exitOK || !strings.HasPrefix(out, "found stream EVENTS at "+url+": ") {
		t.Errorf("stream create again: %d %q %q", code, out, errOut)
	}
}
