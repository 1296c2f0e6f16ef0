// SPDX-License-Identifier: Apache-2.0

package journal_test

import "iter"

// collect gathers what a listing's iterator yields, stopping at its error.
func collect[T any](seq iter.Seq2[T, error]) ([]T, error) {
	var out []T
	for v, err := range seq {
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}
