// Package policy loads the YAML policy files of the services that act (gpu-quota now, gpu-culler later) one
// strict way: unknown keys are errors, every error names its place as file:line:column, a policy type checks
// its own meaning through a Validate hook whose errors point at the node they are about, a reload that fails
// keeps the last good policy (Reloader), and Check is what `gpuhub policy check` prints. It is pure: no clock
// (times are passed in), no Kubernetes, no Hub.
package policy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// Error is one problem in a policy file, at the place an editor jumps to: file:line:column: message.
type Error struct {
	File   string
	Line   int // 1-based
	Column int // 1-based
	Msg    string
}

func (e *Error) Error() string { return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Column, e.Msg) }

// Errors is every problem found in one file, in the file's order; its text has one error a line.
type Errors []*Error

func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap lets errors.As find each *Error.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// Validator is the hook through which a policy type checks what its values mean once the YAML has decoded
// into it. Errors of type *FieldError are reported at the node their path names; any other error at the top
// of the document.
type Validator interface {
	Validate() []error
}

// FieldError is a semantic error at a path in the document: mapping keys and sequence indexes (in decimal)
// from its root, e.g. ["groups", "students", "budgets", "1", "window"]. With Key set it points at the last
// key itself (an unknown name) rather than at its value (a bad number). A path that the document does not
// have (a required key left out) points at the deepest node it does have. The message is prefixed with the
// path, as the decoder's own errors are ("groups.students.budgets.1.window: ...").
type FieldError struct {
	Path []string
	Key  bool
	Msg  string
}

func (e *FieldError) Error() string { return where(e.Path) + e.Msg }

// Errorf is a FieldError about the value at path.
func Errorf(path []string, format string, args ...any) *FieldError {
	return &FieldError{Path: path, Msg: fmt.Sprintf(format, args...)}
}

// KeyErrorf is a FieldError about the last key of path.
func KeyErrorf(path []string, format string, args ...any) *FieldError {
	return &FieldError{Path: path, Key: true, Msg: fmt.Sprintf(format, args...)}
}

// Load reads the policy file at path into into (a pointer) as Decode does; the errors name the file as path.
func Load(path string, into any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read policy: %w", err)
	}
	return Decode(path, data, into)
}

// maxErrors bounds the errors reported for one file: past that many, the file is not worth reading further,
// and the last line says so.
const (
	maxErrors     = 50
	tooManyErrors = "too many errors, stopped here"
)

// Decode decodes one YAML document into into (a pointer to the policy type) strictly, and runs its Validate
// hook when it has one. name is the file name that errors carry. The error, if any, is Errors: every
// problem found, each at its file:line:column. An empty document is an error (an empty policy is written {}),
// and so is a second document in the same file. After an error into may be partly filled: decode into a
// fresh value and keep the old one until Decode succeeds (Reloader does).
func Decode(name string, data []byte, into any) (err error) {
	defer func() {
		// yaml.v3 reports its errors by panicking internally and recovering; should a malformed document ever
		// escape that, it is an error in the file, never a crash of the service that reloads it.
		if r := recover(); r != nil {
			err = Errors{{File: name, Line: 1, Column: 1, Msg: fmt.Sprintf("cannot read this YAML (parser failure: %v)", r)}}
		}
	}()
	es := decode(name, data, into)
	if len(es) == 0 {
		return nil
	}
	inside(es, data)
	return es
}

func decode(name string, data []byte, into any) Errors {
	if e := checkText(name, data); e != nil {
		return Errors{e}
	}
	root, e := parse(name, data)
	if e != nil {
		return Errors{e}
	}
	w := &walker{file: name, seen: map[seenKey]bool{}}
	w.walk(root, nil, typeOf(into))
	if len(w.errs) > 0 {
		return w.errors()
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(into); err != nil {
		// The walk above checks what this decoder checks, with positions; this is the safety net for a
		// case it does not mirror.
		return Errors{fromYAMLError(name, data, err, "YAML: ")}
	}
	if v, ok := into.(Validator); ok {
		for _, err := range v.Validate() {
			w.errs = append(w.errs, w.locate(root, err))
		}
	}
	return w.errors()
}

// inside keeps positions in the file: yaml.v3 places the end of the stream on a line of its own, one past a
// last line that has no line break.
func inside(es Errors, data []byte) {
	lines := splitLines(data)
	for _, e := range es {
		e.Line = min(max(e.Line, 1), len(lines))
		e.Column = min(max(e.Column, 1), utf8.RuneCount(lines[e.Line-1])+1)
	}
}

func (w *walker) errors() Errors {
	sort.SliceStable(w.errs, func(i, j int) bool {
		a, b := w.errs[i], w.errs[j]
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Column < b.Column
	})
	if len(w.errs) > maxErrors {
		last := w.errs[maxErrors-1]
		w.errs = append(w.errs[:maxErrors:maxErrors], &Error{File: w.file, Line: last.Line, Column: last.Column, Msg: tooManyErrors})
	}
	return w.errs
}

// parse reads the one document of data into its root node.
func parse(name string, data []byte) (*yaml.Node, *Error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &Error{File: name, Line: 1, Column: 1, Msg: "the file has no YAML document (an empty policy is written {})"}
		}
		return nil, fromYAMLError(name, data, err, "YAML syntax: ")
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return nil, fromYAMLError(name, data, err, "YAML syntax: ")
	default:
		return nil, &Error{File: name, Line: max(extra.Line, 1), Column: max(extra.Column, 1),
			Msg: "a second YAML document: a policy file holds one (remove the --- line)"}
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind == yaml.ScalarNode && root.ShortTag() == "!!null" {
		return nil, &Error{File: name, Line: max(root.Line, 1), Column: max(root.Column, 1),
			Msg: "the document is empty (an empty policy is written {})"}
	}
	return root, nil
}

