// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"strings"
	"testing"
)

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
