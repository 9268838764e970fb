package benchkit

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// RawConn is one keep-alive HTTP/1.1 connection that writes prepared requests and reads the answers with a
// minimal parser (status line, Content-Length or chunked body). A load generator built on it spends a few
// microseconds of CPU per call where net/http's client spends tens (a goroutine hand-off each way, header
// maps, a body reader): on a 2-core machine that CPU delays reading the answers, and each delay would count
// as the server's latency.
type RawConn struct {
	conn    net.Conn
	r       *bufio.Reader
	body    []byte
	idle    time.Time // since when it waits in a RawPool
	closing bool      // the last call failed or its answer said "Connection: close"
}

// DialRaw connects to addr (host:port).
func DialRaw(ctx context.Context, addr string) (*RawConn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return &RawConn{conn: c, r: bufio.NewReaderSize(c, 16<<10)}, nil
}

// Close closes the connection.
func (c *RawConn) Close() error { return c.conn.Close() }

// errUnanswered marks a call that failed before any byte of an answer came: the request was not written, or
// the server had closed the connection (a kept connection past the server's idle timeout). Only such a call
// may be sent again: after any byte of an answer, the server may have acted on it.
var errUnanswered = errors.New("no answer")

// RoundTrip writes req, a whole request as RawRequest builds it, and reads the answer: its status code and
// body. The body is valid until the next call. After an error, or an answer with "Connection: close", the
// connection is unusable (Reusable says which).
func (c *RawConn) RoundTrip(req []byte) (int, []byte, error) {
	c.closing = true // until an answer is read whole
	if _, err := c.conn.Write(req); err != nil {
		return 0, nil, fmt.Errorf("%w: %w", errUnanswered, err)
	}
	head := bytes.HasPrefix(req, []byte("HEAD "))
	for first := true; ; first = false {
		status, length, chunked, closing, err := c.readHead(first)
		if err != nil {
			return 0, nil, err
		}
		if status >= 100 && status < 200 { // an interim answer (100 Continue): the real one follows
			continue
		}
		c.body = c.body[:0]
		switch {
		case head || status == http.StatusNoContent || status == http.StatusNotModified:
		case chunked:
			err = c.readChunked()
		case length < 0:
			err = errors.New("an answer without Content-Length on a keep-alive connection")
		default:
			err = c.read(length)
		}
		if err != nil {
			return 0, nil, err
		}
		c.closing = closing
		return status, c.body, nil
	}
}

// Reusable reports whether the last call left the connection ready for another.
func (c *RawConn) Reusable() bool { return !c.closing }

// readHead reads a status line and its headers. A first status line that does not come at all is
// errUnanswered.
func (c *RawConn) readHead(first bool) (status, length int, chunked, closing bool, err error) {
	line, err := c.r.ReadSlice('\n')
	if err != nil {
		if first && len(line) == 0 && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)) {
			err = fmt.Errorf("%w: %w", errUnanswered, err)
		}
		return 0, 0, false, false, err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.1 ")) {
		return 0, 0, false, false, fmt.Errorf("not an HTTP/1.1 status line: %q", bytes.TrimSpace(line))
	}
	if status, err = strconv.Atoi(string(line[9:12])); err != nil {
		return 0, 0, false, false, fmt.Errorf("status line %q: %w", bytes.TrimSpace(line), err)
	}
	length = -1
	for {
		line, err := c.r.ReadSlice('\n')
		if err != nil {
			return 0, 0, false, false, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			return status, length, chunked, closing, nil
		}
		name, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if length, err = strconv.Atoi(string(value)); err != nil {
				return 0, 0, false, false, fmt.Errorf("Content-Length %q: %w", value, err)
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			chunked = bytes.EqualFold(value, []byte("chunked"))
		case bytes.EqualFold(name, []byte("Connection")):
			closing = bytes.EqualFold(value, []byte("close"))
		}
	}
}

// readChunked reads a chunked body into c.body: chunks (their extensions ignored), then the trailer.
func (c *RawConn) readChunked() error {
	for {
		line, err := c.r.ReadSlice('\n')
		if err != nil {
			return err
		}
		sizeText, _, _ := bytes.Cut(bytes.TrimRight(line, "\r\n"), []byte(";"))
		size, err := strconv.ParseInt(string(bytes.TrimSpace(sizeText)), 16, 32)
		if err != nil {
			return fmt.Errorf("chunk size %q: %w", bytes.TrimSpace(line), err)
		}
		if size < 0 {
			return fmt.Errorf("chunk size %q below 0", bytes.TrimSpace(line))
		}
		if size == 0 {
			break
		}
		if err := c.read(int(size)); err != nil {
			return err
		}
		if _, err := c.r.Discard(2); err != nil { // the chunk's CRLF
			return err
		}
	}
	for { // the trailer's fields, up to an empty line
		line, err := c.r.ReadSlice('\n')
		if err != nil {
			return err
		}
		if len(bytes.TrimRight(line, "\r\n")) == 0 {
			return nil
		}
	}
}

