package policy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores"
	"github.com/sluicehq/sluice/stores/redisstore"
)

// TestIsStoreFailure classifies the errors any store may return, and the
// marks of core.ErrUnavailable. The Redis stores' own errors, each
// provoked on a real server, are classified in their packages' tests
// (TestClassify, TestClassifyCluster).
func TestIsStoreFailure(t *testing.T) {
	t.Parallel()
	wrap := func(err error) error { return fmt.Errorf("redisstore: gcra: %w", err) }
	mark := func(err error) error { return fmt.Errorf("%w: %w", core.ErrUnavailable, err) }
	tests := []struct {
		err  error
		want bool
	}{
		{nil, false},
		{wrap(context.Canceled), false},
		{wrap(context.DeadlineExceeded), true},
		{wrap(os.ErrDeadlineExceeded), true},
		{wrap(refused), true},
		{wrap(syscall.ECONNRESET), true},
		{wrap(syscall.EPIPE), true},
		{wrap(syscall.ECONNREFUSED), true},
		{wrap(errors.New("EOF")), false}, // only io.EOF itself
		{wrap(fmt.Errorf("read: %w", io.EOF)), true},
		{wrap(io.ErrUnexpectedEOF), true},
		{wrap(net.ErrClosed), true},
		// What a store marked: any request would fail alike.
		{wrap(core.ErrUnavailable), true},
		{wrap(mark(errors.New("connection pool timeout"))), true},
		{errors.Join(errors.New("x"), wrap(mark(errors.New("y")))), true},
		// What it did not: the request's error, whatever it says. The
		// breaker reads no client's errors; the stores mark them.
		{wrap(errors.New("connection pool timeout")), false},
		{wrap(redisstore.ErrMalformed), false},
		{wrap(core.ErrClosed), false},
		{wrap(core.ErrUnsupported), false},
		// A caller that gave up, or a request refused, never counts.
		{wrap(mark(context.Canceled)), false},
		{fmt.Errorf("%w: %w", core.ErrInvalidKey, refused), false},
		{fmt.Errorf("request 1: %w: %w", core.ErrInvalidRequest, mark(refused)), false},
	}
	for _, tt := range tests {
		if got := IsStoreFailure(tt.err); got != tt.want {
			t.Errorf("IsStoreFailure(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

// checker is a decorator whose client allows per-call deadlines up to
// max.
type checker struct {
	core.Store
	max time.Duration
}

func (c checker) Unwrap() core.Store { return c.Store }

var errCut = errors.New("the client cuts calls short")

func (c checker) CheckDeadline(d time.Duration) error {
	if d > c.max {
		return fmt.Errorf("%w: at %v", errCut, c.max)
	}
	return nil
}

// wrapper is a decorator that unwraps to its store.
type wrapper struct{ core.Store }

func (w wrapper) Unwrap() core.Store { return w.Store }

// TestCheckDeadline checks that NewBreaker asks every DeadlineChecker of
// the chain it wraps, through decorators that unwrap, whether the
// per-call deadline is one its client allows, and fails with
// ErrInvalidOption and the store's error where it is not; a store hidden
// behind a decorator that does not unwrap is not asked.
func TestCheckDeadline(t *testing.T) {
	t.Parallel()
	inner := stores.Func(func(context.Context, core.Request) (core.Decision, error) { return core.Decision{Allowed: true}, nil })
	tests := []struct {
		name   string
		remote core.Store
		fails  bool
	}{
		{"allows", checker{inner, 10 * time.Millisecond}, false},
		{"cuts short", checker{inner, 5 * time.Millisecond}, true},
		{"behind decorators", wrapper{wrapper{checker{inner, 5 * time.Millisecond}}}, true},
		{"the inner of two", checker{wrapper{checker{inner, 5 * time.Millisecond}}, time.Second}, true},
		{"hidden", stores.Func(checker{inner, 5 * time.Millisecond}.Apply), false},
	}
	for _, tt := range tests {
		b, err := NewBreaker(tt.remote, WithTimeout(8*time.Millisecond))
		switch {
		case tt.fails && (!errors.Is(err, ErrInvalidOption) || !errors.Is(err, errCut)):
			t.Errorf("%s: NewBreaker: %v; want ErrInvalidOption and the store's error", tt.name, err)
		case !tt.fails && err != nil:
			t.Errorf("%s: NewBreaker: %v", tt.name, err)
		case err == nil:
			b.Close()
		default:
			t.Logf("%s: %v", tt.name, err)
		}
	}
}
