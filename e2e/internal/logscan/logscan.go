// Package logscan checks that no secret the e2e harness handed out reaches a log: every token the harness
// creates or sees (Hub service and admin tokens, user tokens minted in tests, the single-user servers' Hub
// tokens, ServiceAccount tokens) is registered here, and the stack scans every log it wrote when it stops.
// Besides the registered secrets it looks for what a token in a log usually looks like (an Authorization
// header with a value, a token query parameter), so a secret the harness never saw is caught too.
//
// A finding names the file, the line and what was found, never the secret itself.
package logscan

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
)

// minSecretLen keeps short strings (a user name registered by mistake) from matching everywhere; every real
// secret of the harness is far longer.
const minSecretLen = 8

// Registry holds the secrets to look for. The zero value is ready to use; it is safe for concurrent use.
type Registry struct {
	mu      sync.Mutex
	secrets map[string]string // secret → what it is ("Hub admin token")
}

// Default is the registry of the e2e harness: every package that mints a token registers it here, and the
// stack's Stop scans against it.
var Default = &Registry{}

// Register adds a secret, described by what (e.g. "Hub token of service gpu-usage"); what is printed in a
// finding, the secret never. Registering a secret again renames it (the later caller knows more: a token from
// NewToken becomes the token of the service it was given to). Secrets shorter than 8 bytes are ignored.
func (r *Registry) Register(what, secret string) {
	secret = strings.TrimSpace(secret)
	if len(secret) < minSecretLen {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.secrets == nil {
		r.secrets = map[string]string{}
	}
	r.secrets[secret] = what
}

// Register adds a secret to Default.
func Register(what, secret string) { Default.Register(what, secret) }

// Len is how many secrets are registered.
func (r *Registry) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.secrets)
}

type secret struct{ value, what string }

func (r *Registry) snapshot() []secret {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]secret, 0, len(r.secrets))
	for v, w := range r.secrets {
		out = append(out, secret{v, w})
	}
	// Longest first, so that a secret containing another is named as itself.
	slices.SortFunc(out, func(a, b secret) int { return len(b.value) - len(a.value) })
	return out
}

// Finding is one line of a log with a secret in it.
type Finding struct {
	File string
	Line int
	What string // "Hub admin token", "an Authorization header with a token", ...
}

func (f Finding) String() string { return fmt.Sprintf("%s:%d: %s", f.File, f.Line, f.What) }

// tokenChars are the characters of Hub tokens (hex), JWTs (base64url and dots) and most bearer tokens. A
// redacted value ("<redacted>", "[secret]", "***") does not consist of them.
const tokenChars = `[A-Za-z0-9._~+/=-]{16,}`

// patterns are what a token in a log looks like, whoever minted it.
var patterns = []struct {
	re   *regexp.Regexp
	what string
}{
	{regexp.MustCompile(`(?i)authorization["']?\s*[:=]\s*["']?(?:token|bearer)\s+` + tokenChars), "an Authorization header with a token"},
	{regexp.MustCompile(`(?i)[?&](?:token|access_token|api_token|_xsrf_token)=` + tokenChars), "a token query parameter"},
	{regexp.MustCompile(`(?i)JUPYTERHUB_API_TOKEN["']?\s*[:=]\s*["']?` + tokenChars), "JUPYTERHUB_API_TOKEN with its value"},
}

// ScanFile scans one file line by line.
func (r *Registry) ScanFile(path string) ([]Finding, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return scan(path, f, r.snapshot())
}

// ScanReader scans what rd yields, naming it name in findings.
func (r *Registry) ScanReader(name string, rd io.Reader) ([]Finding, error) {
	return scan(name, rd, r.snapshot())
}

