// Package adminview serves the usage API's pages for people (the "gpu-usage" entry of the Hub's Services menu):
// server-rendered with html/template, no JavaScript. Hub admins see the GPU inventory, who holds what, GPU-hours
// by user, group and kind with CSV export and a chart, the culler's and gpu-quota's recent decisions and the
// waitlists; anyone else sees only their own page. The viewer comes from the session the login middleware
// (hubapi/huboauth) puts in the request context; this package never reads a cookie or a token.
package adminview

import (
	"context"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpuhub/gpuhub/hubapi/huboauth"
	"github.com/gpuhub/gpuhub/services/internal/server"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/ledger"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/profile"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/usage"
)

//go:embed templates/*.html static/style.css
var assets embed.FS

// GPUHours is what the pages need of the ledger (the usage API's ledger connection).
type GPUHours interface {
	// Available is nil while GPU-hours can be served; otherwise it says why not, in words.
	Available() error
	// Breakdown is GPU-hours per user, kind and class with their idle-but-held part (ledger.Ledger.Breakdown).
	Breakdown(ctx context.Context, q ledger.Query) ([]ledger.Usage, error)
	Hourly(ctx context.Context, q ledger.Query) ([]ledger.HourTotals, error)
}

// Remote is another gpuhub service's JSON API, read with the usage API's own token (remote.Client).
type Remote interface {
	// Get returns the body of a 200 answer to GET {base}{path}, or an error in words for the page.
	Get(ctx context.Context, path string) ([]byte, error)
}

// Options configure the pages.
type Options struct {
	Prefix string // e.g. /services/gpu-usage/
	State  *usage.State
	Ledger GPUHours
	// Culler is gpu-culler's API (decisions); nil: not configured, the section says so.
	Culler Remote
	// Quota is gpu-quota's API (decisions, waitlist); nil: not configured.
	Quota Remote
	// Profiles are the right-size profiles (the ledger's); nil: the Right-size page says there are none.
	Profiles profile.Source
	Now      func() time.Time
	Logger   *slog.Logger
}

type handler struct {
	o     Options
	pages map[string]*template.Template
	css   []byte
	hours hoursCache
}

// New returns the pages' handler; it expects full paths (prefix included) and a session in the context.
func New(o Options) http.Handler {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	o.Prefix = server.NormalizePrefix(o.Prefix)
	h := &handler{o: o, pages: parseTemplates()}
	h.css, _ = assets.ReadFile("static/style.css")
	mux := http.NewServeMux()
	p := o.Prefix
	mux.HandleFunc("GET "+p+"{$}", h.home)
	mux.HandleFunc("GET "+p+"holders", h.admin(h.holders))
	mux.HandleFunc("GET "+p+"gpu-hours", h.admin(h.gpuHours))
	mux.HandleFunc("GET "+p+"decisions", h.admin(h.decisions))
	mux.HandleFunc("GET "+p+"waitlist", h.admin(h.waitlist))
	mux.HandleFunc("GET "+p+"right-size", h.admin(h.rightSize))
	mux.HandleFunc("GET "+p+"users/{name}", h.userPage)
	mux.HandleFunc("GET "+p+"static/style.css", h.style)
	mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			h.fail(w, r, http.StatusMethodNotAllowed, "These pages are read-only: open them with a link.")
			return
		}
		h.fail(w, r, http.StatusNotFound, "There is no page at "+r.URL.Path+". Start from the overview.")
	})
	return mux
}

// templateFuncs format numbers and times for the pages.
var templateFuncs = template.FuncMap{
	"gpus":     func(v float64) string { return fmt.Sprintf("%.2f", v) },
	"hours":    func(v float64) string { return fmt.Sprintf("%.2f", v) },
	"pct":      pct,
	"clock":    clock,
	"ago":      ago,
	"query":    url.QueryEscape,
	"path":     url.PathEscape,
	"nonempty": func(s string) bool { return s != "" },
}

func parseTemplates() map[string]*template.Template {
	base := template.Must(template.New("base.html").Funcs(templateFuncs).ParseFS(assets, "templates/base.html", "templates/parts.html"))
	names, err := fs.Glob(assets, "templates/*.html")
	if err != nil {
		panic(err)
	}
	out := map[string]*template.Template{}
	for _, n := range names {
		short := strings.TrimSuffix(strings.TrimPrefix(n, "templates/"), ".html")
		if short == "base" || short == "parts" {
			continue
		}
		out[short] = template.Must(template.Must(base.Clone()).ParseFS(assets, n))
	}
	return out
}

// page is what every page's layout shows; Content is the page's own data.
type page struct {
	Title     string
	Prefix    string
	Viewer    huboauth.Session
	LoggedIn  bool
	CSRFField string
	Nav       []navItem
	// SampledAt is the live view's sample time (zero before the first); Simulated says numbers are simulated.
	SampledAt time.Time
	Simulated bool
	Content   any
}

type navItem struct {
	Href, Label string
	Current     bool
}

func (h *handler) newPage(r *http.Request, title, current string, content any) page {
	s, ok := huboauth.FromContext(r.Context())
	p := page{Title: title, Prefix: h.o.Prefix, Viewer: s, LoggedIn: ok, CSRFField: huboauth.CSRFField, Content: content}
	if v := h.o.State.View(); v != nil {
		p.SampledAt, p.Simulated = v.SampledAt, v.Cluster.Simulated
	}
	if !ok {
		return p
	}
	items := []navItem{{Href: h.o.Prefix + "users/" + url.PathEscape(s.User), Label: "My GPUs"}}
	if s.Admin {
		items = []navItem{
			{Href: h.o.Prefix, Label: "Inventory"},
			{Href: h.o.Prefix + "holders", Label: "Who holds what"},
			{Href: h.o.Prefix + "gpu-hours", Label: "GPU-hours"},
			{Href: h.o.Prefix + "right-size", Label: "Right-size"},
			{Href: h.o.Prefix + "decisions", Label: "Decisions"},
			{Href: h.o.Prefix + "waitlist", Label: "Waitlist"},
			items[0],
		}
	}
	for i := range items {
		items[i].Current = items[i].Href == current
	}
	p.Nav = items
	return p
}

