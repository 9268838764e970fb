package contract

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"
)

// DefaultTimeout bounds a call whose context has no earlier deadline.
const DefaultTimeout = 10 * time.Second

// DefaultLimit is the largest answer a Caller reads unless told otherwise.
const DefaultLimit = 16 << 20

// IdleConnsPerService is how many idle connections a client keeps to each service it calls. Calls between
// services come in bursts (a spawn form per page load, 64 at once in benchmark B7), and net/http's default of 2
// closes all but two connections after a burst, so the next one dials and handshakes again.
const IdleConnsPerService = 64

// NewHTTPClient is the HTTP client for calls between gpuhub services: a timeout, no redirects, and idle
// connections kept for bursts (IdleConnsPerService). A service URL that redirects is a wrong URL (the Hub's login
// page, a proxy), and following it would send the token on.
func NewHTTPClient(timeout time.Duration) *http.Client {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = IdleConnsPerService
	return &http.Client{
		Transport:     transport,
		Timeout:       cmp.Or(timeout, DefaultTimeout),
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// Caller calls another gpuhub service with this service's Hub API token, as "Authorization: token ...": the
// called service checks it with the Hub. Its String and LogValue never show the token.
type Caller struct {
	// Token is this service's Hub API token.
	Token string
	// HTTP sends the requests (nil: NewHTTPClient(DefaultTimeout)).
	HTTP *http.Client
	// Limit is the largest answer read, in bytes (0: DefaultLimit); a longer one is an error.
	Limit int64
}

// String shows whether a token is set, never the token.
func (c Caller) String() string {
	if c.Token == "" {
		return "contract.Caller{Token: none}"
	}
	return "contract.Caller{Token: [redacted]}"
}

// LogValue keeps the token out of structured logs.
func (c Caller) LogValue() slog.Value { return slog.StringValue(c.String()) }

// Answer is what a service answered: its status and its whole body.
type Answer struct {
	Status int
	Header http.Header
	Body   []byte
}

// Message is the service's own error message (the message of an Error body); "" when the body is not one
// (a proxy's HTML page, say).
func (a *Answer) Message() string {
	var e Error
	if json.Unmarshal(a.Body, &e) != nil {
		return ""
	}
	return e.Message
}

// Decode reads the body as JSON into into.
func (a *Answer) Decode(into any) error { return json.Unmarshal(a.Body, into) }

// StatusError is an answer other than 2xx. Callers add what to do next from the status (errors.As).
type StatusError struct {
	Method, URL string
	Status      int
	// Message is the service's own message (Answer.Message), else the start of the body; Location is where a
	// redirect pointed.
	Message, Location string
}

func (e *StatusError) Error() string {
	s := fmt.Sprintf("%s %s: %d %s", e.Method, e.URL, e.Status, http.StatusText(e.Status))
	if e.Location != "" {
		s += " (redirected to " + e.Location + ": check the URL)"
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// Do sends a request with the token (in, when not nil, as a JSON body; header adds headers) and reads the
// whole answer, whatever its status. An error means no answer: the service is unreachable, the context
// ended, or the answer was longer than the limit.
func (c Caller) Do(ctx context.Context, method, url string, in any, header http.Header) (*Answer, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", method, url, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return nil, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.Token != "" {
		req.Header.Set("Authorization", "token "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = defaultHTTP
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err // a *url.Error: method, URL and cause; never the headers
	}
	defer func() { _ = resp.Body.Close() }()
	limit := cmp.Or(c.Limit, DefaultLimit)
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s %s: reading the answer: %w", method, url, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s %s: %w (%d bytes)", method, url, ErrTooLong, limit)
	}
	return &Answer{Status: resp.StatusCode, Header: resp.Header, Body: data}, nil
}

// JSON sends a request as Do does and decodes a 2xx answer into out (nil: the body is not read as JSON). Any
// other status is a *StatusError.
func (c Caller) JSON(ctx context.Context, method, url string, in, out any) error {
	a, err := c.Do(ctx, method, url, in, nil)
	if err != nil {
		return err
	}
	if err := a.Err(method, url); err != nil {
		return err
	}
	if out == nil {
		return nil
	}
	if err := a.Decode(out); err != nil {
		return fmt.Errorf("%s %s: the answer is not the expected JSON: %w", method, url, err)
	}
	return nil
}

// Err is a *StatusError for an answer other than 2xx, else nil.
func (a *Answer) Err(method, url string) error {
	if a.Status >= 200 && a.Status < 300 {
		return nil
	}
	e := &StatusError{Method: method, URL: url, Status: a.Status, Message: a.Message()}
	if e.Message == "" {
		e.Message = bodyStart(a.Body)
	}
	if a.Status >= 300 && a.Status < 400 {
		e.Location = a.Header.Get("Location")
	}
	return e
}

// IsStatus reports whether err is a *StatusError with one of the statuses.
func IsStatus(err error, statuses ...int) bool {
	var se *StatusError
	if !errors.As(err, &se) {
		return false
	}
	for _, s := range statuses {
		if se.Status == s {
			return true
		}
	}
	return false
}

var defaultHTTP = NewHTTPClient(DefaultTimeout)

// ErrTooLong is an answer longer than the Caller's limit.
var ErrTooLong = errors.New("the answer is longer than the limit")

// bodyStart is the start of a body on one line: an HTML error page of a proxy says little more.
func bodyStart(body []byte) string {
	s := strings.Join(strings.Fields(string(body)), " ")
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}
