// SPDX-License-Identifier: Apache-2.0

// Package filekind names what a path is when it is not the regular file the store, the inbox or the
// journal were given, so that both ends refuse a pipe, a device or a directory in the same words.
package filekind

import "os"

// Of says what a file of this mode is, for an error that refuses it: "a directory", "a named
// pipe", and so on; "not a regular file" for a kind without a name here.
func Of(mode os.FileMode) string {
	switch t := mode.Type(); {
	case t&os.ModeDir != 0:
		return "a directory"
	case t&os.ModeNamedPipe != 0:
		return "a named pipe"
	case t&os.ModeSocket != 0:
		return "a socket"
	case t&os.ModeCharDevice != 0:
		return "a character device"
	case t&os.ModeDevice != 0:
		return "a block device"
	case t&os.ModeSymlink != 0:
		return "a symbolic link"
	}
	return "not a regular file"
}
