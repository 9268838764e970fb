package benchkit

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"
)

// RawConn is one keep-alive HTTP/1.1 connection that writes prepared requests and reads the answers with a
// minimal parser (status line, Content-Length or chunked body). A load generator built on it spends a few
// microseconds of CPU per call where net/http's client spends tens (a goroutine hand-off each way, header
// maps, a body reader): on a 2-core machine that CPU delays reading the answers, and each delay would count
// as the server's latency.
type RawConn struct {
	conn net.Conn
	r    *bufio.Reader
	body []byte
	idle time.Time // since when it waits in a RawPool
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

// RoundTrip writes req, a whole request as RawRequest builds it, and reads the answer: its status code and
// body. The body is valid until the next call. After an error the connection is unusable.
func (c *RawConn) RoundTrip(req []byte) (int, []byte, error) {
	if _, err := c.conn.Write(req); err != nil {
		return 0, nil, err
	}
	line, err := c.r.ReadSlice('\n')
	if err != nil {
		return 0, nil, err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.1 ")) {
		return 0, nil, fmt.Errorf("not an HTTP/1.1 status line: %q", bytes.TrimSpace(line))
	}
	status, err := strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, nil, fmt.Errorf("status line %q: %w", bytes.TrimSpace(line), err)
	}
	length, chunked := -1, false
	for {
		line, err := c.r.ReadSlice('\n')
		if err != nil {
			return 0, nil, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		name, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if length, err = strconv.Atoi(string(value)); err != nil {
				return 0, nil, fmt.Errorf("Content-Length %q: %w", value, err)
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			chunked = bytes.EqualFold(value, []byte("chunked"))
		}
	}
	c.body = c.body[:0]
	if !chunked {
		if length < 0 {
			return 0, nil, errors.New("an answer without Content-Length on a keep-alive connection")
		}
		return status, c.body, c.read(length)
	}
	for {
		line, err := c.r.ReadSlice('\n')
		if err != nil {
			return 0, nil, err
		}
		size, err := strconv.ParseInt(string(bytes.TrimRight(line, "\r\n")), 16, 32)
		if err != nil {
			return 0, nil, fmt.Errorf("chunk size %q: %w", bytes.TrimSpace(line), err)
		}
		if size < 0 {
			return 0, nil, fmt.Errorf("chunk size %q below 0", bytes.TrimSpace(line))
		}
		if err := c.read(int(size)); err != nil {
			return 0, nil, err
		}
		if _, err := c.r.Discard(2); err != nil { // the chunk's CRLF
			return 0, nil, err
		}
		if size == 0 {
			return status, c.body, nil
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

	mu    sync.Mutex
	idle  []*RawConn
	slots chan struct{}
}

// Do sends req on an idle connection (or a new one) and returns the answer's status and a copy of its body.
// When a kept connection fails (the server may have closed it meanwhile), req is sent once more on a new one,
// as net/http's Transport does for a request it could not have delivered.
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
	if err != nil && reused && ctx.Err() == nil {
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
	deadline, _ := ctx.Deadline()
	if err := c.conn.SetDeadline(deadline); err != nil {
		_ = c.Close()
		return 0, nil, err
	}
	status, body, err := c.RoundTrip(req)
	if err != nil {
		_ = c.Close()
		return 0, nil, err
	}
	out := bytes.Clone(body)
	c.idle = time.Now()
	p.mu.Lock()
	p.idle = append(p.idle, c)
	p.mu.Unlock()
	return status, out, nil
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

// Close closes the idle connections.
func (p *RawPool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.idle {
		_ = c.Close()
	}
	p.idle = nil
}