func (h *handler) render(w http.ResponseWriter, r *http.Request, status int, name string, p page) {
	t := h.pages[name]
	var b strings.Builder
	if err := t.ExecuteTemplate(&b, "base.html", p); err != nil {
		h.o.Logger.Error("admin view: render page", "page", name, "err", err)
		http.Error(w, "The page could not be drawn; the usage API's log says why.", http.StatusInternalServerError)
		return
	}
	setPageHeaders(w)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		_, _ = w.Write([]byte(b.String()))
	}
}

// setPageHeaders: no script runs on these pages, nothing frames them, and they are never cached (they name users).
func setPageHeaders(w http.ResponseWriter) {
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Referrer-Policy", "same-origin")
	w.Header().Set("Cache-Control", "no-store")
}

type errorContent struct {
	Message string
	Home    string
}

// fail answers an error page: what happened and where to go.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	title := http.StatusText(status)
	p := h.newPage(r, title, "", errorContent{Message: msg, Home: h.o.Prefix})
	h.render(w, r, status, "error", p)
}

// viewer returns the session, or answers 401.
func (h *handler) viewer(w http.ResponseWriter, r *http.Request) (huboauth.Session, bool) {
	s, ok := huboauth.FromContext(r.Context())
	if !ok {
		h.fail(w, r, http.StatusUnauthorized, "You are not logged in. Open GPU usage from the Hub's Services menu to log in.")
	}
	return s, ok
}

// admin lets Hub admins through; anyone else gets 403 and a link to their own page.
func (h *handler) admin(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s, ok := h.viewer(w, r)
		if !ok {
			return
		}
		if !s.Admin {
			h.fail(w, r, http.StatusForbidden, "This page is for Hub admins. Your own GPU use is on your page, "+h.o.Prefix+"users/"+url.PathEscape(s.User)+".")
			return
		}
		next(w, r)
	}
}

func (h *handler) home(w http.ResponseWriter, r *http.Request) {
	s, ok := h.viewer(w, r)
	if !ok {
		return
	}
	if !s.Admin {
		h.renderUser(w, r, s, s.User)
		return
	}
	h.inventory(w, r)
}

func (h *handler) userPage(w http.ResponseWriter, r *http.Request) {
	s, ok := h.viewer(w, r)
	if !ok {
		return
	}
	name := r.PathValue("name")
	if !s.Admin && name != s.User {
		// Never say whether the other user exists or holds anything.
		h.fail(w, r, http.StatusForbidden, "You may see only your own GPU use, on your page "+h.o.Prefix+"users/"+url.PathEscape(s.User)+".")
		return
	}
	h.renderUser(w, r, s, name)
}

func (h *handler) style(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/css; charset=utf-8")
	w.Header().Set("Cache-Control", "max-age=300")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if r.Method != http.MethodHead {
		_, _ = w.Write(h.css)
	}
}

// asOf is the time the live numbers are of: the latest sample, else now.
func (h *handler) asOf() time.Time {
	if v := h.o.State.View(); v != nil {
		return v.SampledAt.UTC()
	}
	return h.o.Now().UTC()
}

func pct(p *float64) string {
	if p == nil {
		return "unknown"
	}
	return fmt.Sprintf("%.0f %%", *p)
}

func clock(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04 UTC")
}

// ago writes a duration for people: "45 s", "12 min", "3 h 5 min", "2 d 4 h".
func ago(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%d s", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%d min", int(d.Minutes()))
	case d < 24*time.Hour:
		hh, mm := int(d.Hours()), int(d.Minutes())%60
		if mm == 0 {
			return fmt.Sprintf("%d h", hh)
		}
		return fmt.Sprintf("%d h %d min", hh, mm)
	default:
		dd, hh := int(d.Hours())/24, int(d.Hours())%24
		if hh == 0 {
			return fmt.Sprintf("%d d", dd)
		}
		return fmt.Sprintf("%d d %d h", dd, hh)
	}
}

// hoursCache keeps ledger answers for a few seconds: a page view (and its CSV) must not scan 30 days of buckets
// per request.
type hoursCache struct {
	mu sync.Mutex
	m  map[hoursKey]hoursEntry
}

type hoursKey struct {
	kind     string // "rows" or "hourly"
	from, to int64  // hour bucket bounds
	user     string
}

type hoursEntry struct {
	at     time.Time
	rows   []ledger.Usage
	hourly []ledger.HourTotals
}

const (
	hoursTTL        = 10 * time.Second
	maxHoursEntries = 256
)

func (c *hoursCache) get(k hoursKey, now time.Time) (hoursEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[k]
	if !ok || now.Sub(e.at) >= hoursTTL || now.Before(e.at) {
		return hoursEntry{}, false
	}
	return e, true
}

func (c *hoursCache) put(k hoursKey, e hoursEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxHoursEntries {
		c.m = map[hoursKey]hoursEntry{}
	}
	c.m[k] = e
}

func itoa(n int) string { return strconv.Itoa(n) }

func ftoa(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }
