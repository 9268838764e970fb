package api

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuhub/gpuhub/services/internal/contract"
	"github.com/gpuhub/gpuhub/services/internal/golden"
	"github.com/gpuhub/gpuhub/services/internal/notice"
	"github.com/gpuhub/gpuhub/services/internal/server"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/ledger"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/usage"
)

// TestUserAnswerGolden pins the bytes of me and users/{name} answers (status, headers, body) over the test
// server: the encoding of these answers is hand-written (appendUserJSON), and the panel and the tools read them.
func TestUserAnswerGolden(t *testing.T) {
	cases := map[string]struct {
		path, token string
		prepare     func(*testLedger)
	}{
		"me":                     {path: "api/v1/me", token: "alice-token"},
		"me-head":                {path: "api/v1/me", token: "alice-token"},
		"me-history-false":       {path: "api/v1/me?history=false&since=nonsense", token: "alice-token"},
		"me-since":               {path: "api/v1/me?since=2026-11-22T10:29:00Z&history=true", token: "alice-token"},
		"me-tz":                  {path: "api/v1/me?tz=Asia/Kolkata", token: "alice-token"},
		"me-custom":              {path: "api/v1/me?from=2026-11-22T00:00:00Z&to=2026-11-22T06:30:00Z", token: "alice-token"},
		"me-custom-empty":        {path: "api/v1/me?from=2026-11-23T00:00:00Z&to=2026-11-24T00:00:00Z", token: "alice-token"},
		"me-custom-default-from": {path: "api/v1/me?to=2026-11-22T06:00:00Z&tz=UTC", token: "alice-token"},
		"bob-by-admin":           {path: "api/v1/users/bob", token: "root-token"},
		"alice-by-admin-custom":  {path: "api/v1/users/alice?from=2026-11-21T00:00:00Z", token: "root-token"},
		"ledger-down": {path: "api/v1/me?from=2026-11-22T00:00:00Z", token: "alice-token", prepare: func(l *testLedger) {
			err := errors.New(`the ledger database cannot be reached (retrying every 30 s) <&>`)
			l.down.Store(&err)
		}},
		"ledger-down-no-custom": {path: "api/v1/users/bob", token: "root-token", prepare: func(l *testLedger) {
			err := errors.New("the ledger database cannot be reached")
			l.down.Store(&err)
		}},
		"custom-hours-fail": {path: "api/v1/me?from=2026-11-22T00:00:00Z", token: "alice-token", prepare: func(l *testLedger) {
			err := errors.New("database is locked")
			l.hoursErr.Store(&err)
		}},
		"bad-tz":      {path: "api/v1/me?tz=Mars/Olympus", token: "alice-token"},
		"bad-history": {path: "api/v1/me?history=yes", token: "alice-token"},
		"bad-since":   {path: "api/v1/me?since=yesterday", token: "alice-token"},
		"bad-from":    {path: "api/v1/me?from=yesterday&to=2026-11-22T06:30:00Z", token: "alice-token"},
		"bad-window":  {path: "api/v1/me?from=2026-11-22T06:30:00Z&to=2026-11-22T00:00:00Z", token: "alice-token"},
		"not-a-user":  {path: "api/v1/users/zed", token: "root-token"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			srv, led := testServerWithLedger(t)
			if tc.prepare != nil {
				tc.prepare(led)
			}
			method := http.MethodGet
			if strings.HasSuffix(name, "-head") {
				method = http.MethodHead
			}
			req := httptest.NewRequestWithContext(t.Context(), method, prefix+tc.path, nil)
			req.Header.Set("Authorization", "token "+tc.token)
			rec := httptest.NewRecorder()
			srv.Config.Handler.ServeHTTP(rec, req)
			golden.Check(t, "user/"+name+".txt", answerText(rec))
		})
	}
}

// answerText is an answer as a golden file holds it: status, headers, a blank line and the body.
func answerText(rec *httptest.ResponseRecorder) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d\n", rec.Code)
	keys := make([]string, 0, len(rec.Header()))
	for k := range rec.Header() {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "%s: %s\n", k, strings.Join(rec.Header()[k], ", "))
	}
	b.WriteString("\n")
	b.Write(rec.Body.Bytes())
	return b.String()
}

