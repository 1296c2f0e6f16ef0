// SPDX-License-Identifier: Apache-2.0

//go:build !amd64 || purego

package journal

// matchSteps has no fast path here: every line takes shape.match's own.
func matchSteps(b, text []byte, steps []fastStep, vals []int) (n, res int) { return 0, resUnsure }

const haveMatchSteps = false
