// Package usageapi is the gpuhub command's client of the usage API: one Hub token, and every answer that is not
// the data turned into an error that says what to do next.
package usageapi

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/gpuhub/gpuhub/services/internal/contract"
)

// URLHint is how the errors describe a right --usage-url.
const URLHint = "the usage API's URL with its prefix, e.g. https://hub.example.org/services/gpu-usage/"

// Client asks the usage API with one token.
type Client struct {
	HTTP *http.Client
	// Base is the usage API's URL with its prefix and a trailing slash.
	Base  string
	Token string
	// TokenFrom is where the token came from (JUPYTERHUB_API_TOKEN, --token-file FILE), for the errors: the
	// token itself is never printed.
	TokenFrom string
	// Forbidden is what a 403 means to the command and what to do then, e.g. "who holds which GPU is for Hub
	// admins: use an admin's token".
	Forbidden string
}

// NotFoundError is a 404: a wrong --usage-url, or, with a Message from the usage API, no such item.
type NotFoundError struct {
	Base, Path string
	// Message is the usage API's own (empty when the answer is not the usage API's).
	Message string
}

func (e *NotFoundError) Error() string {
	return fmt.Sprintf("no usage API at %s (404 for %s): check --usage-url, %s", e.Base, e.Path, URLHint)
}

// Get reads the answer of GET Base+path (with the query q, if any) into into.
func (c *Client) Get(ctx context.Context, path string, q url.Values, into any) error {
	u := c.Base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	a, err := contract.Caller{Token: c.Token, HTTP: c.HTTP, Limit: 64 << 20}.Do(ctx, http.MethodGet, u, nil, nil)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("the usage API at %s does not answer (%w): check --usage-url, %s", c.Base, err, URLHint)
	}
	if a.Status != http.StatusOK {
		return c.answerError(a, path)
	}
	if err := a.Decode(into); err != nil {
		return fmt.Errorf("the answer of %s is not the usage API's (%w): check --usage-url, %s", u, err, URLHint)
	}
	return nil
}

// answerError says what an answer other than 200 means, and what to do.
func (c *Client) answerError(a *contract.Answer, path string) error {
	msg := a.Message()
	switch a.Status {
	case http.StatusUnauthorized:
		return fmt.Errorf("the Hub does not know the token in %s: make a new one on the Hub's token page (or check that --usage-url is this Hub's)", c.TokenFrom)
	case http.StatusForbidden:
		return fmt.Errorf("the usage API refuses the token in %s (%s): %s", c.TokenFrom, cmp.Or(msg, "403 Forbidden"), c.Forbidden)
	case http.StatusNotFound:
		return &NotFoundError{Base: c.Base, Path: path, Message: msg}
	case http.StatusServiceUnavailable:
		return fmt.Errorf("the usage API cannot answer just now (%s): try again in a minute", cmp.Or(msg, "503"))
	}
	return fmt.Errorf("the usage API answered %d %s for %s: %s", a.Status, http.StatusText(a.Status), path, cmp.Or(msg, strings.TrimSpace(string(a.Body))))
}
