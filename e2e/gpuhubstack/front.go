package gpuhubstack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"sync/atomic"
	"time"
)

// Front stands for the chart's Service in front of a service's replicas: the Hub service URL (and every client
// that names the service) reaches it, and a request goes to the first replica that takes the connection, as a
// Service's endpoints leave out a pod that is gone. With one port it is a plain reverse proxy.
type Front struct {
	Port int
	srv  *http.Server
}

// NewFront listens on a free loopback port and relays each request to 127.0.0.1:<port> of ports, in that order:
// the first replica while it is up.
func NewFront(ctx context.Context, ports []int) (*Front, error) { return newFront(ctx, ports, false) }

// NewBalancedFront is NewFront that starts each request at the next replica in turn, as kube-proxy spreads a
// Service's connections over its endpoints: every replica gets requests, a standby's relaying included.
func NewBalancedFront(ctx context.Context, ports []int) (*Front, error) {
	return newFront(ctx, ports, true)
}

func newFront(ctx context.Context, ports []int, balanced bool) (*Front, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("front for replicas %v: %w", ports, err)
	}
	hosts := make([]string, len(ports))
	for i, p := range ports {
		hosts[i] = fmt.Sprintf("127.0.0.1:%d", p)
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = "http", hosts[0]
		},
		Transport:     &failover{hosts: hosts, rt: http.DefaultTransport, balanced: balanced},
		FlushInterval: -1, // progress streams and NDJSON pass through as they come
		// The Hub checks its services at start, before the replicas run: a 502 says enough.
		ErrorLog: log.New(io.Discard, "", 0),
	}
	f := &Front{Port: ln.Addr().(*net.TCPAddr).Port, srv: &http.Server{Handler: rp, ReadHeaderTimeout: 10 * time.Second}}
	go func() { _ = f.srv.Serve(ln) }()
	return f, nil
}

// Close stops listening and drops open connections.
func (f *Front) Close() { _ = f.srv.Close() }

// failover sends a request to each host in turn until one takes the connection (a dead replica refuses it),
// from the first host or, balanced, from the next one after the last request's.
type failover struct {
	hosts    []string
	rt       http.RoundTripper
	balanced bool
	next     atomic.Uint64
}

func (f *failover) RoundTrip(r *http.Request) (*http.Response, error) {
	var body []byte
	if r.Body != nil {
		b, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			return nil, err
		}
		body = b
	}
	start := 0
	if f.balanced {
		start = int(f.next.Add(1) % uint64(len(f.hosts)))
	}
	var last error
	for i := range f.hosts {
		h := f.hosts[(start+i)%len(f.hosts)]
		out := r.Clone(r.Context())
		out.URL.Host, out.Host = h, h
		out.Body, out.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		resp, err := f.rt.RoundTrip(out)
		if err == nil {
			return resp, nil
		}
		last = err
		var op *net.OpError
		if !errors.As(err, &op) || op.Op != "dial" {
			return nil, err
		}
	}
	return nil, last
}
