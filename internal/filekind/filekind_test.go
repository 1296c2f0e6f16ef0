// SPDX-License-Identifier: Apache-2.0

package filekind

import (
	"os"
	"testing"
)

func TestEachKindOfFileThatIsNotRegularIsNamed(t *testing.T) {
	for mode, want := range map[os.FileMode]string{
		os.ModeDir:                        "a directory",
		os.ModeNamedPipe:                  "a named pipe",
		os.ModeSocket:                     "a socket",
		os.ModeDevice | os.ModeCharDevice: "a character device",
		os.ModeDevice:                     "a block device",
		os.ModeSymlink:                    "a symbolic link",
		os.ModeIrregular:                  "not a regular file",
	} {
		if got := Of(mode); got != want {
			t.Errorf("%v: %q, want %q", mode, got, want)
		}
	}
}