// userJSONCases are answers for the equivalence of appendUserJSON and json.Marshal: every member, the omitted
// ones, nil and empty lists, what strings and numbers encoding/json escapes or writes in e notation, and what
// json.Marshal refuses.
func userJSONCases() map[string]userAnswer {
	t0 := time.Date(2026, 11, 22, 10, 30, 0, 0, time.UTC)
	berlin := time.Date(2026, 11, 22, 11, 30, 0, 123456789, time.FixedZone("CET", 3600))
	kolkata := time.Date(2026, 11, 22, 16, 0, 0, 500, time.FixedZone("IST", 5*3600+1800))
	ok := func(a userAnswer) userAnswer {
		a.User, a.SampledAt, a.IntervalSeconds, a.GPUHoursStatus = "alice", &t0, 5, "ok"
		if a.Groups == nil {
			a.Groups = []string{"physics"}
		}
		if a.Servers == nil {
			a.Servers = []contract.Server{}
		}
		if a.Notices == nil {
			a.Notices = []contract.Notice{}
		}
		if a.Share.UsedGPUs == nil {
			a.Share.UsedGPUs = &noGPUs
		}
		a.Hours.Available, a.Hours.Windows = true, ledger.Windows{Today: ledger.Totals{Allocated: 0.5, Used: 0.25},
			Days7: ledger.Totals{Allocated: 7.25, Used: 1.5, UsedUnknown: 4.25}, Days30: ledger.Totals{Allocated: 123456.789, Used: 1e-7, UsedUnknown: 1e21}}
		return a
	}
	mig := contract.GPU{Kind: "mig", Resource: "nvidia.com/mig-3g.20gb", Product: "NVIDIA-A100-SXM4-40GB", Profile: "3g.20gb",
		Class: "mig A100-SXM4-40GB 3g.20gb", Share: 3.0 / 7, ShareNumerator: 3, ShareDenominator: 7, Description: "3g.20gb MIG instance",
		UUID: "MIG-7d0c6b5e", SMUtilPercent: f(70), UtilizationSource: "dcgm", UsedGPUs: f(0.3), MemoryUsedBytes: 12 << 30,
		MemoryTotalBytes: 20 << 30, UtilizationScale: 3.0 / 7}
	shared := contract.GPU{Kind: "shared", Resource: "nvidia.com/gpu.shared", Product: "Tesla-T4", Class: "shared Tesla-T4", Share: 0.25,
		ShareNumerator: 1, ShareDenominator: 4, UtilizationSource: "nvml", Stale: true, StaleReason: "the agent on gpu-t4-3 has not answered for 20 s",
		UtilizationUnknownReason: "telemetry is stale", MemoryTotalBytes: math.MaxUint64}
	nasty := "<script>alert('x')</script> & \"q\" \\ \u2028\u2029 \x00\x01\x1f\x7f \b\f\n\r\t é 日本 \xff\xfe\xc3 \U0001F600"
	floats := []float64{0, math.Copysign(0, -1), 1e-7, -1e-7, 1e-6, 9.999999e-7, 0.5, 123456.789, 3.0 / 7, 1e20, 1e21, -1e21,
		1.5e300, math.MaxFloat64, math.SmallestNonzeroFloat64, 100, 1e6, 12345678901234567890}
	var floatServers []contract.Server
	for _, x := range floats {
		floatServers = append(floatServers, contract.Server{AllocatedGPUs: x, UsedGPUs: f(-x), GPUs: []contract.GPU{{Share: x, SMUtilPercent: f(x)}}})
	}
	custom := &contract.Window{Allocated: 3.5, Used: 0.5, UsedUnknown: 2.5, From: &t0, To: &berlin,
		ByClass: []contract.ClassHours{{Kind: "mig", Class: "mig A100-SXM4-40GB 3g.20gb", Allocated: 3.5, Used: 0.5, UsedUnknown: 2.5}, {Kind: "shared", Class: nasty}}}
	return map[string]userAnswer{
		"zero":          {},
		"no sample yet": {UserResponse: contract.UserResponse{User: "alice", Groups: []string{}, Servers: []contract.Server{}, Notices: []contract.Notice{}, GPUHoursStatus: "ok"}, Hours: hoursAnswer{Available: true}},
		"holds nothing": ok(userAnswer{}),
		"mig and shared servers": ok(userAnswer{UserResponse: contract.UserResponse{Simulated: true,
			Share: contract.Share{AllocatedGPUs: 3.0/7 + 0.25, UsedGPUs: f(0.425), MemoryUsedBytes: 15 << 30, MemoryTotalBytes: 36 << 30},
			Servers: []contract.Server{
				{Pod: "jupyter-alice", Namespace: "jhub", Node: "gpu-a100-0", Ready: true, AllocatedGPUs: 3.0 / 7, UsedGPUs: f(0.3), GPUs: []contract.GPU{mig}},
				{Name: "big", Pod: "jupyter-alice--big", Namespace: "jhub", Node: "gpu-t4-3", AllocatedGPUs: 0.5, Stale: true, StaleReason: "stale",
					Simulated: true, GPUs: []contract.GPU{shared, shared}},
				{Name: "starting", GPUs: nil},
				{Name: "none", GPUs: []contract.GPU{}},
			}}}),
		"stale with reasons": ok(userAnswer{UserResponse: contract.UserResponse{Stale: true, StaleReason: nasty,
			Servers: []contract.Server{{Name: nasty, Stale: true, StaleReason: nasty, GPUs: []contract.GPU{{Kind: "gpu", Stale: true, StaleReason: nasty, UtilizationUnknownReason: nasty}}}}}}),
		"names that need escaping": ok(userAnswer{UserResponse: contract.UserResponse{User: nasty, Groups: []string{nasty, "", "a&b", "\u2028"}}}),
		"nil lists":                {UserResponse: contract.UserResponse{User: "alice", GPUHoursStatus: "ok"}},
		"notices": ok(userAnswer{UserResponse: contract.UserResponse{Notices: []contract.Notice{
			{Server: "", Notice: notice.Notice{Service: "gpu-quota", Kind: notice.KindBudget, Reason: "budget_exhausted", Message: "over <budget> & \"stops\"",
				Deadline: berlin, CreatedAt: t0}},
			{Server: nasty, Notice: notice.Notice{Service: "gpu-culler", Kind: notice.KindIdle, Reason: nasty, Message: nasty, Snoozable: true,
				CreatedAt: kolkata, Stops: true, StopsSince: berlin, Snoozes: 2, MaxSnoozes: 3}},
			{Notice: notice.Notice{Snoozes: -1}},
		}}}),
		"budget":             ok(userAnswer{UserResponse: contract.UserResponse{Budget: json.RawMessage(aliceQuota)}}),
		"budget unavailable": ok(userAnswer{UserResponse: contract.UserResponse{Budget: json.RawMessage(`{"status":"unavailable","reason":"the quota service cannot be reached"}`)}}),
		"budget to compact and escape": ok(userAnswer{UserResponse: contract.UserResponse{Budget: json.RawMessage(
			" {\n\t\"reason\" : \"a <b> & c\u2028d\u2029 \\\"q\\\" \\\\ \\u003c\\n\", \"n\": [ 1, 2.5e3 , -0, null, true, false, {} , [] ],\r\n \"\xe2\x80\": \"\xff\" } \n")}}),
		"budget a string": ok(userAnswer{UserResponse: contract.UserResponse{Budget: json.RawMessage(`"<&>"`)}}),
		"history":         ok(userAnswer{UserResponse: contract.UserResponse{History: json.RawMessage(`[ {"t": "2026-11-22T10:30:00Z"} ]`)}}),
		"gpu-hours unavailable": ok(userAnswer{UserResponse: contract.UserResponse{GPUHoursStatus: "unavailable", GPUHoursReason: "GPU-hours are unavailable: <down> & out; live numbers are current."},
			Hours: hoursAnswer{}}),
		"gpu-hours unavailable, custom asked": {UserResponse: contract.UserResponse{User: "alice", GPUHoursStatus: "unavailable", GPUHoursReason: "down"}, Hours: hoursAnswer{Custom: true}},
		"custom window":                       ok(userAnswer{Hours: hoursAnswer{Custom: true, CustomWindow: custom}}),
		"custom window, nothing recorded":     ok(userAnswer{Hours: hoursAnswer{Custom: true, CustomWindow: &contract.Window{From: &t0, To: &t0, ByClass: []contract.ClassHours{}}}}),
		"floats": ok(userAnswer{UserResponse: contract.UserResponse{IntervalSeconds: 1e-7, Share: contract.Share{AllocatedGPUs: 1e21, UsedGPUs: f(9.999999e-7)},
			Servers: floatServers}}),
		// What json.Marshal refuses: the handler answers its error.
		"NaN":                  ok(userAnswer{UserResponse: contract.UserResponse{Share: contract.Share{AllocatedGPUs: math.NaN()}}}),
		"infinity in a server": ok(userAnswer{UserResponse: contract.UserResponse{Servers: []contract.Server{{UsedGPUs: f(math.Inf(1))}}}}),
		"infinity in hours":    ok(userAnswer{Hours: hoursAnswer{Custom: true, CustomWindow: &contract.Window{Used: math.Inf(-1)}}}),
		"year 10000":           ok(userAnswer{UserResponse: contract.UserResponse{Notices: []contract.Notice{{Notice: notice.Notice{CreatedAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}}}}}),
		"offset of a day":      ok(userAnswer{UserResponse: contract.UserResponse{Notices: []contract.Notice{{Notice: notice.Notice{CreatedAt: time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("", 24*3600))}}}}}),
		"budget not JSON":      ok(userAnswer{UserResponse: contract.UserResponse{Budget: json.RawMessage(`{"a":`)}}),
		"budget empty":         ok(userAnswer{UserResponse: contract.UserResponse{Budget: json.RawMessage{}}}),
		// What appendUserJSON leaves to json.Marshal.
		"idleCull": ok(userAnswer{UserResponse: contract.UserResponse{IdleCull: map[string]any{"at": "<now>"}}}),
	}
}

