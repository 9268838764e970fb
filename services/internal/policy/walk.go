package policy

import (
	"encoding"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// The walk checks a parsed document against the Go type it will decode into, as yaml.v3's strict decoder
// does (unknown keys, keys set twice, values of the wrong type), but finds every problem instead of the first
// and knows each one's column: yaml.v3 reports a line only, and for some errors none.

type walker struct {
	file string
	errs []*Error
	// seen holds the anchored nodes already checked against a type: an alias is checked once, however many
	// times it is used (a document of nested aliases must not take exponential time).
	seen map[seenKey]bool
}

type seenKey struct {
	node *yaml.Node
	t    reflect.Type
}

var (
	unmarshalerType     = reflect.TypeFor[yaml.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
	nodeType            = reflect.TypeFor[yaml.Node]()
)

func typeOf(into any) reflect.Type {
	t := reflect.TypeOf(into)
	if t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

func (w *walker) add(n *yaml.Node, format string, args ...any) {
	w.errs = append(w.errs, &Error{File: w.file, Line: max(n.Line, 1), Column: max(n.Column, 1), Msg: fmt.Sprintf(format, args...)})
}

// walk checks node n, found at path, against type t.
func (w *walker) walk(n *yaml.Node, path []string, t reflect.Type) {
	if t == nil || len(w.errs) > maxErrors {
		return
	}
	if n.Kind == yaml.AliasNode {
		if n.Alias == nil {
			return
		}
		n = n.Alias
	}
	if n.Anchor != "" {
		k := seenKey{n, t}
		if w.seen[k] {
			return
		}
		w.seen[k] = true
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return // null decodes into anything as its zero value
	}
	if t == nodeType || t.Kind() == reflect.Interface {
		return // takes any YAML
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) || reflect.PointerTo(t).Implements(textUnmarshalerType) {
		w.leaf(n, path, t)
		return
	}
	switch t.Kind() {
	case reflect.Pointer:
		w.walk(n, path, t.Elem())
	case reflect.Struct:
		if w.expect(n, path, yaml.MappingNode, "a mapping of keys to values") {
			w.mapping(n, path, t)
		}
	case reflect.Map:
		if w.expect(n, path, yaml.MappingNode, "a mapping of keys to values") {
			w.mapping(n, path, t)
		}
	case reflect.Slice, reflect.Array:
		if w.expect(n, path, yaml.SequenceNode, "a list") {
			for i, item := range n.Content {
				w.walk(item, appendPath(path, strconv.Itoa(i)), t.Elem())
			}
		}
	default:
		w.leaf(n, path, t)
	}
}

// expect reports a node of another kind than want.
func (w *walker) expect(n *yaml.Node, path []string, want yaml.Kind, what string) bool {
	if n.Kind == want {
		return true
	}
	w.add(n, "%sexpected %s, found %s", where(path), what, describe(n))
	return false
}

// field is a key a struct takes, with the type of its value.
type field struct {
	name string
	t    reflect.Type
}

// fields lists the keys a struct type takes, as yaml.v3 names them, in declaration order, and the value type
// of an inline map that takes every other key (nil when none).
func fields(t reflect.Type) (out []field, rest reflect.Type) {
	for i := range t.NumField() {
		f := t.Field(i)
		if f.PkgPath != "" && !f.Anonymous {
			continue // unexported
		}
		tag := f.Tag.Get("yaml")
		if tag == "" && !strings.Contains(string(f.Tag), ":") {
			tag = string(f.Tag)
		}
		if tag == "-" {
			continue
		}
		name, flags, _ := strings.Cut(tag, ",")
		if strings.Contains(","+flags+",", ",inline,") {
			ft := f.Type
			switch {
			case ft.Kind() == reflect.Struct:
				inner, innerRest := fields(ft)
				out = append(out, inner...)
				if innerRest != nil {
					rest = innerRest
				}
			case ft.Kind() == reflect.Pointer && ft.Elem().Kind() == reflect.Struct:
				inner, innerRest := fields(ft.Elem())
				out = append(out, inner...)
				if innerRest != nil {
					rest = innerRest
				}
			case ft.Kind() == reflect.Map:
				rest = ft.Elem()
			}
			continue
		}
		if f.PkgPath != "" {
			continue // an unexported embedded type without inline
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		out = append(out, field{name: name, t: f.Type})
	}
	return out, rest
}

// mapping checks the keys and values of mapping node n for a struct or map type t.
func (w *walker) mapping(n *yaml.Node, path []string, t reflect.Type) {
	var known []field
	var rest reflect.Type
	if t.Kind() == reflect.Struct {
		known, rest = fields(t)
	}
	first := map[string]*yaml.Node{}
	w.pairs(n, path, t, known, rest, first)
}

func (w *walker) pairs(n *yaml.Node, path []string, t reflect.Type, known []field, rest reflect.Type, first map[string]*yaml.Node) {
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.AliasNode && k.Alias != nil {
			k = k.Alias
		}
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			w.merge(v, path, t, known, rest)
			continue
		}
		if k.Kind != yaml.ScalarNode {
			w.add(k, "%sa key must be a plain name, found %s", where(path), describe(k))
			continue
		}
		name := k.Value
		if prev, dup := first[name]; dup {
			w.add(k, "%q is set twice (first on line %d)", name, prev.Line)
			continue
		}
		first[name] = k
		sub := appendPath(path, name)
		if t.Kind() == reflect.Map {
			w.leafKey(k, path, t.Key())
			w.walk(v, sub, t.Elem())
			continue
		}
		if f, ok := lookup(known, name); ok {
			w.walk(v, sub, f.t)
			continue
		}
		if rest != nil {
			w.walk(v, sub, rest)
			continue
		}
		w.add(k, "%sunknown key %q%s", where(path), name, suggest(name, known))
	}
}

// merge checks the mapping (or list of mappings) a YAML merge key (<<) brings in as if it were written here;
// keys written here override merged ones, so they are not "set twice".
func (w *walker) merge(v *yaml.Node, path []string, t reflect.Type, known []field, rest reflect.Type) {
	if v.Kind == yaml.AliasNode && v.Alias != nil {
		v = v.Alias
	}
	switch v.Kind {
	case yaml.MappingNode:
		if v.Anchor != "" {
			k := seenKey{v, t}
			if w.seen[k] {
				return
			}
			w.seen[k] = true
		}
		w.pairs(v, path, t, known, rest, map[string]*yaml.Node{})
	case yaml.SequenceNode:
		for _, item := range v.Content {
			target := item
			if target.Kind == yaml.AliasNode && target.Alias != nil {
				target = target.Alias
			}
			if target.Kind == yaml.MappingNode {
				w.merge(target, path, t, known, rest)
				continue
			}
			w.add(item, "%sa merge (<<) takes mappings, found %s", where(path), describe(item))
		}
	default:
		w.add(v, "%sa merge (<<) takes a mapping, found %s", where(path), describe(v))
	}
}

func lookup(known []field, name string) (field, bool) {
	for _, f := range known {
		if f.name == name {
			return f, true
		}
	}
	return field{}, false
}

// leafKey checks a map key against the map's key type (a string key takes any name).
func (w *walker) leafKey(k *yaml.Node, path []string, t reflect.Type) {
	if t.Kind() == reflect.String && !reflect.PointerTo(t).Implements(unmarshalerType) &&
		!reflect.PointerTo(t).Implements(textUnmarshalerType) {
		return
	}
	w.leaf(k, path, t)
}

// leaf decodes a scalar (or a value of a type that decodes itself) into a fresh value of t and reports why
// it does not fit.
func (w *walker) leaf(n *yaml.Node, path []string, t reflect.Type) {
	err := n.Decode(reflect.New(t).Interface())
	if err == nil {
		return
	}
	var te *yaml.TypeError
	if errors.As(err, &te) {
		w.add(n, "%sexpected %s, found %s", where(path), wantOf(t), describe(n))
		return
	}
	w.add(n, "%s%s", where(path), err.Error())
}

// wantOf names what a value of t looks like in YAML.
func wantOf(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "a whole number"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return "a whole number, 0 or more"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "text"
	case reflect.Struct, reflect.Map:
		return "a mapping of keys to values"
	case reflect.Slice, reflect.Array:
		return "a list"
	}
	return "a value of type " + t.String()
}

// describe names what a node is, for "expected X, found Y".
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.DocumentNode:
		return "a document"
	}
	v := n.Value
	if utf8Len := len([]rune(v)); utf8Len > 40 {
		v = string([]rune(v)[:40]) + "..."
	}
	return strconv.Quote(v)
}

