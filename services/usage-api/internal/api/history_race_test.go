package api

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/gpuhub/gpuhub/hubapi"
	"github.com/gpuhub/gpuhub/hubapi/hubapitest"
	"github.com/gpuhub/gpuhub/hubapi/hubauth"
	"github.com/gpuhub/gpuhub/services/usage-api/internal/usage"
)

// TestConcurrentAnswersKeepTheirOwnHistory: me answers are written in pooled buffers from the history while ticks
// add to it; under many concurrent requests for different users (run with -race) every answer is whole JSON, names
// its user and holds only that user's points, a window of them.
func TestConcurrentAnswersKeepTheirOwnHistory(t *testing.T) {
	hub := hubapitest.New(t)
	users := []string{"alice", "bob", "carol", "dave"}
	for _, u := range users {
		hub.AddUser(hubapi.User{Name: u})
		hub.AddToken(u+"-token", u)
	}
	auth := hubauth.New(hubauth.Options{Hub: hub.Client("service-token")})
	state := usage.NewState(usage.NewHistory(time.Minute, 5*time.Second)) // 12 points each
	alloc := func(i int) float64 { return float64(i + 1) }
	tick := func(at time.Time) {
		v := &usage.View{SampledAt: at, Interval: 5 * time.Second, Users: map[string]*usage.User{}, Hub: usage.Directory{Users: map[string]usage.HubUser{}}}
		for i, u := range users {
			v.Users[u] = &usage.User{Name: u, Share: usage.Share{AllocatedGPUs: alloc(i), UsedGPUs: f(0)}}
			v.Hub.Users[u] = usage.HubUser{Name: u}
		}
		state.Publish(v)
	}
	for i := range 12 {
		tick(now.Add(time.Duration(i-12) * 5 * time.Second))
	}
	h := New(Options{Prefix: prefix, State: state, Ledger: newTestLedger(t), Auth: auth.Middleware, Now: func() time.Time { return now }})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	stop := make(chan struct{})
	ticked := make(chan struct{})
	go func() { // ticks while the answers are written
		defer close(ticked)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
				tick(now.Add(time.Duration(i) * 5 * time.Second))
			}
		}
	}()
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for r := range 20 {
				i := (g + r) % len(users)
				req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, srv.URL+prefix+"api/v1/me", nil)
				req.Header.Set("Authorization", "token "+users[i]+"-token")
				resp, err := srv.Client().Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				body, _ := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				var a struct {
					User    string `json:"user"`
					History []struct {
						AllocatedGPUs float64 `json:"allocatedGPUs"`
					} `json:"history"`
				}
				if err := json.Unmarshal(body, &a); err != nil {
					t.Errorf("%s: answer is not JSON: %v", users[i], err)
					return
				}
				// 11 while a tick is between moving the window and recording this user (History.Add).
				if a.User != users[i] || len(a.History) < 11 || len(a.History) > 12 {
					t.Errorf("answer for %s names %q with %d points, want its own 11 or 12", users[i], a.User, len(a.History))
				}
				for _, p := range a.History {
					if p.AllocatedGPUs != alloc(i) {
						t.Errorf("%s's history holds %v allocated GPUs, want %v", users[i], p.AllocatedGPUs, alloc(i))
						break
					}
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	<-ticked
}
