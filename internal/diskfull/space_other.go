// SPDX-License-Identifier: Apache-2.0

//go:build !(linux || darwin || freebsd)

package diskfull

// space cannot tell here: an I/O error stays what SQLite says.
func space(string) (free, inodes uint64, ok bool) { return 0, 0, false }
