// SPDX-License-Identifier: Apache-2.0

// Package crashtest re-executes a test binary as a child process that plays a role (an engine, a
// server, the holder of a lock) and, when told, kills itself with SIGKILL at the n-th pass of a fault
// point, so that locks and crashes are tested across real processes rather than simulated.
//
// A test binary that has children routes them in its TestMain:
//
//	func TestMain(m *testing.M) { crashtest.Main(m, map[string]func() int{"engine": engine}) }
//
// and a test starts one with Child(t, "engine", crashtest.KillAt(faultpoint.AfterCommit, 3)...).
package crashtest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/textmachine/outbox/internal/faultpoint"
)

// roleEnv names the role a re-executed test binary plays.
const roleEnv = "OUTBOX_TEST_CHILD"

// The fault point a child kills itself at, and at which pass of it.
const (
	killPointEnv = "KILL_POINT"
	killAtEnv    = "KILL_AT"
)

// Main runs the role named in this process's environment and exits with what it returns, or, when
// there is none, runs the tests. A role that roles does not hold exits with status 2. Call it from
// TestMain; a test binary has one TestMain, so it lists every role of its package.
func Main(m *testing.M, roles map[string]func() int) {
	if role := os.Getenv(roleEnv); role != "" {
		f, ok := roles[role]
		if !ok {
			fmt.Fprintf(os.Stderr, "unknown child role %q\n", role)
			os.Exit(2)
		}
		os.Exit(f())
	}
	os.Exit(m.Run())
}

// Child returns a command that re-executes this test binary in role, with env added to this process's
// environment and its standard error going to this process's. It runs no test.
func Child(t testing.TB, role string, env ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), append([]string{roleEnv + "=" + role}, env...)...)
	cmd.Stderr = os.Stderr
	return cmd
}

// KillAt is the environment that makes a child which calls ArmFromEnv kill itself at the at-th pass
// of point.
func KillAt(point string, at int) []string {
	return []string{killPointEnv + "=" + point, killAtEnv + "=" + strconv.Itoa(at)}
}

// ArmFromEnv installs, when the environment holds a KillAt, a fault point hook that kills this
// process with SIGKILL at the at-th pass of the point: no deferred function, no buffered write, no
// closing of files runs, as when the machine's power goes. Points are passed by several goroutines
// (an engine's and its relay's), so the passes are counted atomically.
func ArmFromEnv() {
	point := os.Getenv(killPointEnv)
	if point == "" {
		return
	}
	at, _ := strconv.ParseInt(os.Getenv(killAtEnv), 10, 64)
	var hits atomic.Int64
	faultpoint.Set(func(p string) {
		if p == point && hits.Add(1) == at {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
	})
}

// Killed reports whether err, from a child's Wait or Run, says that it died of SIGKILL.
func Killed(err error) bool {
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		return false
	}
	ws, ok := exit.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}
