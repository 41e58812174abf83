package core

import "iter"

// Chain returns the stores of the decorator chain from s inward: s, then
// the store s decorates (its Unwrap() Store method), and so on to the
// backend, which has no Unwrap. It is how a decorator asks what the stores
// under it can do, as [AlgorithmAs] asks an algorithm; a decorator of your
// own gives its type an Unwrap method to be seen through.
func Chain(s Store) iter.Seq[Store] {
	return func(yield func(Store) bool) {
		for range maxChain {
			if s == nil || !yield(s) {
				return
			}
			u, ok := s.(interface{ Unwrap() Store })
			if !ok {
				return
			}
			s = u.Unwrap()
		}
	}
}

// maxChain bounds the walk of [Chain], in case a store unwraps to itself.
const maxChain = 64
