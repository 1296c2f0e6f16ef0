// SPDX-License-Identifier: Apache-2.0

//go:build !linux

package jetstream_test

import "os/exec"

func dieWithParent(*exec.Cmd) {}
