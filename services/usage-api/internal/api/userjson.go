package api

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/gpuhub/gpuhub/services/internal/contract"
	"github.com/gpuhub/gpuhub/services/internal/jsonappend"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/ledger"
)

// The answer of me and users/{name} is encoded by hand: every panel polls it (2,000 a second at 20,000 users),
// and json.Marshal of it (reflection, a map of windows, boxed values) was most of the garbage the collector
// marked under those requests. The encoding is json.Marshal's to the byte (userjson_test.go compares them);
// json.Marshal still has the last word on what this does not write.

// userAnswer is the body of me and users/{name} as writeUser gathers it: contract.UserResponse but for its
// GPUHours, which Hours stands for.
type userAnswer struct {
	contract.UserResponse // GPUHours unused (Hours), History written from the history
	Hours                 hoursAnswer
}

// hoursAnswer is the gpuHours member without the contract's map: the windows today, 7d and 30d, null while
// GPU-hours are unavailable, and, when from or to was given, custom.
type hoursAnswer struct {
	Available    bool
	Windows      ledger.Windows
	Custom       bool
	CustomWindow *contract.Window // nil: null (GPU-hours unavailable)
}

// noGPUs is the usedGPUs of a user who holds nothing. Shared by every answer and never written: a pointer of
// its own would be one more allocation per poll.
var noGPUs float64

// contract is the answer as the contract declares it: what json.Marshal encodes where appendUserJSON cannot.
func (a *userAnswer) contract() contract.UserResponse {
	r := a.UserResponse
	r.GPUHours = map[string]*contract.Window{"today": nil, "7d": nil, "30d": nil}
	if a.Hours.Available {
		r.GPUHours["today"], r.GPUHours["7d"], r.GPUHours["30d"] =
			fromTotals(a.Hours.Windows.Today), fromTotals(a.Hours.Windows.Days7), fromTotals(a.Hours.Windows.Days30)
	}
	if a.Hours.Custom {
		r.GPUHours["custom"] = a.Hours.CustomWindow
	}
	return r
}

// appendUserJSON appends a as json.Marshal encodes a.contract(). ok is false, and what was appended is to be
// dropped, for what json.Marshal refuses or this leaves to it: NaN or an infinity, a time outside the years
// 0-9999, a budget or history that is not JSON, an idleCull.
func appendUserJSON(b []byte, a *userAnswer) (_ []byte, ok bool) {
	e := jsonAppender{b: b}
	r := &a.UserResponse
	e.lit(`{"user":`)
	e.str(r.User)
	e.lit(`,"groups":`)
	if r.Groups == nil {
		e.lit("null")
	} else {
		e.lit("[")
		for i, g := range r.Groups {
			if i > 0 {
				e.lit(",")
			}
			e.str(g)
		}
		e.lit("]")
	}
	e.lit(`,"sampledAt":`)
	if r.SampledAt == nil {
		e.lit("null")
	} else {
		e.time(*r.SampledAt)
	}
	e.lit(`,"intervalSeconds":`)
	e.float(r.IntervalSeconds)
	e.lit(`,"simulated":`)
	e.bool(r.Simulated)
	e.lit(`,"stale":`)
	e.bool(r.Stale)
	if r.StaleReason != "" {
		e.lit(`,"staleReason":`)
		e.str(r.StaleReason)
	}
	e.lit(`,"share":{"allocatedGPUs":`)
	e.float(r.Share.AllocatedGPUs)
	e.lit(`,"usedGPUs":`)
	e.floatPtr(r.Share.UsedGPUs)
	e.lit(`,"memoryUsedBytes":`)
	e.uint(r.Share.MemoryUsedBytes)
	e.lit(`,"memoryTotalBytes":`)
	e.uint(r.Share.MemoryTotalBytes)
	e.lit(`},"servers":`)
	appendList(&e, r.Servers, (*jsonAppender).server)
	e.lit(`,"gpuHours":`)
	e.hours(&a.Hours)
	e.lit(`,"gpuHoursStatus":`)
	e.str(r.GPUHoursStatus)
	if r.GPUHoursReason != "" {
		e.lit(`,"gpuHoursReason":`)
		e.str(r.GPUHoursReason)
	}
	e.lit(`,"notices":`)
	appendList(&e, r.Notices, (*jsonAppender).notice)
	e.lit(`,"budget":`)
	e.raw(r.Budget)
	if r.IdleCull != nil {
		e.bad = true // any value: json.Marshal's to write
	}
	e.lit(`,"idleCull":null`)
	if len(r.History) > 0 {
		e.lit(`,"history":`)
		e.raw(r.History)
	}
	e.lit("}")
	return e.b, !e.bad
}

