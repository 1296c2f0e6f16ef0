// SPDX-License-Identifier: Apache-2.0

package jetstream

// SetAfterStreamCommit sets the hook called after each batch a stream source commits (benchmarks).
func SetAfterStreamCommit(f func(source string, seq uint64)) { afterStreamCommit = f }

// SetBeforeConsume sets the hook called between a session's first look at the stream and the start
// of its ordered consumer.
func SetBeforeConsume(f func()) { beforeConsume = f }

// SetTrimStep sets the hook Trim calls after its first look at the readers, when it is to remove
// something ("looked": nothing written yet), and after each step that leaves a record behind ("announced":
// the stream sequence it removes below written, before its second look at the readers; "recorded":
// a run's removal recorded, not done; "purged": done; "capmark": the cap's mark written, nothing
// removed by it yet); an error from it stops Trim there, as a kill would.
func SetTrimStep(f func(step string) error) { trimStep = f }

// SetRegisterStep sets the hook a reader calls just before it writes its key in the readers' bucket
// ("before_register") and just after the write succeeded ("after_register").
func SetRegisterStep(f func(step string)) { registerStep = f }