// yamlLineRe reads the position yaml.v3 gives its errors: a line, never a column.
var yamlLineRe = regexp.MustCompile(`^(?:yaml: )?(?:unmarshal errors:\n\s*)?line (\d+): (.*)$`)

// parserProblems are the messages of yaml.v3's parser (as opposed to its scanner). yaml.v3 numbers their
// lines from 0 and its scanner's from 1 (it adds 1 to scanner errors only), and a line 0 is left out.
var parserProblems = map[string]bool{
	"did not find expected <stream-start>":   true,
	"did not find expected <document start>": true,
	"did not find expected node content":     true,
	"did not find expected '-' indicator":    true,
	"did not find expected key":              true,
	"did not find expected ',' or ']'":       true,
	"did not find expected ',' or '}'":       true,
	"found undefined tag handle":             true,
	"found duplicate %YAML directive":        true,
	"found incompatible YAML document":       true,
	"found duplicate %TAG directive":         true,
}

var unknownAnchorRe = regexp.MustCompile(`^unknown anchor '(.*)' referenced$`)

// fromYAMLError turns a yaml.v3 error, which names a line at best, into an Error at that line, its message
// after prefix; the column is where the line's text starts, the nearest place the message can be pinned to.
func fromYAMLError(name string, data []byte, err error, prefix string) *Error {
	msg := err.Error()
	line := 0
	if m := yamlLineRe.FindStringSubmatch(msg); m != nil {
		if n, perr := strconv.Atoi(m[1]); perr == nil && n > 0 {
			line = n
		}
		msg = m[2]
	} else {
		msg = strings.TrimPrefix(msg, "yaml: ")
	}
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i]
	}
	if parserProblems[msg] {
		line++
	}
	if m := unknownAnchorRe.FindStringSubmatch(msg); m != nil && line == 0 {
		if l, c, ok := find(data, "*"+m[1]); ok {
			return &Error{File: name, Line: l, Column: c, Msg: fmt.Sprintf("YAML: there is no anchor &%s before this alias", m[1])}
		}
	}
	line = min(max(line, 1), len(splitLines(data)))
	return &Error{File: name, Line: line, Column: lineStart(data, line), Msg: prefix + msg}
}

// find is the line and column of the first occurrence of s in data.
func find(data []byte, s string) (line, col int, ok bool) {
	for i, l := range splitLines(data) {
		if j := bytes.Index(l, []byte(s)); j >= 0 {
			return i + 1, utf8.RuneCount(l[:j]) + 1, true
		}
	}
	return 0, 0, false
}

// lineStart is the 1-based column of the first character of line that is not a space or tab (1 for a blank
// or missing line).
func lineStart(data []byte, line int) int {
	lines := splitLines(data)
	if line < 1 || line > len(lines) {
		return 1
	}
	col := 1
	for _, r := range string(lines[line-1]) {
		if r != ' ' && r != '\t' {
			return col
		}
		col++
	}
	return 1
}

// splitLines splits data into lines at every YAML line break: LF, CRLF, CR, and the Unicode breaks NEL, LS
// and PS (which yaml.v3 counts too). There is always one line more than breaks.
func splitLines(data []byte) [][]byte {
	var lines [][]byte
	start := 0
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		next := i + size
		switch r {
		case '\r':
			if next < len(data) && data[next] == '\n' {
				next++
			}
		case '\n', 0x85, 0x2028, 0x2029:
		default:
			i = next
			continue
		}
		lines = append(lines, data[start:i])
		start, i = next, next
	}
	return append(lines, data[start:])
}

// checkText finds what the YAML reader refuses before parsing, and says where: bytes that are not UTF-8 and
// control characters. (yaml.v3 reports both without a position.)
func checkText(name string, data []byte) *Error {
	for i, l := range splitLines(data) {
		col := 1
		for j := 0; j < len(l); {
			r, size := utf8.DecodeRune(l[j:])
			switch {
			case r == utf8.RuneError && size <= 1:
				return &Error{File: name, Line: i + 1, Column: col, Msg: fmt.Sprintf("byte 0x%02x is not UTF-8 text", l[j])}
			case r < 0x20 && r != '\t', r == 0x7f, r >= 0x80 && r < 0xa0, r == 0xfeff && (i > 0 || j > 0), r == 0xfffe, r == 0xffff:
				return &Error{File: name, Line: i + 1, Column: col, Msg: fmt.Sprintf("control character %U is not allowed in YAML", r)}
			}
			j += size
			col++
		}
	}
	return nil
}