func (e *jsonAppender) server(s *contract.Server) {
	e.lit(`{"name":`)
	e.str(s.Name)
	e.lit(`,"pod":`)
	e.str(s.Pod)
	e.lit(`,"namespace":`)
	e.str(s.Namespace)
	e.lit(`,"node":`)
	e.str(s.Node)
	e.lit(`,"ready":`)
	e.bool(s.Ready)
	e.lit(`,"allocatedGPUs":`)
	e.float(s.AllocatedGPUs)
	e.lit(`,"usedGPUs":`)
	e.floatPtr(s.UsedGPUs)
	e.lit(`,"stale":`)
	e.bool(s.Stale)
	if s.StaleReason != "" {
		e.lit(`,"staleReason":`)
		e.str(s.StaleReason)
	}
	e.lit(`,"simulated":`)
	e.bool(s.Simulated)
	e.lit(`,"gpus":`)
	appendList(e, s.GPUs, (*jsonAppender).gpu)
	e.lit("}")
}

func (e *jsonAppender) gpu(g *contract.GPU) {
	e.lit(`{"kind":`)
	e.str(string(g.Kind))
	e.lit(`,"resource":`)
	e.str(g.Resource)
	e.lit(`,"product":`)
	e.str(g.Product)
	if g.Profile != "" {
		e.lit(`,"profile":`)
		e.str(g.Profile)
	}
	e.lit(`,"class":`)
	e.str(g.Class)
	e.lit(`,"share":`)
	e.float(g.Share)
	e.lit(`,"shareNumerator":`)
	e.int(g.ShareNumerator)
	e.lit(`,"shareDenominator":`)
	e.int(g.ShareDenominator)
	e.lit(`,"description":`)
	e.str(g.Description)
	if g.UUID != "" {
		e.lit(`,"uuid":`)
		e.str(g.UUID)
	}
	e.lit(`,"smUtilPercent":`)
	e.floatPtr(g.SMUtilPercent)
	e.lit(`,"utilizationSource":`)
	e.str(g.UtilizationSource)
	e.lit(`,"usedGPUs":`)
	e.floatPtr(g.UsedGPUs)
	e.lit(`,"memoryUsedBytes":`)
	e.uint(g.MemoryUsedBytes)
	e.lit(`,"memoryTotalBytes":`)
	e.uint(g.MemoryTotalBytes)
	e.lit(`,"stale":`)
	e.bool(g.Stale)
	if g.StaleReason != "" {
		e.lit(`,"staleReason":`)
		e.str(g.StaleReason)
	}
	if g.UtilizationUnknownReason != "" {
		e.lit(`,"utilizationUnknownReason":`)
		e.str(g.UtilizationUnknownReason)
	}
	e.lit("}")
}

func (e *jsonAppender) notice(n *contract.Notice) {
	e.lit(`{"service":`)
	e.str(n.Service)
	e.lit(`,"kind":`)
	e.str(n.Kind)
	e.lit(`,"reason":`)
	e.str(n.Reason)
	e.lit(`,"message":`)
	e.str(n.Message)
	if !n.Deadline.IsZero() {
		e.lit(`,"deadline":`)
		e.time(n.Deadline)
	}
	e.lit(`,"snoozable":`)
	e.bool(n.Snoozable)
	e.lit(`,"createdAt":`)
	e.time(n.CreatedAt)
	if n.Stops {
		e.lit(`,"stops":true`)
	}
	if !n.StopsSince.IsZero() {
		e.lit(`,"stopsSince":`)
		e.time(n.StopsSince)
	}
	if n.Snoozes != 0 {
		e.lit(`,"snoozes":`)
		e.int(int64(n.Snoozes))
	}
	if n.MaxSnoozes != 0 {
		e.lit(`,"maxSnoozes":`)
		e.int(int64(n.MaxSnoozes))
	}
	e.lit(`,"server":`)
	e.str(n.Server)
	e.lit("}")
}

// hours writes the windows in encoding/json's order of map keys: 30d, 7d, custom, today.
func (e *jsonAppender) hours(h *hoursAnswer) {
	e.lit(`{"30d":`)
	e.totals(h.Available, h.Windows.Days30)
	e.lit(`,"7d":`)
	e.totals(h.Available, h.Windows.Days7)
	if h.Custom {
		e.lit(`,"custom":`)
		if h.CustomWindow == nil {
			e.lit("null")
		} else {
			e.window(h.CustomWindow)
		}
	}
	e.lit(`,"today":`)
	e.totals(h.Available, h.Windows.Today)
	e.lit("}")
}

