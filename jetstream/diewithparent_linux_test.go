// SPDX-License-Identifier: Apache-2.0

package jetstream_test

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes a server process die with the test binary: a test that times out must not
// leave servers behind holding `go test`'s output open, which would make it wait for them forever.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
