package api

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/admit"
	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/quota"
	"github.com/gpuhub/gpuhub/services/internal/gpu"
	"github.com/gpuhub/gpuhub/services/internal/server"
)

// viaEncoder is the answer as server.WriteJSON writes it.
func viaEncoder(t testing.TB, res admit.Result) *httptest.ResponseRecorder {
	t.Helper()
	w := httptest.NewRecorder()
	server.WriteJSON(w, http.StatusOK, res)
	return w
}

// TestWriteResult: an admission's answer is written with server.WriteJSON's status, headers and bytes, by
// appendResult or, with a waitlist place, by encoding/json.
func TestWriteResult(t *testing.T) {
	options := []admit.Option{
		{Kind: gpu.KindMIG, Class: "mig A100-SXM4-40GB 1g.5gb", Description: "1/7 of an A100 (MIG 1g.5gb)", Free: 3},
		{Kind: gpu.KindShared, Class: "shared T4", Description: `a 1/4 share of a T4 <"time-sliced"> & more`, Free: 0},
	}
	tests := map[string]admit.Result{
		"admitted": {Allow: true, Reason: "ok", DecisionID: "mf3x-1", Reservation: "r1-2", CanTake: []admit.Option{},
			OnUnavailable: quota.Open},
		"refused, with what one can take": {Reason: "none_free", Message: "No H100 is free.\nYou can take:\t1/7 <of> an A100 & a T4 share\u2028",
			DecisionID: "mf3x-2", CanTake: options, OnUnavailable: quota.Closed},
		"no list":      {Reason: "max_gpus", Message: "\x00\x1f\x7f \\ \" é 漢 \xff\xfe end", CanTake: nil},
		"empty":        {},
		"waitlist":     {Reason: "waitlist", Waitlist: &admit.Place{User: "bob", Class: "gpu H100", Position: 2, Message: "2nd <in> line"}},
		"join offered": {Reason: "none_free", Message: "No H100 is free.", JoinOffered: true, CountedPod: true},
		"counted pod":  {Allow: true, Reason: "ok", DecisionID: "d", CanTake: []admit.Option{}, CountedPod: true},
		"invalid utf8": {Message: "\xe2\x80", Reason: "\xed\xa0\x80"},
	}
	for name, res := range tests {
		t.Run(name, func(t *testing.T) {
			want := viaEncoder(t, res)
			got := httptest.NewRecorder()
			writeResult(got, res)
			if got.Code != want.Code {
				t.Errorf("status %d, want %d", got.Code, want.Code)
			}
			if diff := cmp.Diff(want.Header(), got.Header()); diff != "" {
				t.Errorf("headers (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(want.Body.String(), got.Body.String()); diff != "" {
				t.Errorf("body (-json.Encoder +writeResult):\n%s", diff)
			}
		})
	}
}

// FuzzAppendResult: appendResult writes the bytes json.Encoder writes, whatever the strings and numbers.
func FuzzAppendResult(f *testing.F) {
	f.Add(true, "ok", "", "id-1", "r-1", uint8(1), "mig", "mig A100 1g.5gb", "1/7 of an A100", int64(3), "open")
	f.Add(false, "none_free", "No <H100> & no \"T4\"\n\u2028", "", "", uint8(3), "shared", "\xff", "\x00\x1f", int64(-1), "closed")
	f.Add(false, "", "", "", "", uint8(0), "", "", "", int64(0), "")
	f.Fuzz(func(t *testing.T, allow bool, reason, message, id, reservation string, n uint8, kind, class, description string, free int64, mode string) {
		res := admit.Result{Allow: allow, Reason: reason, Message: message, DecisionID: id, Reservation: reservation,
			OnUnavailable: quota.Mode(mode), CountedPod: n%2 == 1}
		if n > 0 {
			res.CanTake = []admit.Option{}
			for i := range int(n % 4) {
				res.CanTake = append(res.CanTake, admit.Option{Kind: gpu.Kind(kind), Class: class[:len(class)*i/4],
					Description: description, Free: free + int64(i)})
			}
		}
		var want bytes.Buffer
		if err := json.NewEncoder(&want).Encode(res); err != nil {
			t.Fatal(err)
		}
		if got := appendResult(nil, res); !bytes.Equal(got, want.Bytes()) {
			t.Errorf("appendResult:\n%q\njson.Encoder:\n%q", got, want.Bytes())
		}
	})
}
