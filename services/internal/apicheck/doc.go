// Package apicheck reads a service's OpenAPI document and generates the bad-input and security requests of
// issue 15 from it: malformed parameters and bodies must answer 4xx with a message, and every operation must
// refuse callers its x-gpuhub-access does not name. Each service's tests run it against the real handler.
//
// Two extensions carry what the generated table needs, stated once per operation:
//
//	x-gpuhub-access: user-self admin service:gpu-usage,gpu-profiles
//	x-gpuhub-subject: path:name
//
// x-gpuhub-access lists who may call the operation: public (anyone, no credential), any (any valid credential
// of the operation's schemes), user (any Hub user, about themselves), user-self (the user the subject names),
// admin (Hub admins), service:<names> (those Hub services; with an own-token scheme, the service's own token).
// x-gpuhub-subject says which input names the user the request is about (path:, query: or body: and the
// name); without it a request is about its caller. A security scheme says which credential it is with
// x-gpuhub-credential: hub-token, own-token or session.
package apicheck

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// Credential kinds of security schemes (x-gpuhub-credential).
const (
	HubToken = "hub-token" // a Hub API token in Authorization, resolved with the Hub
	OwnToken = "own-token" // the service's own Hub API token, compared without asking the Hub (the Hub glue)
	Session  = "session"   // huboauth's session cookie (pages for people)
)

// Document is the part of an OpenAPI document the checks use.
type Document struct {
	// Base is the first server URL's path (the Hub service prefix without its trailing slash).
	Base       string
	Operations []*Operation
}

// Operation is one documented method on one path, with its references resolved.
type Operation struct {
	Method, Path, ID string
	Params           []*Param
	// Body is the JSON request body's schema, nil when the operation takes none; BodyExample is a valid one.
	Body        *Schema
	BodyExample any
	// Credentials are the x-gpuhub-credential kinds the operation accepts; empty for public operations.
	Credentials []string
	Access      Access
	// Subject is where the request names its user: "path:name", "query:user", "body:user"; "" for the caller.
	Subject string
	// HTML is true when the operation answers pages (text/html), not JSON.
	HTML bool
}

// String names the operation in test output.
func (o *Operation) String() string { return o.Method + " " + o.Path }

// Accepts reports whether the operation takes credentials of kind c.
func (o *Operation) Accepts(c string) bool { return slices.Contains(o.Credentials, c) }

// Param is a path, query or header parameter.
type Param struct {
	Ref      string  `yaml:"$ref"`
	Name     string  `yaml:"name"`
	In       string  `yaml:"in"`
	Required bool    `yaml:"required"`
	Schema   *Schema `yaml:"schema"`
	Example  any     `yaml:"example"`
}

// Schema is the part of a JSON schema the generated inputs look at.
type Schema struct {
	Ref                  string             `yaml:"$ref"`
	Type                 any                `yaml:"type"` // a name or a list of names
	Format               string             `yaml:"format"`
	Enum                 []any              `yaml:"enum"`
	Minimum              *float64           `yaml:"minimum"`
	Maximum              *float64           `yaml:"maximum"`
	Required             []string           `yaml:"required"`
	Properties           map[string]*Schema `yaml:"properties"`
	AdditionalProperties any                `yaml:"additionalProperties"`
	Items                *Schema            `yaml:"items"`
	Example              any                `yaml:"example"`
	Examples             []any              `yaml:"examples"`
	Default              any                `yaml:"default"`
}

// Types lists the schema's type names ("string", "integer", ...).
func (s *Schema) Types() []string {
	switch t := s.Type.(type) {
	case string:
		return []string{t}
	case []any:
		var out []string
		for _, v := range t {
			if n, ok := v.(string); ok {
				out = append(out, n)
			}
		}
		return out
	}
	return nil
}

// Is reports whether the schema's only non-null type is name.
func (s *Schema) Is(name string) bool {
	ts := slices.DeleteFunc(s.Types(), func(t string) bool { return t == "null" })
	return len(ts) == 1 && ts[0] == name
}

