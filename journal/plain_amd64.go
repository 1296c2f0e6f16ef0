// SPDX-License-Identifier: Apache-2.0

//go:build !purego

package journal

// plainLen returns the length of the longest prefix of b that holds no quote, no backslash, no
// control byte and no byte of 0x80 or above: the bytes a JSON string body can take as they are.
//
//go:noescape
func plainLen(b []byte) int
