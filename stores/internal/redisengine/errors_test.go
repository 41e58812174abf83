package redisengine

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/redistest"
)

// TestCode reads the codes of real replies, as each client reports them,
// and marks those that any request would get.
func TestCode(t *testing.T) {
	t.Parallel()
	addr := redistest.Shared(t).Addr()
	ctx := context.Background()
	gc := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { gc.Close() })
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.Close)
	key := "rediserr:" + t.Name()
	if err := gc.HSet(ctx, key, "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	// Each command, sent by both clients, and what its reply reads as.
	tests := []struct {
		args   []string
		code   string
		reply  bool // an error reply at all
		marked bool
	}{
		{[]string{"EVALSHA", strings.Repeat("0", 40), "0"}, "NOSCRIPT", true, true},
		{[]string{"GET", key}, "WRONGTYPE", true, false},
		{[]string{"INCR", key, "extra"}, "ERR", true, false},
		// Replies without a code read as ERR: Redis gives this one
		// ERR's, which rueidis drops, as it does every "ERR "; it sends
		// the next without one.
		{[]string{"EVAL", "return redis.error_reply('boom')", "0"}, "ERR", true, false},
		{[]string{"EVAL", "return redis.error_reply('user_script:1: oops')", "0"}, "ERR", true, false},
		{[]string{"GET", key + ":missing"}, "", false, false}, // nil, not an error
	}
	for _, tt := range tests {
		gerr := gc.Do(ctx, anys(tt.args)...).Err()
		rerr := rc.Do(ctx, rc.B().Arbitrary(tt.args...).Build()).Error()
		if !tt.reply {
			// Each client reports a nil reply as an error of its own
			// (rueidis.Nil, redis.Nil): no reply, and not marked.
			for _, err := range []error{gerr, rerr} {
				if code, ok := Code(err); ok {
					t.Errorf("%q: Code(%v) = %q, true; want no reply", tt.args, err, code)
				}
				if errors.Is(mark(err, nil), core.ErrUnavailable) {
					t.Errorf("%q: Mark(%v) marked it", tt.args, err)
				}
			}
			continue
		}
		for _, c := range []struct {
			client string
			err    error
			code   string
		}{{"go-redis", gerr, tt.code}, {"rueidis", rerr, tt.code}} {
			err := fmt.Errorf("store: %w", c.err)
			code, ok := Code(err)
			if !ok || code != c.code {
				t.Errorf("%s %q: Code(%v) = %q, %v; want %q, true", c.client, tt.args, err, code, ok, c.code)
			}
			marked := mark(err, nil)
			if got := errors.Is(marked, core.ErrUnavailable); got != tt.marked {
				t.Errorf("%s %q: Mark(%v) = %v, marked %v; want %v", c.client, tt.args, err, marked, got, tt.marked)
			}
			if !errors.Is(marked, c.err) {
				t.Errorf("%s %q: Mark(%v) = %v, which lost the reply", c.client, tt.args, err, marked)
			}
		}
	}
}

func anys(args []string) []any {
	out := make([]any, len(args))
	for i, a := range args {
		out[i] = a
	}
	return out
}

// TestMark marks a client's own errors it is given as down, a failed TLS
// handshake, and nothing twice; it leaves the rest alone.
func TestMark(t *testing.T) {
	t.Parallel()
	down := errors.New("pool timeout")
	ca := redistest.NewCA(t, "rediserr")
	srv := redistest.Start(t, redistest.WithTLS(ca))
	conn, handshake := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", srv.TLSAddr(), redistest.NewCA(t, "another").ClientConfig())
	if handshake == nil {
		conn.Close()
		t.Fatal("a handshake with another CA succeeded")
	}
	// A server that requires a client certificate refuses a client with
	// none by an alert, which TLS 1.3 delivers after the client's
	// handshake has ended: the client reads it (a client that writes
	// first may meet only the reset of the closed connection).
	strict := redistest.Start(t, redistest.WithTLS(ca), redistest.WithClientAuth())
	var refused error
	if conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", strict.TLSAddr(), ca.ClientConfig()); err != nil {
		refused = err
	} else {
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		_, refused = conn.Read(make([]byte, 16))
		conn.Close()
	}
	if refused == nil {
		t.Fatal("a server requiring client certificates answered a client without one")
	}
	for _, tt := range []struct {
		err    error
		marked bool
	}{
		{fmt.Errorf("get: %w", down), true},
		{handshake, true},
		{refused, true},
		{mark(down, []error{down}), true},
		{errors.New("pool timeout"), false}, // not the client's error, only its text
		{context.DeadlineExceeded, false},   // policy knows timeouts by type
		{context.Canceled, false},
	} {
		got := mark(tt.err, []error{down})
		if errors.Is(got, core.ErrUnavailable) != tt.marked || !errors.Is(got, tt.err) {
			t.Errorf("Mark(%v) = %v, want marked %v, keeping the error", tt.err, got, tt.marked)
		}
		if n := strings.Count(got.Error(), core.ErrUnavailable.Error()); n > 1 {
			t.Errorf("Mark(%v) = %v, marked %d times", tt.err, got, n)
		}
	}
	if mark(nil, []error{down}) != nil {
		t.Error("Mark(nil) is not nil")
	}
}