// closed reports whether the object refuses properties it does not list.
func (s *Schema) closed() bool {
	b, ok := s.AdditionalProperties.(bool)
	return ok && !b
}

type rawScheme struct {
	Credential string `yaml:"x-gpuhub-credential"`
}

type rawMedia struct {
	Schema  *Schema `yaml:"schema"`
	Example any     `yaml:"example"`
}

type rawOp struct {
	OperationID string              `yaml:"operationId"`
	Parameters  []*Param            `yaml:"parameters"`
	Security    *[]map[string][]any `yaml:"security"`
	Access      string              `yaml:"x-gpuhub-access"`
	Subject     string              `yaml:"x-gpuhub-subject"`
	RequestBody *struct {
		Content map[string]rawMedia `yaml:"content"`
	} `yaml:"requestBody"`
	Responses map[string]struct {
		Ref     string              `yaml:"$ref"`
		Content map[string]rawMedia `yaml:"content"`
	} `yaml:"responses"`
}

type rawDoc struct {
	Servers    []struct{ URL string } `yaml:"servers"`
	Security   []map[string][]any     `yaml:"security"`
	Paths      map[string]map[string]yaml.Node
	Components struct {
		SecuritySchemes map[string]rawScheme `yaml:"securitySchemes"`
		Parameters      map[string]*Param    `yaml:"parameters"`
		Schemas         map[string]*Schema   `yaml:"schemas"`
	} `yaml:"components"`
}

var methods = []string{"get", "put", "post", "delete", "patch", "head"}

// Load reads and checks an OpenAPI document: every operation states x-gpuhub-access, every security scheme
// its credential, and every reference resolves.
func Load(path string) (*Document, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var raw rawDoc
	if err := yaml.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	doc := &Document{}
	if len(raw.Servers) > 0 {
		doc.Base = strings.TrimSuffix(raw.Servers[0].URL, "/")
	}
	creds := func(sec []map[string][]any) ([]string, error) {
		var out []string
		for _, alt := range sec {
			for name := range alt {
				s, ok := raw.Components.SecuritySchemes[name]
				if !ok || s.Credential == "" {
					return nil, fmt.Errorf("security scheme %q is not defined with x-gpuhub-credential", name)
				}
				if !slices.Contains(out, s.Credential) {
					out = append(out, s.Credential)
				}
			}
		}
		slices.Sort(out)
		return out, nil
	}
	for path, item := range raw.Paths {
		var shared []*Param
		if n, ok := item["parameters"]; ok {
			if err := n.Decode(&shared); err != nil {
				return nil, fmt.Errorf("%s: parameters: %w", path, err)
			}
		}
		for _, m := range methods {
			n, ok := item[m]
			if !ok {
				continue
			}
			var ro rawOp
			if err := n.Decode(&ro); err != nil {
				return nil, fmt.Errorf("%s %s: %w", m, path, err)
			}
			op := &Operation{Method: strings.ToUpper(m), Path: path, ID: ro.OperationID, Subject: ro.Subject}
			where := op.String()
			if op.Access, err = ParseAccess(ro.Access); err != nil {
				return nil, fmt.Errorf("%s: x-gpuhub-access: %w", where, err)
			}
			sec := raw.Security
			if ro.Security != nil {
				sec = *ro.Security
			}
			if op.Credentials, err = creds(sec); err != nil {
				return nil, fmt.Errorf("%s: %w", where, err)
			}
			if op.Access.Public() != (len(op.Credentials) == 0) {
				return nil, fmt.Errorf("%s: x-gpuhub-access %q and security %v disagree: public operations take no credential", where, ro.Access, op.Credentials)
			}
			for _, p := range append(slices.Clone(shared), ro.Parameters...) {
				if p.Ref != "" {
					name := strings.TrimPrefix(p.Ref, "#/components/parameters/")
					if p = raw.Components.Parameters[name]; p == nil {
						return nil, fmt.Errorf("%s: unresolved %s", where, name)
					}
				}
				if p.Schema, err = resolve(raw.Components.Schemas, p.Schema); err != nil {
					return nil, fmt.Errorf("%s: parameter %s: %w", where, p.Name, err)
				}
				op.Params = append(op.Params, p)
			}
			if ro.RequestBody != nil {
				if media, ok := ro.RequestBody.Content["application/json"]; ok {
					if op.Body, err = resolve(raw.Components.Schemas, media.Schema); err != nil {
						return nil, fmt.Errorf("%s: request body: %w", where, err)
					}
					op.BodyExample = media.Example
					if op.BodyExample == nil {
						return nil, fmt.Errorf("%s: the JSON request body needs an example (a valid request)", where)
					}
				}
			}
			for code, r := range ro.Responses {
				if _, html := r.Content["text/html"]; html && strings.HasPrefix(code, "2") {
					op.HTML = true
				}
			}
			if op.Subject != "" {
				in, name, _ := strings.Cut(op.Subject, ":")
				if !slices.Contains([]string{"path", "query", "body"}, in) || name == "" {
					return nil, fmt.Errorf("%s: x-gpuhub-subject %q: want path:NAME, query:NAME or body:NAME", where, op.Subject)
				}
			}
			doc.Operations = append(doc.Operations, op)
		}
	}
	slices.SortFunc(doc.Operations, func(a, b *Operation) int { return strings.Compare(a.String(), b.String()) })
	return doc, nil
}