func scan(name string, rd io.Reader, secrets []secret) ([]Finding, error) {
	// A line longer than the buffer is read in pieces; the end of the previous piece is kept so that a secret
	// (or a pattern) cut in two is still found.
	overlap := 256
	for _, s := range secrets {
		overlap = max(overlap, len(s.value))
	}
	br := bufio.NewReaderSize(rd, 64<<10)
	var out []Finding
	var tail []byte
	line := 1
	for {
		chunk, err := br.ReadSlice('\n')
		if len(chunk) > 0 {
			tail = append(tail, chunk...) // the line so far, or its end
			if what, ok := match(tail, secrets); ok && (len(out) == 0 || out[len(out)-1].Line != line) {
				out = append(out, Finding{File: name, Line: line, What: what})
			}
			if errors.Is(err, bufio.ErrBufferFull) {
				tail = append(tail[:0], tail[max(0, len(tail)-overlap):]...)
			} else {
				tail = tail[:0]
			}
		}
		switch {
		case err == nil:
			line++
		case errors.Is(err, bufio.ErrBufferFull):
		case errors.Is(err, io.EOF):
			return out, nil
		default:
			return out, fmt.Errorf("read %s: %w", name, err)
		}
	}
}

func match(text []byte, secrets []secret) (string, bool) {
	s := string(text)
	for _, sec := range secrets {
		if strings.Contains(s, sec.value) {
			return sec.what, true
		}
	}
	for _, p := range patterns {
		if p.re.MatchString(s) {
			return p.what, true
		}
	}
	return "", false
}

// ScanDir scans every log file under dir: files named *.log and every file in a directory named logs.
// Configuration files with tokens (kubeconfigs, the Hub's config) are not logs and are left alone.
func (r *Registry) ScanDir(dir string) ([]Finding, error) {
	out, _, err := r.scanDir(dir)
	return out, err
}

// Summary says what a check looked at, so that a run can show the check was not empty.
type Summary struct {
	Files   int // log files scanned
	Secrets int // registered secrets looked for
}

func (s Summary) String() string {
	return fmt.Sprintf("%d log files scanned for %d registered tokens and token patterns", s.Files, s.Secrets)
}

func (r *Registry) scanDir(dir string) ([]Finding, Summary, error) {
	secrets := r.snapshot()
	sum := Summary{Secrets: len(secrets)}
	var out []Finding
	var errs []error
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
			return nil
		}
		if !d.Type().IsRegular() || !IsLog(path) {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			errs = append(errs, err)
			return nil
		}
		defer f.Close()
		sum.Files++
		found, err := scan(path, f, secrets)
		out = append(out, found...)
		if err != nil {
			errs = append(errs, err)
		}
		return nil
	})
	if err != nil {
		errs = append(errs, err)
	}
	return out, sum, errors.Join(errs...)
}

// IsLog says whether path is a log file of the harness: *.log, or a file in a directory named logs.
func IsLog(path string) bool {
	return strings.HasSuffix(path, ".log") || filepath.Base(filepath.Dir(path)) == "logs"
}

// Report is the message for findings: one line per finding, never the secret.
func Report(findings []Finding) string {
	var b strings.Builder
	fmt.Fprintf(&b, "a secret the harness handed out is in a log (%d lines); a log must never hold a token:\n", len(findings))
	for _, f := range findings {
		fmt.Fprintf(&b, "  %s\n", f)
	}
	return b.String()
}

// LeakError is the error of a check that found secrets in logs.
type LeakError struct{ Findings []Finding }

func (e *LeakError) Error() string { return Report(e.Findings) }

// CheckDir scans dir (ScanDir) and returns a *LeakError when a log holds a secret; a log it could not read is
// an error too, since a check that did not look proves nothing.
func (r *Registry) CheckDir(dir string) (Summary, error) {
	found, sum, err := r.scanDir(dir)
	if len(found) > 0 {
		return sum, errors.Join(&LeakError{Findings: found}, err)
	}
	return sum, err
}

// CheckFile is CheckDir for one log file.
func (r *Registry) CheckFile(path string) error {
	found, err := r.ScanFile(path)
	if len(found) > 0 {
		return errors.Join(&LeakError{Findings: found}, err)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil // nothing was ever written
	}
	return err
}