// where prefixes a message with the path it is under, for errors whose key alone is ambiguous. A key that is
// empty or holds a dot, a space or a quote is quoted: default.weights."gpu H100-80GB-HBM3".
func where(path []string) string {
	if len(path) == 0 {
		return ""
	}
	parts := make([]string, len(path))
	for i, p := range path {
		parts[i] = p
		if p == "" || strings.ContainsAny(p, ". \t\"'") || strconv.Quote(p) != `"`+p+`"` {
			parts[i] = strconv.Quote(p)
		}
	}
	return strings.Join(parts, ".") + ": "
}

func appendPath(path []string, key string) []string {
	out := make([]string, len(path), len(path)+1)
	copy(out, path)
	return append(out, key)
}

// suggest names the known key closest to a misspelled one, else lists the known keys.
func suggest(name string, known []field) string {
	if len(known) == 0 {
		return ""
	}
	best, bestDist := "", -1
	for _, f := range known {
		d := distance(strings.ToLower(name), strings.ToLower(f.name))
		if bestDist < 0 || d < bestDist {
			best, bestDist = f.name, d
		}
	}
	if bestDist <= max(1, len(best)/3) {
		return fmt.Sprintf(" (did you mean %q?)", best)
	}
	names := make([]string, len(known))
	for i, f := range known {
		names[i] = f.name
	}
	return "; the keys here are " + strings.Join(names, ", ")
}

