package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// ErrMalformed is the error, wrapped with detail, for a reply that is not
// well-formed RESP2. Test with errors.Is.
var ErrMalformed = errors.New("redistest: malformed reply")

// Limits on what readReply accepts, so that a corrupt stream yields an error
// instead of a huge allocation or a deep recursion. Redis's own bulk limit is
// 512 MiB (proto-max-bulk-len).
const (
	maxBulkLen = 512 << 20
	maxDepth   = 64
)

// Kind is the type of a [Reply].
type Kind int

// The kinds of RESP2 reply. The zero [Reply] has kind [KindNil].
const (
	// KindNil is a nil bulk string ($-1) or a nil array (*-1), as GET of
	// a missing key or a timed-out BLPOP reply.
	KindNil Kind = iota
	// KindSimpleString is a status reply such as OK or PONG.
	KindSimpleString
	// KindError is an error reply nested in an array (as in an EXEC
	// result). [Server.Do] returns a top-level error reply as a
	// *[RedisError], never as a Reply of this kind.
	KindError
	// KindInteger is a signed 64-bit integer.
	KindInteger
	// KindBulkString is a binary-safe string, possibly empty.
	KindBulkString
	// KindArray is an array of replies, possibly nested and possibly empty.
	KindArray
)

var kindNames = [...]string{"nil", "simple string", "error", "integer", "bulk string", "array"}

// String returns the kind's name, such as "bulk string".
func (k Kind) String() string {
	if k < 0 || int(k) >= len(kindNames) {
		return "Kind(" + strconv.Itoa(int(k)) + ")"
	}
	return kindNames[k]
}

// Reply is one RESP2 reply. Its accessors return an error, never panic, when
// the reply is not of the kind asked for. The zero Reply is a nil reply.
// A Reply is an immutable value, safe to share between goroutines.
type Reply struct {
	kind  Kind
	str   string // simple string, error message or bulk string
	num   int64
	elems []Reply
}

// Kind returns the reply's kind.
func (r Reply) Kind() Kind { return r.kind }

// IsNil reports whether the reply is a nil bulk string or nil array.
func (r Reply) IsNil() bool { return r.kind == KindNil }

// String returns the text of a simple string or bulk string reply. It
// returns an error for any other kind, including nil, so a missing key is
// told apart from an empty value.
func (r Reply) String() (string, error) {
	switch r.kind {
	case KindSimpleString, KindBulkString:
		return r.str, nil
	}
	return "", r.wrongKind("string")
}

// Int returns the value of an integer reply, or of a bulk string reply that
// holds a base-10 integer (as GET of a counter does). It returns an error for
// any other reply.
func (r Reply) Int() (int64, error) {
	switch r.kind {
	case KindInteger:
		return r.num, nil
	case KindBulkString:
		n, err := strconv.ParseInt(r.str, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("redistest: bulk string %q is not an integer", r.str)
		}
		return n, nil
	}
	return 0, r.wrongKind("integer")
}

// Array returns the elements of an array reply. It returns an error for any
// other kind, including a nil array.
func (r Reply) Array() ([]Reply, error) {
	if r.kind != KindArray {
		return nil, r.wrongKind("array")
	}
	return r.elems, nil
}

// Strings returns the elements of an array reply whose elements are all
// simple or bulk strings, as CONFIG GET or KEYS reply.
func (r Reply) Strings() ([]string, error) {
	elems, err := r.Array()
	if err != nil {
		return nil, err
	}
	out := make([]string, len(elems))
	for i, e := range elems {
		if out[i], err = e.String(); err != nil {
			return nil, fmt.Errorf("element %d: %w", i, err)
		}
	}
	return out, nil
}

// Err returns a *[RedisError] for a reply of kind [KindError] and nil for
// any other reply.
func (r Reply) Err() error {
	if r.kind != KindError {
		return nil
	}
	return &RedisError{Msg: r.str}
}

func (r Reply) wrongKind(want string) error {
	return fmt.Errorf("redistest: reply is %v (%v), not %s", r.kind, r, want)
}

// Format writes the reply as redis-cli would show it on one line: OK,
// "bulk", (integer) 3, (nil), (error) ERR ..., and arrays as [a b]. It makes
// fmt's %v, %s and %q print a Reply readably whatever the verb.
func (r Reply) Format(f fmt.State, verb rune) {
	var b strings.Builder
	r.appendTo(&b)
	io.WriteString(f, b.String())
}

