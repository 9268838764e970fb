// Package waitlist is the waitlist part of `gpuhub status`: gpu-quota's GPU waitlist as the running
// service answers it (api/v1/waitlist), read with a Hub admin's token: who waits for which GPU, since when, their
// place and estimate, and the GPUs held for the next in line.
package waitlist

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gpuhub/gpuhub/services/internal/contract"
)

// location is where times are printed (tests: UTC).
var location = time.Local

// Source is where the waitlist is read: the running gpu-quota, with a Hub admin's token.
type Source struct {
	HTTP      *http.Client // default: one with a 30 s timeout
	URL       string       // gpu-quota with its prefix, e.g. https://hub.example.org/services/gpu-quota/
	Token     string
	TokenFrom string // where the token came from (JUPYTERHUB_API_TOKEN, --token-file F), for the errors
}

// WriteWaitlist reads gpu-quota's waitlist and writes every queue to w; errors say what to do.
func WriteWaitlist(ctx context.Context, w io.Writer, src Source, now time.Time) error {
	ps, err := fetch(ctx, src)
	if err != nil {
		return err
	}
	printQueues(w, ps, now)
	return nil
}

func fetch(ctx context.Context, src Source) ([]contract.Place, error) {
	base := src.URL
	if !strings.HasSuffix(base, "/") {
		base += "/"
	}
	c := src.HTTP
	if c == nil {
		c = contract.NewHTTPClient(30 * time.Second)
	}
	a, err := contract.Caller{Token: src.Token, HTTP: c}.Do(ctx, http.MethodGet, base+"api/v1/waitlist", nil, nil)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("gpu-quota at %s does not answer (%w): check --quota-url, gpu-quota's URL with its prefix, e.g. https://hub.example.org/services/gpu-quota/", base, err)
	}
	switch a.Status {
	case http.StatusOK:
	case http.StatusUnauthorized:
		return nil, fmt.Errorf("the Hub does not know the token in %s: make a new one on the Hub's token page", src.TokenFrom)
	case http.StatusForbidden:
		return nil, fmt.Errorf("only Hub admins may read every queue: use an admin's token in %s", src.TokenFrom)
	case http.StatusNotFound:
		return nil, fmt.Errorf("no waitlist at %s: %s", base, cmp.Or(a.Message(), "404 (is it gpu-quota, with --waitlist?)"))
	default:
		return nil, fmt.Errorf("gpu-quota answered %w", a.Err(http.MethodGet, base+"api/v1/waitlist"))
	}
	var out contract.Places
	if err := a.Decode(&out); err != nil {
		return nil, fmt.Errorf("gpu-quota's answer is not a waitlist (%w): check --quota-url", err)
	}
	return out.Places, nil
}

// printQueues writes one block per GPU class in line order: held units first, then who waits.
func printQueues(w io.Writer, ps []contract.Place, now time.Time) {
	var classes []string
	by := map[string][]contract.Place{}
	for _, p := range ps {
		if p.State == "started" {
			continue
		}
		if _, ok := by[p.Class]; !ok {
			classes = append(classes, p.Class)
		}
		by[p.Class] = append(by[p.Class], p)
	}
	if len(classes) == 0 {
		_, _ = fmt.Fprintln(w, "GPU waitlist: nobody is waiting.")
		return
	}
	for i, class := range classes {
		if i > 0 {
			_, _ = fmt.Fprintln(w)
		}
		q := by[class]
		name := q[0].Description
		if name == "" {
			name = class
		}
		waiting := 0
		for _, p := range q {
			if p.State == "waiting" {
				waiting++
			}
		}
		_, _ = fmt.Fprintf(w, "GPU waitlist for %s (%s): %d waiting\n", name, class, waiting)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		_, _ = fmt.Fprintln(tw, "PLACE\tUSER\tSERVER\tWAITING SINCE\tFAIR SHARE\tESTIMATE / HELD UNTIL\tNOTE")
		for _, p := range q {
			pos, when, note := fmt.Sprint(p.Position), "unknown", ""
			switch {
			case p.State == "held":
				pos, when = "turn", "held until "+p.HeldUntil.In(location).Format("15:04")
			case !p.Estimate.IsZero():
				when = "around " + p.Estimate.In(location).Format("15:04")
			}
			if p.AutoStart {
				note = "auto-start"
			}
			if p.Blocked != "" {
				note = strings.TrimSpace(note + " blocked: " + p.Blocked)
			}
			srv := p.Server
			if srv == "" {
				srv = "(default)"
			}
			_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%s (%s)\t%.3f\t%s\t%s\n", pos, p.User, srv, p.JoinedAt.In(location).Format("15:04"),
				ago(now.Sub(p.JoinedAt)), p.FairShare, when, note)
		}
		_ = tw.Flush()
	}
}

func ago(d time.Duration) string {
	switch {
	case d < time.Minute:
		return "just now"
	case d < time.Hour:
		return fmt.Sprintf("%d min", int(d.Minutes()))
	}
	return fmt.Sprintf("%dh%02d", int(d.Hours()), int(d.Minutes())%60)
}
