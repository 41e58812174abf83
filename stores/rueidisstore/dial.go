package rueidisstore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/redis/rueidis"
)

// maxProbeReply bounds the reply Dial reads to its PING: "+PONG", or an
// error such as "-NOAUTH Authentication required.".
const maxProbeReply = 512

// Dial connects to the Redis server at dst, over TLS if tlsConfig is not
// nil, and returns the connection once the server has answered a PING
// within ctx and the dialer's Timeout: it has the signature of
// [rueidis.ClientOption]'s DialCtxFn, which it is meant for.
//
//	opt.DialCtxFn = rueidisstore.Dial
//
// A server that accepts connections and never answers (a host that is
// going down, a proxy whose backend is gone, a failover that points an
// address at a silent node) then fails the dial, at the first caller's
// deadline or the dialer's timeout, whichever is sooner. With rueidis's
// own dial it passes, rueidis's handshake times out instead, and rueidis
// (v1.0.79) closes that connection with a one-second escape timer, while
// every call that arrived during the dial waits for it, whatever its
// context says: a second held for each, even behind a circuit breaker
// (docs/redis.md). Any reply is an answer: "+PONG", or an error such as
// NOAUTH, which the handshake that follows deals with. The PING costs one
// round trip a connection.
func Dial(ctx context.Context, dst string, dialer *net.Dialer, tlsConfig *tls.Config) (net.Conn, error) {
	if dialer == nil {
		dialer = &net.Dialer{}
	}
	timeout := dialer.Timeout
	if timeout <= 0 {
		timeout = rueidis.DefaultDialTimeout // as rueidis bounds its handshake
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var conn net.Conn
	var err error
	if tlsConfig != nil {
		conn, err = (&tls.Dialer{NetDialer: dialer, Config: tlsConfig}).DialContext(ctx, "tcp", dst)
	} else {
		conn, err = dialer.DialContext(ctx, "tcp", dst)
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, ended(ctx, err)
		}
		return nil, err
	}
	if err := probe(ctx, conn); err != nil {
		conn.Close()
		return nil, fmt.Errorf("rueidisstore: %s did not answer PING: %w", dst, err)
	}
	return conn, nil
}

// probe sends PING on conn and reads the reply's line, by ctx's deadline,
// or until ctx ends (a context may end without a deadline: a breaker's
// ends on the process's clock). It reads a byte at a time, so that
// nothing after the line is taken from the connection before rueidis
// reads it.
func probe(ctx context.Context, conn net.Conn) error {
	d, _ := ctx.Deadline()
	if err := conn.SetDeadline(d); err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	err := ping(conn)
	if !stop() {
		// ctx ended, and its function set a deadline in the past.
		return ended(ctx, err)
	}
	if err != nil {
		return err
	}
	return conn.SetDeadline(time.Time{})
}

// ended is the error of a dial whose context ended before the server
// answered: a timeout, whatever ended the context, since the calls that
// rueidis holds for the dial get it too, and for them the server did not
// answer in the time the dial had.
func ended(ctx context.Context, err error) error {
	return fmt.Errorf("the dial's context ended (%v; %v): %w", ctx.Err(), err, os.ErrDeadlineExceeded)
}

// ping sends PING on conn and reads the reply's line.
func ping(conn net.Conn) error {
	// A multibulk request, not the inline "PING\r\n": proxies that speak
	// RESP (Envoy's, twemproxy) may take only that.
	if _, err := conn.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return err
	}
	var b [1]byte
	for n := 0; b[0] != '\n'; n++ {
		if n == maxProbeReply {
			return errors.New("a reply longer than a PING's")
		}
		if _, err := io.ReadFull(conn, b[:]); err != nil {
			return err
		}
	}
	return nil
}
