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
	"github.com/gpuhub/gpuhub/services/internal/contract"
)

// client asks the usage API for GPU-hours.
type client struct {
	usageapi.Client
}

// errNoUser is a 404 of api/v1/users/{name} that the usage API answered itself.
var errNoUser = errors.New("no such user")

// pageSize is the most users the usage API answers in one page.
const pageSize = 1000

// listUsers reads every user of api/v1/users, page by page.
func (c *client) listUsers(ctx context.Context, progress *progress) ([]contract.UserSummary, error) {
	var all []contract.UserSummary
	for offset := 0; ; {
		var p contract.UsersResponse
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

// user reads one user's custom window [from, now] with its GPU classes, as a line of the users listing.
func (c *client) user(ctx context.Context, name string, from time.Time) (contract.UserSummary, error) {
	var u contract.UserResponse
	q := url.Values{"history": {"false"}, "from": {from.UTC().Format(time.RFC3339)}}
	err := c.Get(ctx, "api/v1/users/"+url.PathEscape(name), q, &u)
	if nf := (*usageapi.NotFoundError)(nil); errors.As(err, &nf) && nf.Message != "" {
		err = fmt.Errorf("%w: %s", errNoUser, nf.Message)
	}
	return contract.UserSummary{Name: u.User, Groups: u.Groups, GPUHours: u.GPUHours, GPUHoursStatus: u.GPUHoursStatus, GPUHoursReason: u.GPUHoursReason}, err
}

// parallel is how many users' windows the report asks for at once: the usage API answers each from its
// ledger database, so a few at a time keep it responsive for the Hub's users.
const parallel = 8

// customWindows reads the custom window of each named user, a few at a time, in names' order.
func (c *client) customWindows(ctx context.Context, names []string, from time.Time, progress *progress) ([]contract.UserSummary, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	out := make([]contract.UserSummary, len(names))
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