// resolve follows $ref to components/schemas (one level deep for properties and items).
func resolve(schemas map[string]*Schema, s *Schema) (*Schema, error) {
	for depth := 0; s != nil && s.Ref != ""; depth++ {
		name := strings.TrimPrefix(s.Ref, "#/components/schemas/")
		if s = schemas[name]; s == nil || depth > 8 {
			return nil, fmt.Errorf("unresolved schema %s", name)
		}
	}
	if s == nil {
		return &Schema{}, nil
	}
	out := *s
	out.Properties = map[string]*Schema{}
	for k, p := range s.Properties {
		r, err := resolve(schemas, p)
		if err != nil {
			return nil, err
		}
		out.Properties[k] = r
	}
	return &out, nil
}

// Access is an operation's x-gpuhub-access.
type Access struct {
	terms    []string
	services []string
}

// ParseAccess parses the space-separated terms of x-gpuhub-access.
func ParseAccess(s string) (Access, error) {
	var a Access
	if strings.TrimSpace(s) == "" {
		return a, fmt.Errorf("missing: say who may call it (public, any, user, user-self, admin, service:<names>)")
	}
	for _, t := range strings.Fields(s) {
		switch {
		case t == "public" || t == "any" || t == "user" || t == "user-self" || t == "admin":
			a.terms = append(a.terms, t)
		case strings.HasPrefix(t, "service:") && len(t) > len("service:"):
			a.services = append(a.services, strings.Split(strings.TrimPrefix(t, "service:"), ",")...)
		default:
			return a, fmt.Errorf("unknown term %q (public, any, user, user-self, admin, service:<names>)", t)
		}
	}
	if a.Public() && (len(a.terms) > 1 || len(a.services) > 0) {
		return a, fmt.Errorf("public stands alone")
	}
	return a, nil
}

// Public reports whether anyone may call the operation without a credential.
func (a Access) Public() bool { return slices.Contains(a.terms, "public") }

// Allows reports whether caller c may make a request about user subject ("" when the operation names none).
func (a Access) Allows(c Caller, subject string) bool {
	if a.Public() || slices.Contains(a.terms, "any") {
		return true
	}
	if c.Admin && slices.Contains(a.terms, "admin") {
		return true
	}
	if c.Kind == "service" && slices.Contains(a.services, c.Name) {
		return true
	}
	if c.Kind != "user" {
		return false
	}
	if slices.Contains(a.terms, "user") && subject == "" {
		return true
	}
	return slices.Contains(a.terms, "user-self") && (subject == "" || subject == c.Name)
}
