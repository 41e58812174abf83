package redisengine

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/core"
)

// goredisReply is an error reply as go-redis reports it: its reply types
// have a RedisError method.
type goredisReply interface {
	error
	RedisError()
}

// rueidisReply is an error reply as rueidis reports it: a *RedisError,
// which is also how rueidis reports a nil reply (IsNil).
type rueidisReply interface {
	error
	IsNil() bool
	IsMoved() (string, bool)
}

// Code returns the code of the Redis error reply on err's chain, such as
// "NOPERM", "MOVED" or "ERR", and true; or "", false if err holds no
// error reply. A code is the reply's first word, in capitals; a reply
// without one is an ERR, Redis's generic code, as it is for Redis itself
// (and rueidis drops the "ERR " that starts an ERR reply's text).
// go-redis's own errors that it types as replies ("redis: nil", "redis:
// transaction failed") are not replies.
func Code(err error) (string, bool) {
	msg, ok := reply(err)
	if !ok {
		return "", false
	}
	return code(msg), true
}

// reply returns the text of the Redis error reply on err's chain.
func reply(err error) (string, bool) {
	if r, ok := errors.AsType[goredisReply](err); ok {
		msg := r.Error()
		return msg, !strings.HasPrefix(msg, "redis: ")
	}
	if r, ok := errors.AsType[rueidisReply](err); ok && !r.IsNil() {
		return r.Error(), true
	}
	return "", false
}

// code returns a reply's code (see [Code]).
func code(msg string) string {
	if word, _, _ := strings.Cut(msg, " "); isCode(word) {
		return word
	}
	return "ERR"
}

// isCode reports whether word reads as a Redis error code: three or more
// capitals, as every code Redis sends is (ASK, ERR, OOM, NOPERM...).
func isCode(word string) bool {
	if len(word) < 3 {
		return false
	}
	for i := range len(word) {
		if word[i] < 'A' || word[i] > 'Z' {
			return false
		}
	}
	return true
}

// replies is the one list of Redis's error replies sluice knows, by
// code: whether each means that any request would get it while the
// server, its cluster or the client's user stays as it is (the store is
// unavailable). Every other reply (WRONGTYPE, CROSSSLOT, a script's
// error, any other ERR) is the request's: another request would not get
// it. A code not listed reads as "redis" in telemetry, so that a script's
// own error_reply texts cannot grow the attribute's values.
var replies = map[string]bool{
	// The server: loading its data after a restart, running a slow
	// script, a replica (after a failover, until clients follow) or one
	// cut off from its primary, short of the replicas a write needs,
	// refusing writes after a failed snapshot, out of memory.
	"LOADING": true, "BUSY": true, "READONLY": true, "MASTERDOWN": true,
	"NOREPLICAS": true, "MISCONF": true, "OOM": true,
	// The cluster: a slot without a master, or moving between nodes, with
	// redirections the client could not follow to the end.
	"CLUSTERDOWN": true, "TRYAGAIN": true, "MOVED": true, "ASK": true,
	// The client's user may not run sluice's scripts on its keys, or is
	// not a user the server knows.
	"NOPERM": true, "NOAUTH": true, "WRONGPASS": true,
	// Still missing after the store's EVAL: the server keeps no script.
	"NOSCRIPT": true,
	// The request's (ERR but for scriptACL below).
	"ERR": false, "WRONGTYPE": false, "BUSYKEY": false, "CROSSSLOT": false,
	"EXECABORT": false, "UNBLOCKED": false, "NOPROTO": false, "NOTBUSY": false,
}

// otherReply is the Type of a reply whose code is not in replies.
const otherReply = "redis"

// scriptACL starts the ERR reply of Redis 7.0 to a script whose
// user may not run a command of it or touch a key of it ("The user
// executing the script can't run this command or subcommand", "... can't
// access at least one of the keys"): a read-only user's, for every
// script that writes. Should a later Redis answer NOPERM instead, that
// code is marked too.
const scriptACL = "The user executing the script can't "

// classifyReply returns the Type of an error reply and whether it means
// the store is unavailable (see replies).
func classifyReply(msg string) (typ string, unavailable bool) {
	c := code(msg)
	unavailable, known := replies[c]
	if !known {
		return otherReply, false
	}
	if c == "ERR" {
		unavailable = strings.HasPrefix(strings.TrimPrefix(msg, "ERR "), scriptACL)
	}
	return c, unavailable
}

// failedTLS reports whether err is a TLS handshake that failed: the
// server's certificate was not trusted or not for this host, the server
// refused the client's (an alert), or what answered was not TLS. Every
// connection to that server fails alike until someone changes a
// certificate or the client's configuration.
func failedTLS(err error) bool {
	if _, ok := errors.AsType[*tls.CertificateVerificationError](err); ok {
		return true
	}
	if _, ok := errors.AsType[tls.AlertError](err); ok {
		return true
	}
	if _, ok := errors.AsType[tls.RecordHeaderError](err); ok {
		return true
	}
	// An alert the server sent (it refused the client's certificate, or
	// sent none it was asked for): crypto/tls reports it as a "remote
	// error" of the connection.
	if oe, ok := errors.AsType[*net.OpError](err); ok && oe.Op == "remote error" {
		return true
	}
	if _, ok := errors.AsType[x509.UnknownAuthorityError](err); ok {
		return true
	}
	if _, ok := errors.AsType[x509.HostnameError](err); ok {
		return true
	}
	_, ok := errors.AsType[x509.CertificateInvalidError](err)
	return ok
}

// mark marks err where the store receives it, with a [core.StoreError]:
// an error reply with its Type (its code, see replies) and whether it
// means that the store cannot decide any request now; a TLS handshake
// that failed, or an error on down (the client's own errors of that
// kind: go-redis's pool timeout, rueidis's closed client), as
// unavailable. It returns any other error as it is: nil, an error
// already marked, a context's error, and the request's errors. Timeouts
// and broken connections are returned as they are too: core.Classify
// knows them by their types, from any store.
func mark(err error, down []error) error {
	if err == nil {
		return nil
	}
	if _, ok := errors.AsType[*core.StoreError](err); ok {
		return err
	}
	if msg, ok := reply(err); ok {
		typ, unavailable := classifyReply(msg)
		return &core.StoreError{Type: typ, Unavailable: unavailable, Err: err}
	}
	if failedTLS(err) || slices.ContainsFunc(down, func(d error) bool { return errors.Is(err, d) }) {
		return &core.StoreError{Unavailable: true, Err: err}
	}
	return err
}

// tryAgainDelays are the waits before each retry of a call Redis answered
// TRYAGAIN: 7 ms in all, well within the breaker's default 16 ms deadline.
var tryAgainDelays = [...]time.Duration{time.Millisecond, 2 * time.Millisecond, 4 * time.Millisecond}

// RetryTryAgain reports whether a call that failed with err should be
// sent again, as retry n (from 0) of it, after waiting: err is a TRYAGAIN
// reply, n is below the retries allowed, and ctx did not end during the
// wait. Redis answers TRYAGAIN to a call on several keys of a slot that
// is moving between two nodes while its keys are split between them
// (Cluster resharding): it ran nothing, and the call succeeds once the
// slot's keys have moved, usually within a few milliseconds. A call that
// still gets TRYAGAIN after the retries, or whose caller's deadline comes
// first, returns it, a store failure.
func retryTryAgain(ctx context.Context, err error, n int) bool {
	if n >= len(tryAgainDelays) {
		return false
	}
	if c, ok := Code(err); !ok || c != "TRYAGAIN" {
		return false
	}
	t := time.NewTimer(tryAgainDelays[n])
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
