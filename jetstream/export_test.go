// SPDX-License-Identifier: Apache-2.0

package jetstream

// SetAfterStreamCommit sets the hook called after each batch a stream source commits (benchmarks).
func SetAfterStreamCommit(f func(source string, seq uint64)) { afterStreamCommit = f }

// SetBeforeConsume sets the hook called between a session's first look at the stream and the start
// of its ordered consumer.
func SetBeforeConsume(f func()) { beforeConsume = f }
