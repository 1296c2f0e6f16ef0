// SPDX-License-Identifier: Apache-2.0

package main

import (
	"flag"
	"io"
	"strings"
	"testing"
)

// The demo's engine and platform are child processes, both given these arguments and environment:
// a password in the server's URL must not be on their command lines, which any user of the machine
// can read, but in their environment.
func TestTheDemoGivesItsEngineTheServersPasswordInItsEnvironmentNotOnItsCommandLine(t *testing.T) {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	nf := addNATSFlags(fs, "the server")
	if err := fs.Parse([]string{"--nats", "nats://alice:s3cret@127.0.0.1:4222", "--subject-prefix", "book"}); err != nil {
		t.Fatal(err)
	}
	args, env := natsEngineArgs(nf, "EVENTS")
	if joined := strings.Join(args, " "); strings.Contains(joined, "s3cret") || strings.Contains(joined, "alice") {
		t.Errorf("the engine's arguments carry the credentials: %q", args)
	}
	if !strings.Contains(strings.Join(args, " "), "--subject-prefix book") {
		t.Errorf("the engine's arguments lost the subject prefix: %q", args)
	}
	if len(env) != 1 || env[0] != demoNATSURLEnv+"=nats://alice:s3cret@127.0.0.1:4222" {
		t.Errorf("the engine's environment: %q", env)
	}
}
