// Package callqueue gathers the calls of concurrent callers into batches
// that a Redis store sends together: callers queue their calls, and up to
// a few senders, each a goroutine that lives only while the queue has
// work, take the whole queue and send it at once. Under load a batch holds
// what arrived during the previous batch's round trip, so a round trip
// carries many decisions; a lone call is a batch of one.
package callqueue
