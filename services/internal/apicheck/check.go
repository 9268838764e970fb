package apicheck

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// Caller is one identity the Hub (or the login) knows, with its credentials.
type Caller struct {
	Name  string
	Kind  string // "user" or "service"
	Admin bool
	// Token is the caller's Hub API token; with Own, the service's own token (also a Hub token of that
	// service, as in a deployment).
	Token string
	Own   bool
	// Cookie is a genuine session cookie of the pages' login; nil: the caller has none (services).
	Cookie *http.Cookie
}

// BadCredential is a credential every non-public operation must refuse (a forged or revoked token, a
// tampered cookie, a token in the query string).
type BadCredential struct {
	Name  string
	Apply func(*http.Request)
}

// Target is a running service and the identities to call it with.
type Target struct {
	Doc *Document
	// URL is scheme://host of the running service; the document's Base is appended.
	URL     string
	Callers []Caller
	// Subject is the user that requests about a user name (x-gpuhub-subject): a user among Callers.
	Subject string
	Bad     []BadCredential
	// LoginURL starts the Location of the login redirect with which session pages refuse a browser.
	LoginURL string
	// CatchAll is text that only the service's answer for an unknown route contains: a documented operation
	// answered with it does not exist.
	CatchAll []string
}

var client = &http.Client{
	Timeout:       30 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// request is one generated request before it is sent.
type request struct {
	method, path string
	query        url.Values
	rawQuery     string // wins over query when set
	header       http.Header
	body         []byte
}

type answer struct {
	status int
	header http.Header
	body   []byte
}

func (a answer) String() string {
	b := a.body
	if len(b) > 300 {
		b = append(b[:300:300], "..."...)
	}
	return fmt.Sprintf("%d %s", a.status, bytes.TrimSpace(b))
}

func (tg *Target) send(t *testing.T, rq request, cred func(*http.Request)) answer {
	t.Helper()
	u := tg.URL + tg.Doc.Base + rq.path
	if q := rq.query.Encode(); rq.rawQuery != "" {
		u += "?" + rq.rawQuery
	} else if q != "" {
		u += "?" + q
	}
	var body io.Reader
	if rq.body != nil {
		body = bytes.NewReader(rq.body)
	}
	req, err := http.NewRequestWithContext(context.Background(), rq.method, u, body)
	if err != nil {
		t.Fatalf("%s %s: %v", rq.method, u, err)
	}
	for k, v := range rq.header {
		req.Header[k] = v
	}
	if rq.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if cred != nil {
		cred(req)
	}
	resp, err := client.Do(req)
	if err != nil {
		// A handler that panics makes the server drop the connection.
		t.Fatalf("%s %s: no answer (a panic in the handler?): %v", rq.method, rq.path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == "application/x-ndjson" {
		// A stream lasts as long as the service serves it: its first line is the answer judged.
		line, _ := bufio.NewReaderSize(io.LimitReader(resp.Body, 1<<20), 64<<10).ReadBytes('\n')
		return answer{status: resp.StatusCode, header: resp.Header, body: line}
	}
	b, _ := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, header: resp.Header, body: b}
}

// exampleValue is a valid value of a parameter, from the document.
func exampleValue(p *Param) string {
	s := p.Schema
	for _, v := range []any{p.Example, s.Example, first(s.Examples), s.Default, first(s.Enum)} {
		if v != nil {
			return fmt.Sprint(v)
		}
	}
	switch {
	case s.Is("integer") || s.Is("number"):
		if s.Minimum != nil {
			return fmt.Sprint(*s.Minimum)
		}
		return "1"
	case s.Format == "date-time":
		return "2026-11-22T10:00:00Z"
	}
	return "x"
}

func first(vs []any) any {
	if len(vs) == 0 {
		return nil
	}
	return vs[0]
}

// baseline is a valid request for op about subject.
func (tg *Target) baseline(t *testing.T, op *Operation, subject string) request {
	t.Helper()
	in, subjectName, _ := strings.Cut(op.Subject, ":")
	rq := request{method: op.Method, path: op.Path, query: url.Values{}, header: http.Header{}}
	for _, p := range op.Params {
		v := exampleValue(p)
		if in == p.In && subjectName == p.Name {
			v = subject
		}
		switch p.In {
		case "path":
			rq.path = strings.ReplaceAll(rq.path, "{"+p.Name+"}", url.PathEscape(v))
		case "query":
			if p.Required || in == "query" && subjectName == p.Name {
				rq.query.Set(p.Name, v)
			}
		case "header":
			if p.Required {
				rq.header.Set(p.Name, v)
			}
		}
	}
	if op.Body != nil {
		body := op.BodyExample
		if in == "body" {
			m, ok := body.(map[string]any)
			if !ok {
				t.Fatalf("%s: x-gpuhub-subject %s needs an object example", op, op.Subject)
			}
			c := make(map[string]any, len(m)+1)
			for k, v := range m {
				c[k] = v
			}
			c[subjectName] = subject
			body = c
		}
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatalf("%s: example body: %v", op, err)
		}
		rq.body = b
	}
	return rq
}

// credential says how caller c calls op, and whether op takes that credential at all.
func credential(op *Operation, c Caller) (apply func(*http.Request), accepted bool) {
	if op.Accepts(Session) && c.Cookie != nil {
		return func(r *http.Request) { r.AddCookie(c.Cookie) }, true
	}
	accepted = op.Accepts(HubToken) || c.Own && op.Accepts(OwnToken)
	return func(r *http.Request) { r.Header.Set("Authorization", "token "+c.Token) }, accepted
}

// refused reports whether the answer turns the caller away: 401, 403, or the login redirect of a page.
func (tg *Target) refused(op *Operation, a answer) bool {
	if a.status == http.StatusUnauthorized || a.status == http.StatusForbidden {
		return true
	}
	return op.Accepts(Session) && tg.LoginURL != "" && (a.status == http.StatusFound || a.status == http.StatusSeeOther) &&
		strings.HasPrefix(a.header.Get("Location"), tg.LoginURL)
}

// missingRoute reports whether the answer is the service's answer for a route it does not have.
func (tg *Target) missingRoute(a answer) bool {
	if a.status == http.StatusMethodNotAllowed {
		return true
	}
	for _, s := range tg.CatchAll {
		if a.status == http.StatusNotFound && bytes.Contains(a.body, []byte(s)) {
			return true
		}
	}
	return false
}

// Security checks every operation against every caller and bad credential: refused (401, 403 or the login
// redirect) unless x-gpuhub-access allows the caller; an allowed caller is let through to an answer that is
// neither a refusal, a missing route, nor a server error other than 503.
func Security(t *testing.T, tg *Target) {
	t.Helper()
	for _, op := range tg.Doc.Operations {
		t.Run(op.String(), func(t *testing.T) {
			subject := ""
			if op.Subject != "" {
				subject = tg.Subject
			}
			rq := tg.baseline(t, op, tg.Subject)
			if !op.Access.Public() {
				bad := append([]BadCredential{{Name: "no credential"}}, tg.Bad...)
				for _, b := range bad {
					a := tg.send(t, rq, b.Apply)
					if !tg.refused(op, a) {
						t.Errorf("%s: %v, want a refusal", b.Name, a)
					} else if msg := judge(false, a); msg != "" {
						t.Errorf("%s: refused, but %s: %v", b.Name, msg, a)
					}
				}
			}
			for _, c := range tg.Callers {
				apply, accepted := credential(op, c)
				allowed := op.Access.Public() || accepted && op.Access.Allows(c, subject)
				a := tg.send(t, rq, apply)
				switch {
				case allowed && tg.refused(op, a):
					t.Errorf("%s (allowed by %q): refused: %v", c.Name, op.Access, a)
				case allowed && tg.missingRoute(a):
					t.Errorf("%s: the documented operation is not served: %v", c.Name, a)
				case allowed && a.status >= 500 && a.status != http.StatusServiceUnavailable:
					t.Errorf("%s: server error: %v", c.Name, a)
				case !allowed && !tg.refused(op, a):
					t.Errorf("%s (not allowed by %q, credential accepted %v): %v, want a refusal", c.Name, op.Access, accepted, a)
				case !allowed:
					if msg := judge(false, a); msg != "" {
						t.Errorf("%s: refused, but %s: %v", c.Name, msg, a)
					}
				}
			}
		})
	}
}

func (a Access) String() string {
	s := strings.Join(a.terms, " ")
	if len(a.services) > 0 {
		s = strings.TrimSpace(s + " service:" + strings.Join(a.services, ","))
	}
	return s
}

// caller picks who sends the malformed requests: the first caller op allows, so that they get past
// authentication and reach the input handling.
func (tg *Target) caller(op *Operation) (func(*http.Request), bool) {
	subject := ""
	if op.Subject != "" {
		subject = tg.Subject
	}
	if op.Access.Public() {
		return nil, true
	}
	for _, c := range tg.Callers {
		if apply, ok := credential(op, c); ok && op.Access.Allows(c, subject) {
			return apply, true
		}
	}
	return nil, false
}

// variant is one malformed request; strict ones must answer 4xx, the others anything but a server error.
type variant struct {
	name   string
	strict bool
	rq     request
}

// BadInput sends every operation malformed parameters and bodies derived from its document: a 4xx with a
// message for what the document rules out, never a server error, a panic or an empty body.
func BadInput(t *testing.T, tg *Target) {
	t.Helper()
	for _, op := range tg.Doc.Operations {
		t.Run(op.String(), func(t *testing.T) {
			cred, ok := tg.caller(op)
			if !ok {
				t.Fatalf("no caller of the target may call it (x-gpuhub-access %q): add one", op.Access)
			}
			for _, v := range variants(t, tg, op) {
				a := tg.send(t, v.rq, cred)
				if msg := judge(v.strict, a); msg != "" {
					t.Errorf("%s: %s: %v", v.name, msg, a)
				}
			}
		})
	}
}

// judge returns what is wrong with an answer to a malformed request, or "".
func judge(strict bool, a answer) string {
	switch {
	case a.status >= 500:
		return "server error"
	case strict && (a.status < 400 || a.status >= 500):
		return "want 4xx"
	case a.status == http.StatusNoContent || a.status == http.StatusNotModified ||
		a.status >= 300 && a.status < 400 && a.header.Get("Location") != "":
		return ""
	case len(bytes.TrimSpace(a.body)) == 0:
		return "empty body"
	}
	if mt, _, _ := mime.ParseMediaType(a.header.Get("Content-Type")); mt == "application/json" && a.status >= 400 {
		var e struct {
			Message string `json:"message"`
		}
		if err := json.Unmarshal(a.body, &e); err != nil || strings.TrimSpace(e.Message) == "" {
			return `the error has no "message"`
		}
	}
	return ""
}

const long = 10_000

// oddValues are strings that are valid for a free-form parameter but odd: the answer may be anything but a
// server error.
var oddValues = map[string]string{
	"path traversal": "../../etc/passwd", "markup": "<script>alert(1)</script>", "nul": "a\x00b",
	"unicode": "ünïcødé-✓", "commas": ",,a,,", "very long": strings.Repeat("a", long), "spaces": "  a b  ",
	"percent": "%", "newline": "a\r\nX-Injected: 1",
}

// invalidValues are values the parameter's schema rules out.
func invalidValues(s *Schema) map[string]string {
	out := map[string]string{}
	if s.Is("integer") || s.Is("number") {
		out["not a number"], out["too large"] = "abc", "99999999999999999999999"
		if s.Is("integer") {
			out["fraction"] = "1.5"
		}
		if s.Minimum != nil {
			out["below minimum"] = fmt.Sprint(*s.Minimum - 1)
		}
	}
	if s.Is("boolean") {
		out["not a boolean"] = "maybe"
	}
	if len(s.Enum) > 0 {
		out["not in enum"] = "maybe-not"
	}
	switch s.Format {
	case "date-time":
		out["not a time"], out["no such day"], out["date only"] = "yesterday", "2026-02-30T00:00:00Z", "2026-11-22"
	case "date":
		out["not a date"], out["no such day"], out["no such month"] = "yesterday", "2026-02-30", "2026-13-01"
	case "policy-duration": // as in the policies: 90s, 10m, 24h, 7d, 1d12h
		out["not a duration"], out["negative"], out["no unit"], out["overflow"] = "abc", "-1h", "12", "99999999999999999d"
	}
	return out
}

func constrained(s *Schema) bool { return len(invalidValues(s)) > 0 }

func variants(t *testing.T, tg *Target, op *Operation) []variant {
	t.Helper()
	base := tg.baseline(t, op, tg.Subject)
	clone := func() request {
		r := base
		r.query, r.header = url.Values{}, base.header.Clone()
		for k, v := range base.query {
			r.query[k] = append([]string(nil), v...)
		}
		return r
	}
	var out []variant
	for _, p := range op.Params {
		switch p.In {
		case "query":
			if p.Required {
				r := clone()
				r.query.Del(p.Name)
				out = append(out, variant{"missing required " + p.Name, true, r})
			}
			for name, v := range invalidValues(p.Schema) {
				r := clone()
				r.query.Set(p.Name, v)
				out = append(out, variant{p.Name + ": " + name, true, r})
			}
			for name, v := range oddValues {
				r := clone()
				r.query.Set(p.Name, v)
				out = append(out, variant{p.Name + ": " + name, constrained(p.Schema), r})
			}
		case "path":
			for name, v := range map[string]string{"unknown": "no-such-name", "odd characters": "a b;c'\"<>", "very long": strings.Repeat("n", long),
				"encoded slash": "a/../b", "unicode": "ünï"} {
				r := clone()
				r.path = strings.ReplaceAll(op.Path, "{"+p.Name+"}", url.PathEscape(v))
				for _, q := range op.Params { // the other path parameters keep their valid values
					if q.In == "path" && q != p {
						r.path = strings.ReplaceAll(r.path, "{"+q.Name+"}", url.PathEscape(exampleValue(q)))
					}
				}
				out = append(out, variant{"path " + p.Name + ": " + name, false, r})
			}
		case "header":
			for name, v := range map[string]string{"garbage": "garbage", "very long": strings.Repeat("9", 1000), "empty quotes": `""`} {
				r := clone()
				r.header.Set(p.Name, v)
				out = append(out, variant{"header " + p.Name + ": " + name, p.Required, r})
			}
			if p.Required {
				r := clone()
				r.header.Del(p.Name)
				out = append(out, variant{"missing header " + p.Name, true, r})
			}
		}
	}
	if op.Body != nil {
		withBody := func(name string, strict bool, b []byte) {
			r := clone()
			r.body = b
			out = append(out, variant{"body: " + name, strict, r})
		}
		for name, b := range map[string]string{"empty": "", "truncated": "{", "not JSON": "not json", "an array": "[]",
			"a number": "123", "a string": `"x"`, "deep nesting": strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000),
			"huge": `{"x":"` + strings.Repeat("a", 4<<20) + `"}`} {
			withBody(name, true, []byte(b))
		}
		if len(op.Body.Required) > 0 {
			withBody("null", true, []byte("null"))
			withBody("empty object", true, []byte("{}"))
		}
		example, _ := json.Marshal(op.BodyExample)
		var valid map[string]any
		if err := json.Unmarshal(example, &valid); err == nil {
			if in, name, _ := strings.Cut(op.Subject, ":"); in == "body" {
				valid[name] = tg.Subject
			}
			set := func(name string, strict bool, k string, v any, drop bool) {
				m := make(map[string]any, len(valid)+1)
				for kk, vv := range valid {
					m[kk] = vv
				}
				if drop {
					delete(m, k)
				} else {
					m[k] = v
				}
				b, _ := json.Marshal(m)
				withBody(name, strict, b)
			}
			for k, s := range op.Body.Properties {
				if wrong, ok := wrongType(s); ok {
					set(k+" of the wrong type", true, k, wrong, false)
				}
			}
			for _, k := range op.Body.Required {
				set("missing required "+k, true, k, nil, true)
			}
			if op.Body.closed() {
				set("unknown property", true, "surprise", 1, false)
			}
		}
	}
	return out
}