func (r Reply) appendTo(b *strings.Builder) {
	switch r.kind {
	case KindNil:
		b.WriteString("(nil)")
	case KindSimpleString:
		b.WriteString(r.str)
	case KindError:
		b.WriteString("(error) " + r.str)
	case KindInteger:
		b.WriteString("(integer) " + strconv.FormatInt(r.num, 10))
	case KindBulkString:
		b.WriteString(strconv.Quote(r.str))
	case KindArray:
		b.WriteByte('[')
		for i, e := range r.elems {
			if i > 0 {
				b.WriteByte(' ')
			}
			e.appendTo(b)
		}
		b.WriteByte(']')
	default:
		b.WriteString(r.kind.String())
	}
}

// RedisError is an error reply from Redis, such as "ERR unknown command" or
// "MOVED 3999 127.0.0.1:7001". Find it with errors.As.
type RedisError struct {
	// Msg is the reply's text without the leading '-', for example
	// "WRONGTYPE Operation against a key holding the wrong kind of value".
	Msg string
}

// Error returns Msg.
func (e *RedisError) Error() string { return e.Msg }

// Prefix returns the error's first word, such as "ERR", "MOVED" or
// "LOADING".
func (e *RedisError) Prefix() string {
	prefix, _, _ := strings.Cut(e.Msg, " ")
	return prefix
}

// writeCommand writes args as a RESP2 array of bulk strings.
func writeCommand(w *bufio.Writer, args []string) error {
	w.WriteByte('*')
	w.WriteString(strconv.Itoa(len(args)))
	w.WriteString("\r\n")
	for _, a := range args {
		w.WriteByte('$')
		w.WriteString(strconv.Itoa(len(a)))
		w.WriteString("\r\n")
		w.WriteString(a)
		w.WriteString("\r\n")
	}
	return w.Flush()
}

// readReply reads one reply. An error reply is returned as a Reply of kind
// KindError, not as an error; the error is for I/O and malformed input.
func readReply(r *bufio.Reader) (Reply, error) {
	return readReplyDepth(r, 0)
}

func readReplyDepth(r *bufio.Reader, depth int) (Reply, error) {
	if depth > maxDepth {
		return Reply{}, fmt.Errorf("%w: arrays nested deeper than %d", ErrMalformed, maxDepth)
	}
	line, err := readLine(r)
	if err != nil {
		return Reply{}, err
	}
	if line == "" {
		return Reply{}, fmt.Errorf("%w: empty line", ErrMalformed)
	}
	body := line[1:]
	switch line[0] {
	case '+':
		return Reply{kind: KindSimpleString, str: body}, nil
	case '-':
		return Reply{kind: KindError, str: body}, nil
	case ':':
		n, err := strconv.ParseInt(body, 10, 64)
		if err != nil {
			return Reply{}, fmt.Errorf("%w: integer %q", ErrMalformed, body)
		}
		return Reply{kind: KindInteger, num: n}, nil
	case '$':
		n, err := parseLength(body, maxBulkLen)
		if err != nil || n < 0 {
			return Reply{}, err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return Reply{}, fmt.Errorf("%w: bulk string of %d bytes: %w", ErrMalformed, n, eofUnexpected(err))
		}
		if buf[n] != '\r' || buf[n+1] != '\n' {
			return Reply{}, fmt.Errorf("%w: bulk string of %d bytes not ended by CRLF", ErrMalformed, n)
		}
		return Reply{kind: KindBulkString, str: string(buf[:n])}, nil
	case '*':
		n, err := parseLength(body, maxBulkLen)
		if err != nil || n < 0 {
			return Reply{}, err
		}
		// Each element takes at least 3 bytes, but the stream may lie
		// about n: grow as elements arrive instead of trusting it.
		elems := make([]Reply, 0, min(n, 1024))
		for range n {
			e, err := readReplyDepth(r, depth+1)
			if err != nil {
				return Reply{}, err
			}
			elems = append(elems, e)
		}
		return Reply{kind: KindArray, elems: elems}, nil
	}
	return Reply{}, fmt.Errorf("%w: unknown type byte %q", ErrMalformed, line[0])
}

// parseLength parses the length of a bulk string or array. For -1 it
// returns -1 and a nil error, and the caller returns the zero (nil) Reply.
func parseLength(s string, limit int) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < -1 || n > limit {
		return 0, fmt.Errorf("%w: length %q", ErrMalformed, s)
	}
	return n, nil
}

// readLine reads up to CRLF and returns the line without it.
func readLine(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		if line != "" {
			return "", fmt.Errorf("%w: line %q: %w", ErrMalformed, line, eofUnexpected(err))
		}
		return "", err
	}
	if len(line) < 2 || line[len(line)-2] != '\r' {
		return "", fmt.Errorf("%w: line %q not ended by CRLF", ErrMalformed, line)
	}
	return line[:len(line)-2], nil
}

func eofUnexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