// checkUserJSON: appendUserJSON writes what json.Marshal writes of the contract's answer, or refuses what
// json.Marshal refuses (and an idleCull, which it leaves to json.Marshal).
func checkUserJSON(t *testing.T, a *userAnswer) {
	t.Helper()
	want, err := json.Marshal(a.contract())
	got, ok := appendUserJSON([]byte("prefix"), a)
	switch {
	case !ok && (err != nil || a.IdleCull != nil):
	case !ok:
		t.Fatalf("appendUserJSON refused what json.Marshal writes: %s", want)
	case err != nil:
		t.Fatalf("appendUserJSON wrote %s; json.Marshal refuses it: %v", got, err)
	case !strings.HasPrefix(string(got), "prefix"):
		t.Fatalf("appendUserJSON did not append: %s", got)
	default:
		if diff := cmp.Diff(string(want), string(got[len("prefix"):])); diff != "" {
			t.Fatalf("appendUserJSON (-json.Marshal +appendUserJSON):\n%s", diff)
		}
	}
}

func TestAppendUserJSON(t *testing.T) {
	for name, a := range userJSONCases() {
		t.Run(name, func(t *testing.T) { checkUserJSON(t, &a) })
	}
}

// TestWriteUserJSON: the whole answer (status, headers, body) is what it was when json.Marshal encoded it, the
// history spliced in as the last member; json.Marshal's error is a 500 with its message, as it was.
func TestWriteUserJSON(t *testing.T) {
	state := usage.NewState(usage.NewHistory(time.Hour, 5*time.Second))
	for i := range 3 {
		state.Publish(&usage.View{SampledAt: now.Add(time.Duration(i-2) * 5 * time.Second), Interval: 5 * time.Second,
			Users: map[string]*usage.User{"alice": {Name: "alice", Share: usage.Share{AllocatedGPUs: 3.0 / 7, UsedGPUs: f(0.1 * float64(i))}}}})
	}
	h := &handler{opts: Options{State: state}}
	// marshalled is the answer as writeUserJSON wrote it with json.Marshal.
	marshalled := func(a *userAnswer, withHistory bool) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		resp := a.contract()
		resp.History = nil
		body, err := json.Marshal(resp)
		if err != nil {
			server.WriteError(rec, http.StatusInternalServerError, "encode answer: %v", err)
			return rec
		}
		b := body[:len(body)-1] // reopen the object
		b = append(b, `,"history":`...)
		if withHistory {
			b = state.History.AppendUserJSON(b, resp.User, time.Time{})
		} else {
			b = append(b, "[]"...)
		}
		b = append(b, "}\n"...)
		rec.Header().Set("Content-Type", "application/json")
		rec.Header().Set("Cache-Control", "no-store")
		rec.Header().Set("Content-Length", fmt.Sprint(len(b)))
		rec.WriteHeader(http.StatusOK)
		_, _ = rec.Write(b)
		return rec
	}
	for name, a := range userJSONCases() {
		for _, withHistory := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/history=%t", name, withHistory), func(t *testing.T) {
				want := answerText(marshalled(&a, withHistory))
				rec := httptest.NewRecorder()
				h.writeUserJSON(rec, &a, withHistory, time.Time{})
				if diff := cmp.Diff(want, answerText(rec)); diff != "" {
					t.Errorf("answer (-json.Marshal +writeUserJSON):\n%s", diff)
				}
			})
		}
	}
}

