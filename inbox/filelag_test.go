// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"os"
	"testing"
)

// FileBehind counts what a source has not read: the rest of its file, and after a rotation the new
// file too.
func TestFileBehindCountsWhatTheSourceHasNotRead(t *testing.T) {
	rj, p := readJournal(t, 3)
	if n, found, err := FileBehind(rj.path, p); err != nil || !found || n != 0 {
		t.Fatalf("read to the end: %d, %v, %v", n, found, err)
	}
	before := len(readAllFile(t, rj.path))
	rj.add("a", 2)
	grown := int64(len(readAllFile(t, rj.path)) - before)
	if n, found, err := FileBehind(rj.path, p); err != nil || !found || n != grown {
		t.Fatalf("two lines behind: %d, %v, %v; want %d", n, found, err, grown)
	}
	rj.j.Close()
	os.Rename(rj.path, rj.path+".1")
	rj.open()
	rj.add("b", 1)
	newSize := int64(len(readAllFile(t, rj.path)))
	if n, found, err := FileBehind(rj.path, p); err != nil || !found || n != grown+newSize {
		t.Fatalf("rotated: %d, %v, %v; want %d", n, found, err, grown+newSize)
	}
	os.Remove(rj.path + ".1")
	if n, found, err := FileBehind(rj.path, p); err != nil || found || n != newSize {
		t.Fatalf("the old file gone: %d, %v, %v; want %d, not found", n, found, err, newSize)
	}
}
