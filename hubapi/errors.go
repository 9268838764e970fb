package hubapi

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// APIError is a non-2xx answer from the Hub.
type APIError struct {
	StatusCode int
	Method     string
	Path       string // API path relative to the API root, without the query
	// Message is the Hub's "message" field ({"status": 404, "message": "..."}),
	// or a short excerpt of a non-JSON body.
	Message string
	// RetryAfter is the Hub's Retry-After, zero when absent.
	RetryAfter time.Duration
}

// Error renders "hub api: GET /users/alice: 404 Not Found: No such user".
// It never contains the token: the token lives only in a request header.
func (e *APIError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "hub api: %s %s: %d %s", e.Method, e.Path, e.StatusCode, http.StatusText(e.StatusCode))
	if e.Message != "" && e.Message != http.StatusText(e.StatusCode) {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	return b.String()
}

func statusOf(err error) int {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.StatusCode
	}
	return 0
}

// IsNotFound reports a 404 (no such user, group or server).
func IsNotFound(err error) bool { return statusOf(err) == http.StatusNotFound }

// IsForbidden reports a 403: the token lacks a scope for the call.
func IsForbidden(err error) bool { return statusOf(err) == http.StatusForbidden }

// IsUnauthorized reports a 401: the token is unknown or expired.
func IsUnauthorized(err error) bool { return statusOf(err) == http.StatusUnauthorized }

// IsConflict reports the Hub refusing because of the current state: 409, or
// a 400 saying a server is already running or has a pending action (the Hub
// answers those with 400, not 409), or a user/group that already exists.
func IsConflict(err error) bool {
	var ae *APIError
	if !errors.As(err, &ae) {
		return false
	}
	switch ae.StatusCode {
	case http.StatusConflict:
		return true
	case http.StatusBadRequest:
		m := strings.ToLower(ae.Message)
		for _, s := range []string{"already running", "already exists", "pending", "is already"} {
			if strings.Contains(m, s) {
				return true
			}
		}
	}
	return false
}

// IsTooManyRequests reports a 429 (spawn limits); see APIError.RetryAfter.
func IsTooManyRequests(err error) bool { return statusOf(err) == http.StatusTooManyRequests }