// FuzzUserJSON fills answers from the fuzzer's bytes, every field of every type the answer holds (a field added
// to the contract is filled too, and fails here until appendUserJSON writes it), and checks them as
// TestAppendUserJSON does.
func FuzzUserJSON(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("\x01\x02\x03\x04\x05\x06\x07\x08<>&\"\\\xe2\x80\xa8\xff"))
	f.Add([]byte(strings.Repeat("\xff\x00\x7f\x80\x13\x37", 64)))
	r := rand.New(rand.NewPCG(1, 2))
	for range 200 { // random answers, compared on every go test
		b := make([]byte, r.IntN(2048))
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var a userAnswer
		(&filler{data: data}).fill(reflect.ValueOf(&a).Elem())
		checkUserJSON(t, &a)
	})
}

// filler makes values from fuzz input: each choice takes the next bytes (zeros once they run out).
type filler struct{ data []byte }

func (f *filler) next() byte {
	if len(f.data) == 0 {
		return 0
	}
	b := f.data[0]
	f.data = f.data[1:]
	return b
}

func (f *filler) uint64() uint64 {
	var b [8]byte
	for i := range b {
		b[i] = f.next()
	}
	return binary.LittleEndian.Uint64(b[:])
}

// What the filler chooses from; values json.Marshal refuses are rare choices, so that most answers get compared.
var (
	fuzzStrings = []string{"", "alice", "<>&", "\u2028\u2029", "\"\\/", "\x00\x1f\x7f", "\xff", "é日本\U0001F600"}
	fuzzFloats  = []float64{0, math.Copysign(0, -1), 1e-7, 1e-6, 9.999999e-7, 0.5, 3.0 / 7, 123456.789, 1e20, 1e21, 1e300, math.MaxFloat64,
		math.SmallestNonzeroFloat64}
	badFloats = []float64{math.NaN(), math.Inf(1), math.Inf(-1)}
	fuzzRaw   = []string{aliceQuota, `null`, ` { "a" : [ 1 , "<\u2028>" ] } `, `"\u003c&"`, "[\"\xe2\x80\xa9\xff\"]", "\t1e5\n"}
	badRaw    = []string{`{`, ``, `1 2`, `nul`}
	fuzzLoc   = []*time.Location{time.UTC, time.FixedZone("CET", 3600), time.FixedZone("", -(9*3600 + 30*60))}
	badTimes  = []time.Time{time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("", 24*3600))}
)