func (e *jsonAppender) totals(available bool, t ledger.Totals) {
	if !available {
		e.lit("null")
		return
	}
	e.window(&contract.Window{Allocated: t.Allocated, Used: t.Used, UsedUnknown: t.UsedUnknown})
}

func (e *jsonAppender) window(w *contract.Window) {
	e.lit(`{"allocated":`)
	e.float(w.Allocated)
	e.lit(`,"used":`)
	e.float(w.Used)
	e.lit(`,"usedUnknown":`)
	e.float(w.UsedUnknown)
	if w.From != nil {
		e.lit(`,"from":`)
		e.time(*w.From)
	}
	if w.To != nil {
		e.lit(`,"to":`)
		e.time(*w.To)
	}
	if len(w.ByClass) > 0 {
		e.lit(`,"byClass":`)
		appendList(e, w.ByClass, (*jsonAppender).classHours)
	}
	e.lit("}")
}

func (e *jsonAppender) classHours(c *contract.ClassHours) {
	e.lit(`{"kind":`)
	e.str(string(c.Kind))
	e.lit(`,"class":`)
	e.str(c.Class)
	e.lit(`,"allocated":`)
	e.float(c.Allocated)
	e.lit(`,"used":`)
	e.float(c.Used)
	e.lit(`,"usedUnknown":`)
	e.float(c.UsedUnknown)
	e.lit("}")
}

// jsonAppender appends JSON values as json.Marshal writes them. bad is set by the first value json.Marshal
// would refuse; the text is then to be dropped.
type jsonAppender struct {
	b   []byte
	bad bool
}

// appendList writes s as a JSON array (null when nil, as encoding/json does), each element with one.
func appendList[T any](e *jsonAppender, s []T, one func(*jsonAppender, *T)) {
	if s == nil {
		e.lit("null")
		return
	}
	e.lit("[")
	for i := range s {
		if i > 0 {
			e.lit(",")
		}
		one(e, &s[i])
	}
	e.lit("]")
}

// lit appends JSON text as it is.
func (e *jsonAppender) lit(s string) { e.b = append(e.b, s...) }

func (e *jsonAppender) bool(v bool) { e.b = strconv.AppendBool(e.b, v) }

func (e *jsonAppender) int(v int64) { e.b = strconv.AppendInt(e.b, v, 10) }

func (e *jsonAppender) uint(v uint64) { e.b = strconv.AppendUint(e.b, v, 10) }

// float writes f as encoding/json does; NaN and the infinities are bad.
func (e *jsonAppender) float(f float64) {
	var ok bool
	if e.b, ok = jsonappend.Float(e.b, f); !ok {
		e.bad = true
	}
}

func (e *jsonAppender) floatPtr(f *float64) {
	if f == nil {
		e.lit("null")
		return
	}
	e.float(*f)
}

// time writes t as time.Time's MarshalJSON does (RFC 3339 with the nanoseconds that are not zero); a time that
// has no such text (a year past 9999, an offset of a day or more) is bad, as there.
func (e *jsonAppender) time(t time.Time) {
	e.lit(`"`)
	b, err := t.AppendText(e.b)
	if err != nil {
		e.bad = true
		return
	}
	e.b = b
	e.lit(`"`)
}

// str writes s quoted as encoding/json does by default: the names, groups and reasons are the users' own.
func (e *jsonAppender) str(s string) { e.b = jsonappend.String(e.b, s) }

// raw writes JSON text as json.Marshal writes a json.RawMessage: null when nil, else compacted and with <, >,
// &, U+2028 and U+2029 escaped (encoding/json's appendCompact with escaping); text that is not JSON is bad.
func (e *jsonAppender) raw(m json.RawMessage) {
	if m == nil {
		e.lit("null")
		return
	}
	if !json.Valid(m) {
		e.bad = true
		return
	}
	// m is valid: only whitespace outside strings is dropped, and only strings can hold what is escaped.
	b := e.b
	inString, escaped := false, false
	for i := 0; i < len(m); i++ {
		c := m[i]
		switch {
		case escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case c == '"':
			inString = !inString
		case !inString:
			if c == ' ' || c == '\t' || c == '\n' || c == '\r' {
				continue
			}
		case c == '<' || c == '>' || c == '&':
			b = append(b, '\\', 'u', '0', '0', jsonappend.Hex[c>>4], jsonappend.Hex[c&0xF])
			continue
		case c == 0xE2 && i+2 < len(m) && m[i+1] == 0x80 && m[i+2]&^1 == 0xA8: // U+2028, U+2029
			b = append(b, '\\', 'u', '2', '0', '2', jsonappend.Hex[m[i+2]&0xF])
			i += 2
			continue
		}
		b = append(b, c)
	}
	e.b = b
}
