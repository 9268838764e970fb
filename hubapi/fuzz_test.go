package hubapi

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// FuzzUserJSON decodes a Hub user reply: never a panic, and what is accepted survives a round trip through
// our own encoding (the fields the services read mean the same after it), timestamps in UTC.
func FuzzUserJSON(f *testing.F) {
	f.Add(`{"name":"a","created":"2026-11-22T10:00:00Z","servers":{"":{"started":"2026-11-22T10:00:00.1Z"}}}`)
	f.Add(`{"name":"b","last_activity":"2026-11-22T10:00:00"}`)
	f.Add(`{"kind":"user","name":"c","admin":false,"groups":["students"],"server":null,"pending":null,"last_activity":null,` +
		`"servers":{"gpu":{"name":"gpu","ready":true,"pending":null,"stopped":false,"url":"/user/c/gpu/",` +
		`"started":"2026-11-22T10:00:00.123456Z","last_activity":"2026-11-22T10:00:05+01:00",` +
		`"user_options":{"profile":"mig-3g","n":1.5},"state":{"pod_name":"jupyter-c--gpu"}}}}`)
	f.Add(`{"name":"d","created":""}`)
	f.Add(`{"name":"e","created":"2026-13-01T00:00:00Z"}`)
	f.Fuzz(func(t *testing.T, s string) {
		var u User
		if err := json.Unmarshal([]byte(s), &u); err != nil {
			return
		}
		for what, ts := range map[string]*time.Time{"created": u.Created, "last_activity": u.LastActivity} {
			if ts != nil && ts.Location() != time.UTC {
				t.Errorf("%s %v is not in UTC", what, ts)
			}
		}
		for name, srv := range u.Servers {
			for what, ts := range map[string]*time.Time{"started": srv.Started, "last_activity": srv.LastActivity} {
				if ts != nil && ts.Location() != time.UTC {
					t.Errorf("server %q: %s %v is not in UTC", name, what, ts)
				}
			}
		}
		b, err := json.Marshal(u)
		if err != nil {
			t.Fatalf("an accepted user does not encode: %v", err)
		}
		var again User
		if err := json.Unmarshal(b, &again); err != nil {
			t.Fatalf("our own encoding %s does not decode: %v", b, err)
		}
		if diff := cmp.Diff(u, again, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("round trip (-first +second):\n%s", diff)
		}
	})
}

// FuzzRetryAfter parses the Retry-After header of a Hub or proxy: never negative, whatever the number.
func FuzzRetryAfter(f *testing.F) {
	now := time.Date(2026, 11, 22, 11, 0, 0, 0, time.UTC)
	for _, s := range []string{"", "5", " 2 ", "-1", "1.5", "soon", now.Add(time.Minute).Format(http.TimeFormat),
		"9999999999999", "Mon, 02 Jan 2006 15:04:05 GMT"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		if d := parseRetryAfter(v, now); d < 0 {
			t.Errorf("parseRetryAfter(%q) = %v, want >= 0", v, d)
		}
	})
}

// pagesTransport answers GET /users with the fuzzer's pages in order, then with an empty list, and records
// the offset and limit of each request.
type pagesTransport struct {
	pages   []string
	offsets []int
	limits  []int
}

func (p *pagesTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	q := r.URL.Query()
	off, err1 := strconv.Atoi(q.Get("offset"))
	lim, err2 := strconv.Atoi(q.Get("limit"))
	if err1 != nil || err2 != nil {
		off, lim = -1, -1
	}
	p.offsets, p.limits = append(p.offsets, off), append(p.limits, lim)
	body := "[]"
	if n := len(p.offsets) - 1; n < len(p.pages) {
		body = p.pages[n]
	}
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(body)), Request: r}, nil
}

// FuzzUsersPages pages through GET /users answered by arbitrary pages (paginated objects, bare lists,
// garbage): the walk ends, offsets only grow, limits stay positive, no user is yielded twice, and an error
// ends the walk.
func FuzzUsersPages(f *testing.F) {
	f.Add(`{"items":[{"name":"a"},{"name":"b"}],"_pagination":{"offset":0,"limit":2,"total":3,"next":{"offset":2,"limit":2}}}`+
		"\n---\n"+`{"items":[{"name":"c"}],"_pagination":{"offset":2,"limit":2,"total":3,"next":null}}`, 2)
	f.Add(`[{"name":"a"},{"name":"b"}]`+"\n---\n"+`[{"name":"b"},{"name":"c"}]`+"\n---\n"+`[{"name":"c"}]`, 2)
	f.Add(`{"items":[],"_pagination":{"next":{"offset":0,"limit":0}}}`, 0)
	f.Add(`{"items":[{"name":"a"}],"_pagination":{"next":{"offset":5,"limit":-3}}}`+"\n---\n"+`{"items":[{"name":"a"}]}`, 1)
	f.Add(`{"items":null}`+"\n---\n"+`<html>proxy error</html>`, 3)
	f.Fuzz(func(t *testing.T, body string, pageSize int) {
		pages := strings.Split(body, "\n---\n")
		if len(pages) > 16 {
			pages = pages[:16]
		}
		tr := &pagesTransport{pages: pages}
		c, err := New(Config{URL: "http://hub.invalid/hub/api", Token: "fuzz-token", MaxRetries: -1,
			HTTPClient: &http.Client{Transport: tr}, Sleep: func(context.Context, time.Duration) error { return nil }})
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		failed := false
		for u, err := range c.Users(t.Context(), ListUsersOptions{PageSize: pageSize % 1000}) {
			if failed {
				t.Fatal("the walk goes on after an error")
			}
			if err != nil {
				failed = true
				continue
			}
			if seen[u.Name] {
				t.Fatalf("user %q yielded twice", u.Name)
			}
			seen[u.Name] = true
		}
		if len(tr.offsets) > len(pages)+1 {
			t.Fatalf("%d requests for %d pages", len(tr.offsets), len(pages))
		}
		for i, off := range tr.offsets {
			if off < 0 || tr.limits[i] < 1 || (i > 0 && off <= tr.offsets[i-1]) {
				t.Fatalf("request %d: offset %d limit %d after offsets %v", i, off, tr.limits[i], tr.offsets[:i])
			}
		}
	})
}