// distance is the Levenshtein distance between a and b.
func distance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}

// locate places an error of a Validate hook: a FieldError at the node its path names, anything else at the
// top of the document.
func (w *walker) locate(root *yaml.Node, err error) *Error {
	var fe *FieldError
	if !errors.As(err, &fe) {
		return &Error{File: w.file, Line: max(root.Line, 1), Column: max(root.Column, 1), Msg: err.Error()}
	}
	n := root
	for i, key := range fe.Path {
		k, v := child(n, key)
		if v == nil {
			break
		}
		if fe.Key && i == len(fe.Path)-1 && k != nil {
			n = k
			break
		}
		n = v
	}
	return &Error{File: w.file, Line: max(n.Line, 1), Column: max(n.Column, 1), Msg: where(fe.Path) + fe.Msg}
}

// child finds key (a mapping key, or a sequence index) under n, looking through aliases and merges; k is the
// key node (nil in a sequence).
func child(n *yaml.Node, key string) (k, v *yaml.Node) {
	return childDepth(n, key, 0)
}

func childDepth(n *yaml.Node, key string, depth int) (k, v *yaml.Node) {
	if depth > 8 {
		return nil, nil
	}
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	switch n.Kind {
	case yaml.SequenceNode:
		i, err := strconv.Atoi(key)
		if err != nil || i < 0 || i >= len(n.Content) {
			return nil, nil
		}
		v = n.Content[i]
		if v.Kind == yaml.AliasNode && v.Alias != nil {
			v = v.Alias
		}
		return nil, v
	case yaml.MappingNode:
		var merges []*yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			kn, vn := n.Content[i], n.Content[i+1]
			if kn.Kind == yaml.ScalarNode && kn.ShortTag() == "!!merge" {
				merges = append(merges, vn)
				continue
			}
			if kn.Kind == yaml.ScalarNode && kn.Value == key {
				if vn.Kind == yaml.AliasNode && vn.Alias != nil {
					vn = vn.Alias
				}
				return kn, vn
			}
		}
		for _, m := range merges {
			if m.Kind == yaml.AliasNode && m.Alias != nil {
				m = m.Alias
			}
			items := []*yaml.Node{m}
			if m.Kind == yaml.SequenceNode {
				items = m.Content
			}
			for _, item := range items {
				if k, v := childDepth(item, key, depth+1); v != nil {
					return k, v
				}
			}
		}
	}
	return nil, nil
}
