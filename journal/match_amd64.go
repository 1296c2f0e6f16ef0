// SPDX-License-Identifier: Apache-2.0

//go:build !purego

package journal

// matchSteps is the fast path of shape.match; see match_amd64.s.
//
//go:noescape
func matchSteps(b, text []byte, steps []fastStep, vals []int) (n, res int)

const haveMatchSteps = true
