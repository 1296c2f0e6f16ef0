// SPDX-License-Identifier: Apache-2.0

//go:build !linux

package smallfs

import "errors"

func mount(string) error   { return errors.New("tmpfs is mounted on Linux only") }
func unmount(string) error { return nil }

func freeBytes(string) (uint64, error) { return 0, errors.New("tmpfs is mounted on Linux only") }
