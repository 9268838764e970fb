package report

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/gpuhub/gpuhub/services/gpuhub/internal/usageapi"
)

// The usage API's answers, as services/usage-api/openapi.yaml writes them (only the fields the report reads).

type window struct {
	Allocated   float64      `json:"allocated"`
	Used        float64      `json:"used"`
	UsedUnknown float64      `json:"usedUnknown"`
	From        *time.Time   `json:"from"`
	To          *time.Time   `json:"to"`
	ByClass     []classHours `json:"byClass"`
}

type classHours struct {
	Kind        string  `json:"kind"`
	Class       string  `json:"class"`
	Allocated   float64 `json:"allocated"`
	Used        float64 `json:"used"`
	UsedUnknown float64 `json:"usedUnknown"`
}

// userHours is a UserSummary of api/v1/users or a UserUsage of api/v1/users/{name}.
type userHours struct {
	Name           string             `json:"name"`
	User           string             `json:"user"`
	Groups         []string           `json:"groups"`
	GPUHours       map[string]*window `json:"gpuHours"`
	GPUHoursStatus string             `json:"gpuHoursStatus"`
	GPUHoursReason string             `json:"gpuHoursReason"`
}

type userPage struct {
	Items      []userHours `json:"items"`
	Pagination struct {
		Total int `json:"total"`
		Next  *struct {
			Offset int `json:"offset"`
		} `json:"next"`
	} `json:"_pagination"`
}

// client asks the usage API for GPU-hours.
type client struct {
	usageapi.Client
}

// errNoUser is a 404 of api/v1/users/{name} that the usage API answered itself.
var errNoUser = errors.New("no such user")

// pageSize is the most users the usage API answers in one page.
const pageSize = 1000

// listUsers reads every user of api/v1/users, page by page.
func (c *client) listUsers(ctx context.Context, progress *progress) ([]userHours, error) {
	var all []userHours
	for offset := 0; ; {
		var p userPage
		q := url.Values{"offset": {strconv.Itoa(offset)}, "limit": {strconv.Itoa(pageSize)}}
		if err := c.Get(ctx, "api/v1/users", q, &p); err != nil {
			return nil, err
		}
		if p.Items == nil {
			return nil, fmt.Errorf("the answer of %sapi/v1/users has no items: check --usage-url, %s", c.Base, usageapi.URLHint)
		}
		all = append(all, p.Items...)
		if p.Pagination.Next == nil || p.Pagination.Next.Offset <= offset {
			return all, nil
		}
		offset = p.Pagination.Next.Offset
		progress.report("read %d of %d users", len(all), p.Pagination.Total)
	}
}

// user reads one user's custom window [from, now] with its GPU classes.
func (c *client) user(ctx context.Context, name string, from time.Time) (userHours, error) {
	var u userHours
	q := url.Values{"history": {"false"}, "from": {from.UTC().Format(time.RFC3339)}}
	err := c.Get(ctx, "api/v1/users/"+url.PathEscape(name), q, &u)
	if nf := (*usageapi.NotFoundError)(nil); errors.As(err, &nf) && nf.Message != "" {
		err = fmt.Errorf("%w: %s", errNoUser, nf.Message)
	}
	if u.Name == "" {
		u.Name = u.User
	}
	return u, err
}

// parallel is how many users' windows the report asks for at once: the usage API answers each from its
// ledger database, so a few at a time keep it responsive for the Hub's users.
const parallel = 8

// customWindows reads the custom window of each named user, a few at a time, in names' order.
func (c *client) customWindows(ctx context.Context, names []string, from time.Time, progress *progress) ([]userHours, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	out := make([]userHours, len(names))
	var (
		mu       sync.Mutex
		firstErr error
		done     int
		wg       sync.WaitGroup
	)
	sem := make(chan struct{}, parallel)
	for i, name := range names {
		sem <- struct{}{}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			u, err := c.user(ctx, name, from)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = fmt.Errorf("user %s: %w", name, err)
					cancel()
				}
				return
			}
			out[i] = u
			done++
			progress.report("read the GPU-hours of %d of %d users", done, len(names))
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	return out, nil
}

// progress writes a line to w at most once a second, from the first second on: a short report says
// nothing, a long one shows that it moves.
type progress struct {
	w     io.Writer
	now   func() time.Time
	start time.Time
	last  time.Time
}

func (p *progress) report(format string, args ...any) {
	if p == nil || p.w == nil {
		return
	}
	t := p.now()
	if t.Sub(p.start) < time.Second || t.Sub(p.last) < time.Second {
		return
	}
	p.last = t
	_, _ = fmt.Fprintf(p.w, "gpuhub report: "+format+"...\n", args...)
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}
