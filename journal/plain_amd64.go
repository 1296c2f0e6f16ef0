//go:build !purego

package journal

// plainLen returns the length of the longest prefix of b that holds no quote, no backslash, no
// control byte and no byte of 0x80 or above: the bytes a JSON string body can take as they are.
//
//go:noescape
func plainLen(b []byte) int

// plainWindow bounds what one call of plainLen or matchSteps scans of a string. A function in
// assembly cannot be preempted, so a string of a gigabyte scanned in one call would hold off every
// stop-the-world pause of the process for a tenth of a second; in windows it costs nothing more.
const plainWindow = 64 << 10
