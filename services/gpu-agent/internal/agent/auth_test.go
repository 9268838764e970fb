package agent

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func TestTokenReviewCache(t *testing.T) {
	client := fake.NewClientset()
	reviews := 0
	var apiErr error
	client.PrependReactor("create", "tokenreviews", func(action k8stesting.Action) (bool, runtime.Object, error) {
		reviews++
		if apiErr != nil {
			return true, nil, apiErr
		}
		tr := action.(k8stesting.CreateAction).GetObject().(*authnv1.TokenReview).DeepCopy()
		if tr.Spec.Token == "good" {
			tr.Status = authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{Username: usageSA}}
		}
		return true, tr, nil
	})
	now := t0
	tr := newTokenReviewer(client, []string{usageSA}, func() time.Time { return now }, nil)
	h := tr.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	call := func(token string) int {
		rec := httptest.NewRecorder()
		req := httptest.NewRequestWithContext(context.Background(), http.MethodGet, "/api/v1/snapshot", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		h.ServeHTTP(rec, req)
		return rec.Code
	}

	steps := []struct {
		name        string
		advance     time.Duration
		token       string
		apiErr      error
		wantCode    int
		wantReviews int
	}{
		{name: "first good token is reviewed", token: "good", wantCode: http.StatusNoContent, wantReviews: 1},
		{name: "cached", advance: 30 * time.Second, token: "good", wantCode: http.StatusNoContent, wantReviews: 1},
		{name: "positive entry expires after a minute", advance: 31 * time.Second, token: "good", wantCode: http.StatusNoContent, wantReviews: 2},
		{name: "bad token", token: "bad", wantCode: http.StatusUnauthorized, wantReviews: 3},
		{name: "bad token cached", advance: 5 * time.Second, token: "bad", wantCode: http.StatusUnauthorized, wantReviews: 3},
		{name: "negative entry expires after 10s", advance: 6 * time.Second, token: "bad", wantCode: http.StatusUnauthorized, wantReviews: 4},
		{name: "API server down", advance: time.Hour, token: "good", apiErr: errors.New("connection refused"),
			wantCode: http.StatusServiceUnavailable, wantReviews: 5},
	}
	for _, s := range steps {
		now = now.Add(s.advance)
		apiErr = s.apiErr
		if got := call(s.token); got != s.wantCode {
			t.Errorf("%s: status %d, want %d", s.name, got, s.wantCode)
		}
		if reviews != s.wantReviews {
			t.Errorf("%s: %d reviews, want %d", s.name, reviews, s.wantReviews)
		}
	}
}
