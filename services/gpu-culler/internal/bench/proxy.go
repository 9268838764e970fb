package bench

import (
	"maps"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/gpuhub/gpuhub/services/internal/benchkit"
)

// Burst is a run of Hub requests with no quiet gap in between: one culler pass as the Hub sees it.
type Burst struct {
	Start, End time.Time // the first request's arrival, the last response's end
	Requests   int
	Ops        map[string]int
	// HubCPU is the Hub process's CPU time (user + system) from Start to End.
	HubCPU time.Duration
}

// Counter is a reverse proxy in front of the Hub's API that counts what a culler asks: requests by operation,
// and bursts (a pass) with the Hub's CPU time during each.
type Counter struct {
	proxy  *httputil.ReverseProxy
	hubPid int
	gap    time.Duration
	now    func() time.Time
	cpu    func(pid int) time.Duration

	mu       sync.Mutex
	ops      map[string]int
	inflight int
	lastEnd  time.Time
	bursts   []Burst
	cpu0     time.Duration
}

// NewCounter proxies to the Hub at hubURL (http://host:port); a burst ends after gap without a request.
func NewCounter(hubURL string, hubPid int, gap time.Duration) (*Counter, error) {
	target, err := url.Parse(hubURL)
	if err != nil {
		return nil, err
	}
	c := &Counter{hubPid: hubPid, gap: gap, now: time.Now, cpu: benchkit.ProcessCPU, ops: map[string]int{}}
	c.proxy = &httputil.ReverseProxy{
		Rewrite:   func(r *httputil.ProxyRequest) { r.SetURL(target); r.Out.Host = r.In.Host },
		Transport: &http.Transport{MaxIdleConnsPerHost: 128, DisableCompression: true},
	}
	return c, nil
}

func (c *Counter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.begin(Op(r.Method, r.URL.Path))
	defer c.end()
	c.proxy.ServeHTTP(w, r)
}

func (c *Counter) begin(op string) {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inflight == 0 && (len(c.bursts) == 0 || now.Sub(c.lastEnd) > c.gap) {
		c.cpu0 = c.cpu(c.hubPid)
		c.bursts = append(c.bursts, Burst{Start: now, End: now, Ops: map[string]int{}})
	}
	c.inflight++
	c.ops[op]++
	b := &c.bursts[len(c.bursts)-1]
	b.Requests++
	b.Ops[op]++
}

func (c *Counter) end() {
	now := c.now()
	cpu := c.cpu(c.hubPid)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inflight--
	c.lastEnd = now
	b := &c.bursts[len(c.bursts)-1]
	b.End, b.HubCPU = now, cpu-c.cpu0
}

// Completed is how many bursts have ended (no request in flight for longer than the gap).
func (c *Counter) Completed() int {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(c.bursts)
	if n > 0 && (c.inflight > 0 || now.Sub(c.lastEnd) <= c.gap) {
		n--
	}
	return n
}

// Take returns the counts and bursts since the last Take and starts afresh. A burst still going on is
// returned as it is so far.
func (c *Counter) Take() (ops map[string]int, bursts []Burst) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ops, bursts = c.ops, c.bursts
	for i := range bursts {
		bursts[i].Ops = maps.Clone(bursts[i].Ops)
	}
	c.ops, c.bursts = map[string]int{}, nil
	if c.inflight > 0 && len(bursts) > 0 {
		last := bursts[len(bursts)-1]
		c.bursts = []Burst{{Start: last.Start, End: last.End, Ops: map[string]int{}}}
	}
	return ops, bursts
}

// Op names a Hub API request by method and route, the user's name left out: "GET /users", "DELETE
// /users/{name}/server".
func Op(method, path string) string {
	p := strings.TrimPrefix(path, "/hub/api")
	parts := strings.Split(strings.Trim(p, "/"), "/")
	if len(parts) >= 2 && parts[0] == "users" {
		parts[1] = "{name}"
		if len(parts) >= 4 && parts[2] == "servers" {
			parts[3] = "{server}"
		}
	}
	return method + " /" + strings.Join(parts, "/")
}