// wrongType is a JSON value the schema's type rules out.
func wrongType(s *Schema) (any, bool) {
	switch {
	case s.Is("string"):
		return 12345, true
	case s.Is("integer"), s.Is("number"), s.Is("boolean"), s.Is("array"):
		return "not a number, a boolean or an array", true
	case s.Is("object"):
		return []any{"not", "an", "object"}, true
	}
	return nil, false
}

// TokenBad are the bad token credentials every service refuses: a token the Hub never issued, one it revoked
// (revoked: registered with the fake Hub, then expired there), a real token in the query string (never taken:
// URLs end up in logs), and an empty one.
func TokenBad(revoked, valid string) []BadCredential {
	header := func(v string) func(*http.Request) {
		return func(r *http.Request) { r.Header.Set("Authorization", v) }
	}
	return []BadCredential{
		{Name: "forged token", Apply: header("token forged-7f3a9c2e41d8b6")},
		{Name: "revoked token", Apply: header("token " + revoked)},
		{Name: "empty token", Apply: header("token ")},
		{Name: "basic auth", Apply: func(r *http.Request) { r.SetBasicAuth("admin", valid) }},
		{Name: "token in the query", Apply: func(r *http.Request) {
			q := r.URL.Query()
			q.Set("token", valid)
			r.URL.RawQuery = q.Encode()
		}},
	}
}
