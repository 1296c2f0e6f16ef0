// SPDX-License-Identifier: Apache-2.0

package crashtest_test

import (
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/textmachine/outbox/internal/faultpoint"
	"github.com/textmachine/outbox/internal/testing/crashtest"
)

func TestMain(m *testing.M) {
	crashtest.Main(m, map[string]func() int{
		"exit-7": func() int { return 7 },
		// pass-points passes AfterCommit five times, saying which pass comes next before each.
		"pass-points": func() int {
			crashtest.ArmFromEnv()
			for i := 1; i <= 5; i++ {
				fmt.Printf("%d ", i)
				faultpoint.Hit(faultpoint.BeforeCommit)
				faultpoint.Hit(faultpoint.AfterCommit)
			}
			return 0
		},
	})
}

func TestAChildPlaysItsRoleAndExitsWithItsStatus(t *testing.T) {
	t.Parallel()
	err := crashtest.Child(t, "exit-7").Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 7 {
		t.Fatalf("child: %v, want exit status 7", err)
	}
	if crashtest.Killed(err) {
		t.Error("Killed reports an ordinary exit as a SIGKILL")
	}
}

func TestAChildOfAnUnknownRoleExitsWithStatus2(t *testing.T) {
	t.Parallel()
	err := crashtest.Child(t, "no-such-role").Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("child: %v, want exit status 2", err)
	}
}

func TestAChildKillsItselfAtTheNthPassOfItsPointAndNoOther(t *testing.T) {
	t.Parallel()
	cmd := crashtest.Child(t, "pass-points", crashtest.KillAt(faultpoint.AfterCommit, 3)...)
	out, err := cmd.Output()
	if !crashtest.Killed(err) {
		t.Fatalf("child: %v, want killed by SIGKILL", err)
	}
	// Killed at the third pass of AfterCommit, not at the third point passed.
	if got := strings.TrimSpace(string(out)); got != "1 2 3" {
		t.Errorf("child got to %q before it died, want 1 2 3", got)
	}
}

func TestAChildWithoutAKillPointRunsToTheEnd(t *testing.T) {
	t.Parallel()
	out, err := crashtest.Child(t, "pass-points").Output()
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	if got := strings.TrimSpace(string(out)); got != "1 2 3 4 5" {
		t.Errorf("child printed %q, want 1 2 3 4 5", got)
	}
}