const (
	minJSONUnix = -62135596800 // 0001-01-01T00:00:00Z
	maxJSONUnix = 253402300799 // 9999-12-31T23:59:59Z
)

func (f *filler) string() string {
	n := f.next()
	if n < 128 {
		return fuzzStrings[int(n)%len(fuzzStrings)]
	}
	n = min(n-128, byte(min(len(f.data), 127)))
	s := string(f.data[:n])
	f.data = f.data[n:]
	return s
}

func (f *filler) fill(v reflect.Value) {
	switch v.Type() {
	case reflect.TypeFor[time.Time]():
		switch n := f.next(); {
		case n%4 == 0: // zero
		case n == 255:
			v.Set(reflect.ValueOf(badTimes[int(f.next())%len(badTimes)]))
		default:
			sec := minJSONUnix + int64(f.uint64()%(maxJSONUnix-minJSONUnix))
			v.Set(reflect.ValueOf(time.Unix(sec, int64(f.next())*3_921_569).In(fuzzLoc[int(f.next())%len(fuzzLoc)])))
		}
		return
	case reflect.TypeFor[json.RawMessage]():
		switch n := f.next(); {
		case n < 32: // nil
		case n < 240:
			v.SetBytes([]byte(fuzzRaw[int(n)%len(fuzzRaw)]))
		case n < 248:
			v.SetBytes([]byte(badRaw[int(n)%len(badRaw)]))
		default:
			v.SetBytes([]byte(f.string()))
		}
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(f.string())
	case reflect.Bool:
		v.SetBool(f.next()&1 == 1)
	case reflect.Int, reflect.Int64:
		v.SetInt(int64(f.uint64()) >> (f.next() % 64))
	case reflect.Uint64:
		v.SetUint(f.uint64() >> (f.next() % 64))
	case reflect.Float64:
		switch n := f.next(); {
		case n < 224:
			v.SetFloat(fuzzFloats[int(n)%len(fuzzFloats)])
		case n < 254:
			v.SetFloat(math.Float64frombits(f.uint64()))
		default:
			v.SetFloat(badFloats[int(f.next())%len(badFloats)])
		}
	case reflect.Pointer:
		if f.next()%3 != 0 {
			v.Set(reflect.New(v.Type().Elem()))
			f.fill(v.Elem())
		}
	case reflect.Slice:
		switch n := int(f.next() % 5); n {
		case 0: // nil
		default:
			v.Set(reflect.MakeSlice(v.Type(), n-1, n-1))
			for i := range n - 1 {
				f.fill(v.Index(i))
			}
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Field(i).CanSet() {
				f.fill(v.Field(i))
			}
		}
	case reflect.Interface: // idleCull
		if f.next() == 255 {
			v.Set(reflect.ValueOf(f.string()))
		}
	case reflect.Map: // GPUHours, which Hours stands for
	default:
		panic("filler: no values for " + v.Type().String())
	}
}
