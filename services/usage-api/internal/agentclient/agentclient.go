// Package agentclient builds the HTTP client the usage API polls the gpu-agents with. It sends a projected
// ServiceAccount token issued for the agents' audience (gpuhub-agent), read from the file the kubelet keeps
// fresh, and never the usage API's API-server credential: a token an agent sees is worthless against the API
// server, and the API server's credentials are worthless at an agent.
package agentclient

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
)

// DefaultTokenFile is where the chart mounts the projected token (usage Deployment, volume agent-token).
const DefaultTokenFile = "/var/run/secrets/gpuhub/agent-token/token"

// rereadEvery bounds how long a token is used without reading the file again, even when its metadata looks
// unchanged; the kubelet rotates a 1 h token after about 48 min, so a minute leaves ample margin.
const rereadEvery = time.Minute

// Options configure New.
type Options struct {
	// TokenFile holds the token; empty sends none (agents run with --snapshot-auth=none).
	TokenFile string
	// Timeout of one request; default 2 s.
	Timeout time.Duration
	// Transport; default a clone of http.DefaultTransport without a proxy (agents are pods on the cluster
	// network: an HTTP(S)_PROXY set for the Hub or the database must not see the token).
	Transport http.RoundTripper
	Now       func() time.Time
}

// New returns a client that adds "Authorization: Bearer <token>" to each request and does not follow
// redirects (the token goes on every request it sends, so a redirect would carry it wherever an answering
// pod pointed it). A poll fails when the token cannot be read; an agent is never asked without it.
func New(o Options) *http.Client {
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Second
	}
	if o.Transport == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.Proxy = nil
		o.Transport = t
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	rt := o.Transport
	if o.TokenFile != "" {
		rt = &bearer{next: o.Transport, token: &tokenFile{path: o.TokenFile, now: o.Now}}
	}
	return &http.Client{
		Timeout:       o.Timeout,
		Transport:     rt,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

type bearer struct {
	next  http.RoundTripper
	token *tokenFile
}

func (b *bearer) RoundTrip(req *http.Request) (*http.Response, error) {
	tok, err := b.token.get()
	if err != nil {
		if req.Body != nil {
			_ = req.Body.Close() // RoundTripper's contract, also on error
		}
		return nil, err
	}
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+tok)
	return b.next.RoundTrip(req)
}

// tokenFile reads the token on first use, again when the file changes (the kubelet swaps a symlink to a new
// file), and at least every rereadEvery. The token is never logged or put in an error.
type tokenFile struct {
	path string
	now  func() time.Time

	mu     sync.Mutex
	token  string
	info   os.FileInfo
	readAt time.Time
}

func (f *tokenFile) get() (string, error) {
	info, err := os.Stat(f.path)
	if err != nil {
		return "", fmt.Errorf("agent token: %w", err)
	}
	now := f.now()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.token != "" && f.info != nil && os.SameFile(f.info, info) && f.info.ModTime().Equal(info.ModTime()) &&
		f.info.Size() == info.Size() && now.Sub(f.readAt) < rereadEvery {
		return f.token, nil
	}
	b, err := os.ReadFile(f.path)
	if err != nil {
		return "", fmt.Errorf("agent token: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("agent token: %s is empty", f.path)
	}
	if strings.ContainsAny(tok, "\r\n") {
		return "", fmt.Errorf("agent token: %s holds more than one line", f.path)
	}
	f.token, f.info, f.readAt = tok, info, now
	return tok, nil
}
