package api

import (
	"strconv"
	"sync"

	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/admit"
	"github.com/gpuhub/gpuhub/services/internal/jsonscan"
)

// decodeAdmit decodes an admission request as the Hub glue writes it (user, server, groups, pod, profile, or
// resources and nodeSelector instead of pod; keys spelled so, once each; strings without escapes; whole GPU
// counts) in one pass,
// and reports false for anything else, which json.Decoder then decodes with its rules and errors: a waitlist
// choice, userOptions, null, another key. Its result is json.Decoder's for the same body; like the decoder, it
// reads one value and leaves what follows it.
//
// An admission is the request 64 spawns at once wait on, one after the other on a busy core; json.Decoder's
// reflection and its map handling were a fifth of the handler's CPU.
func decodeAdmit(body []byte) (admit.Request, bool) {
	d := scan{jsonscan.Scanner{B: body}}
	var r admit.Request
	var pod *podGPUs
	var seen uint8
	ok := d.Object(func(key []byte) bool {
		var bit uint8
		ok := false
		switch string(key) {
		case "user":
			bit = 1
			r.User, ok = d.text()
		case "server":
			bit = 2
			r.Server, ok = d.text()
		case "profile":
			bit = 4
			r.Profile, ok = d.text()
		case "groups":
			bit = 8
			r.Groups, ok = sharedValue(&d, &sharedGroups, (*scan).skipStrings, (*scan).strings)
		case "resources":
			bit = 16
			r.Resources, ok = sharedValue(&d, &sharedResources, (*scan).skipObject,
				func(d *scan) (map[string]int64, bool) { return object(d, (*scan).count) })
		case "nodeSelector":
			bit = 32
			r.NodeSelector, ok = sharedValue(&d, &sharedSelectors, (*scan).skipObject,
				func(d *scan) (map[string]string, bool) { return object(d, (*scan).text) })
		case "pod":
			bit = 64
			pod, ok = sharedValue(&d, &sharedPods, (*scan).Skip, (*scan).pod)
		}
		if !ok || seen&bit != 0 { // another key, or one given twice: json.Decoder's rules
			return false
		}
		seen |= bit
		return true
	})
	if !ok {
		return admit.Request{}, false
	}
	if seen&64 != 0 {
		if seen&(16|32) != 0 || pod == nil { // both ways, or "pod": null: decodeAdmitJSON's rules
			return admit.Request{}, false
		}
		r.Resources, r.NodeSelector, r.FromPod = pod.resources, pod.nodeSelector, true
	}
	return r, true
}

// pod reads the glue's pod through encoding/json, once per distinct text (sharedValue): every spawn of a
// profile sends the same one.
func (d *scan) pod() (*podGPUs, bool) {
	start := d.I
	if !d.Skip() {
		return nil, false
	}
	raw := d.B[start:d.I]
	if string(raw) == "null" {
		return nil, true
	}
	p, err := podRequest(raw)
	return &p, err == nil
}

// scan is jsonscan's Scanner with the admission request's values.
type scan struct{ jsonscan.Scanner }

func (d *scan) text() (string, bool) {
	s, ok := d.Str()
	return string(s), ok
}

// strings reads an array of strings; [] is an empty slice, not nil (nil groups mean "ask the directory").
func (d *scan) strings() ([]string, bool) {
	out := []string{}
	ok := d.Array(func() bool {
		s, ok := d.text()
		out = append(out, s)
		return ok
	})
	return out, ok
}

// count reads a whole number (no fraction, no exponent: json refuses those for an int64).
func (d *scan) count() (int64, bool) {
	num, integer, ok := d.Number()
	if !ok || !integer {
		return 0, false
	}
	v, err := strconv.ParseInt(string(num), 10, 64)
	return v, err == nil
}

// object reads an object whose values value reads; a key given twice is left to json.
func object[V any](d *scan, value func(*scan) (V, bool)) (map[string]V, bool) {
	out := map[string]V{}
	ok := d.Object(func(key []byte) bool {
		v, ok := value(d)
		n := len(out)
		out[string(key)] = v
		return ok && len(out) > n
	})
	return out, ok
}

// The groups, resources and node selectors of the admissions decoded so far, by their text: a hub has a few
// profiles and group sets, and every spawn of one sends the same text, so most admissions reuse a value
// instead of allocating its slice or map and strings (each allocation, on a core that has just served 63
// other spawns, is memory out of its cache). The values are shared: admit.Request's are read, never changed.
var (
	sharedGroups    sharedValues[[]string]
	sharedResources sharedValues[map[string]int64]
	sharedSelectors sharedValues[map[string]string]
	sharedPods      sharedValues[*podGPUs]
)

// maxSharedValues bounds each kind's texts kept, and maxSharedText the length of one (a profile's selector
// is a few dozen bytes); past them, a text is decoded each time.
const (
	maxSharedValues = 256
	maxSharedText   = 1 << 10
)

type sharedValues[V any] struct {
	mu sync.Mutex
	m  map[string]V
}

// sharedValue reads a value whose text skip passes over: the value decoded from the same text before, else
// decode's.
func sharedValue[V any](d *scan, c *sharedValues[V], skip func(*scan) bool, decode func(*scan) (V, bool)) (V, bool) {
	d.Space()
	start := d.I
	if !skip(d) {
		var zero V
		return zero, false
	}
	text := d.B[start:d.I]
	c.mu.Lock()
	v, ok := c.m[string(text)] // no allocation for the lookup
	c.mu.Unlock()
	if ok {
		return v, true
	}
	d.I = start
	if v, ok = decode(d); !ok {
		return v, false
	}
	c.mu.Lock()
	if c.m == nil {
		c.m = map[string]V{}
	}
	if len(c.m) < maxSharedValues && len(text) <= maxSharedText {
		c.m[string(text)] = v
	}
	c.mu.Unlock()
	return v, true
}

// skipStrings passes over what strings reads, without keeping it.
func (d *scan) skipStrings() bool {
	return d.Array(func() bool {
		_, ok := d.Str()
		return ok
	})
}

// skipObject passes over an object of strings or whole numbers (what object reads with text or count), without
// keeping it; whether its values are the right kind is decode's to say, on the text's first sight.
func (d *scan) skipObject() bool {
	return d.Object(func([]byte) bool {
		d.Space()
		if d.I < len(d.B) && d.B[d.I] == '"' {
			_, ok := d.Str()
			return ok
		}
		_, _, ok := d.Number()
		return ok
	})
}