// read appends n bytes of the answer to c.body.
func (c *RawConn) read(n int) error {
	for n > 0 {
		b, err := c.r.Peek(min(n, c.r.Size()))
		if len(b) == 0 && err != nil {
			return err
		}
		c.body = append(c.body, b...)
		_, _ = c.r.Discard(len(b))
		n -= len(b)
	}
	return nil
}

// RawRequest is an HTTP/1.1 request as it goes on the wire: the request line, Host, the headers given (name,
// value pairs), Content-Length when there is a body, and the body.
func RawRequest(method, host, path string, headers [][2]string, body []byte) []byte {
	b := fmt.Appendf(nil, "%s %s HTTP/1.1\r\nHost: %s\r\n", method, path, host)
	for _, h := range headers {
		b = fmt.Appendf(b, "%s: %s\r\n", h[0], h[1])
	}
	if body != nil {
		b = fmt.Appendf(b, "Content-Length: %d\r\n", len(body))
	}
	b = append(b, "\r\n"...)
	return append(b, body...)
}

// RawPool hands out keep-alive RawConns to one address, as net/http's Transport would: each concurrent
// caller gets a connection of its own, dialled when none is idle.
type RawPool struct {
	Addr string
	// Timeout bounds each call, from its start to its answer; 0 is one minute.
	Timeout time.Duration
	// IdleTimeout drops connections idle for longer, before a server's own idle timeout closes them (gpuhub's
	// servers: 120 s); 0 is 30 s.
	IdleTimeout time.Duration
	// MaxConns bounds the connections in use at once (callers beyond it wait their turn, as with net/http's
	// Transport.MaxConnsPerHost); 0 is no bound.
	MaxConns int

	mu     sync.Mutex
	idle   []*RawConn
	slots  chan struct{}
	closed bool
}

// Do sends req on an idle connection (or a new one) and returns the answer's status and a copy of its body.
// When a kept connection fails before any byte of an answer (the server had closed it meanwhile), req is sent
// once more on a new one, as net/http's Transport does for a request the server cannot have acted on.
//
// Timeout counts from the call, waiting for a connection included (as net/http's Client.Timeout does).
func (p *RawPool) Do(ctx context.Context, req []byte) (int, []byte, error) {
	timeout := p.Timeout
	if timeout == 0 {
		timeout = time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if p.MaxConns > 0 {
		p.mu.Lock()
		if p.slots == nil {
			p.slots = make(chan struct{}, p.MaxConns)
		}
		slots := p.slots
		p.mu.Unlock()
		select {
		case slots <- struct{}{}:
			defer func() { <-slots }()
		case <-ctx.Done():
			return 0, nil, fmt.Errorf("waiting for a connection to %s: %w", p.Addr, ctx.Err())
		}
	}
	c, reused, err := p.get(ctx)
	if err != nil {
		return 0, nil, err
	}
	status, body, err := p.do(ctx, c, req)
	if err != nil && reused && errors.Is(err, errUnanswered) && ctx.Err() == nil {
		if c, err = DialRaw(ctx, p.Addr); err != nil {
			return 0, nil, err
		}
		status, body, err = p.do(ctx, c, req)
	}
	return status, body, err
}

// do is one call on c within ctx's deadline: c goes back to the pool after an answer, and is closed after an
// error.
func (p *RawPool) do(ctx context.Context, c *RawConn, req []byte) (int, []byte, error) {
	deadline, _ := ctx.Deadline() // always set: Do's WithTimeout
	if err := c.conn.SetDeadline(deadline); err != nil {
		_ = c.Close()
		return 0, nil, err
	}
	// A caller that gives up (its context cancelled) ends the call at once, not at the deadline.
	stop := context.AfterFunc(ctx, func() { _ = c.conn.SetDeadline(time.Unix(1, 0)) })
	status, body, err := c.RoundTrip(req)
	reusable := stop() && err == nil && c.Reusable() // stop first: a cancelled call left the deadline past
	if err != nil {
		_ = c.Close()
		return 0, nil, err
	}
	out := bytes.Clone(body)
	p.put(c, reusable)
	return status, out, nil
}

// put keeps c for the next call, or closes it when it cannot serve one or the pool is closed.
func (p *RawPool) put(c *RawConn, reusable bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !reusable || p.closed {
		_ = c.Close()
		return
	}
	c.idle = time.Now()
	p.idle = append(p.idle, c)
}

// get takes the most recently used idle connection (closing those idle for too long) or dials a new one.
func (p *RawPool) get(ctx context.Context) (c *RawConn, reused bool, err error) {
	maxIdle := p.IdleTimeout
	if maxIdle == 0 {
		maxIdle = 30 * time.Second
	}
	p.mu.Lock()
	for len(p.idle) > 0 {
		c = p.idle[len(p.idle)-1]
		p.idle = p.idle[:len(p.idle)-1]
		if time.Since(c.idle) <= maxIdle {
			p.mu.Unlock()
			return c, true, nil
		}
		_ = c.Close()
	}
	p.mu.Unlock()
	c, err = DialRaw(ctx, p.Addr)
	return c, false, err
}

// Close closes the idle connections, and those of calls in flight when they end; the pool dials anew for
// later calls.
func (p *RawPool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, c := range p.idle {
		_ = c.Close()
	}
	p.idle = nil
}
