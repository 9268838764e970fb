package decision

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestHandler(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	l, err := NewLog(Options{Service: "gpu-quota"})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range []Record{
		{User: "bob", Action: ActionAdmit, Reason: "ok"},
		{User: "bob", Action: ActionDeny, Reason: "max_servers", Numbers: map[string]float64{"limit": 1, "held": 1}},
		{User: "carol", Action: ActionDeny, Reason: "none_free"},
	} {
		r.Time = t0.Add(time.Duration(i) * time.Minute)
		l.Record(r)
	}
	tests := map[string]struct {
		query      string
		wantStatus int
		wantUsers  []string
		wantReason []string
	}{
		"all, newest first":  {query: "", wantStatus: 200, wantUsers: []string{"carol", "bob", "bob"}, wantReason: []string{"none_free", "max_servers", "ok"}},
		"one user's denials": {query: "?user=bob&action=deny", wantStatus: 200, wantUsers: []string{"bob"}, wantReason: []string{"max_servers"}},
		"since":              {query: "?since=2026-11-23T12:01:00Z", wantStatus: 200, wantUsers: []string{"carol", "bob"}, wantReason: []string{"none_free", "max_servers"}},
		"limit":              {query: "?limit=1", wantStatus: 200, wantUsers: []string{"carol"}, wantReason: []string{"none_free"}},
		"nothing":            {query: "?user=nobody", wantStatus: 200},
		"bad since":          {query: "?since=yesterday", wantStatus: 400},
		"bad limit":          {query: "?limit=-1", wantStatus: 400},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			l.Handler().ServeHTTP(rec, httptest.NewRequestWithContext(context.Background(), http.MethodGet, "/decisions"+tc.query, nil))
			if rec.Code != tc.wantStatus {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.wantStatus, rec.Body)
			}
			if tc.wantStatus != 200 {
				return
			}
			var body struct {
				Decisions []Record `json:"decisions"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
				t.Fatal(err)
			}
			if body.Decisions == nil {
				t.Fatal(`"decisions" is null, want a list`)
			}
			var users, reasons []string
			for _, d := range body.Decisions {
				users, reasons = append(users, d.User), append(reasons, d.Reason)
			}
			if diff := cmp.Diff(tc.wantUsers, users); diff != "" {
				t.Errorf("users (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantReason, reasons); diff != "" {
				t.Errorf("reasons (-want +got):\n%s", diff)
			}
		})
	}
}
