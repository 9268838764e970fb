package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestRun(t *testing.T) {
	tests := map[string]struct {
		startErr  error
		spare     int
		wantPorts int
		wantErr   bool
	}{
		"ready line with the kubeconfig and no ports": {},
		"ready line with spare ports":                 {spare: 3, wantPorts: 3},
		"a control plane that fails prints nothing":   {startErr: errors.New("etcd: no such file"), wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			stopped := false
			start := func(context.Context) (string, func(), error) {
				if tc.startErr != nil {
					return "", nil, tc.startErr
				}
				return "/tmp/cluster/admin.kubeconfig", func() { stopped = true }, nil
			}
			ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
			defer cancel()
			var out bytes.Buffer
			err := run(ctx, start, tc.spare, &out)
			if (err != nil) != tc.wantErr {
				t.Fatalf("run: %v, want error %v", err, tc.wantErr)
			}
			if tc.wantErr {
				if out.Len() != 0 {
					t.Errorf("printed %q after a failed start, want nothing (the caller reads it as ready)", out.String())
				}
				return
			}
			var got Ready
			if err := json.Unmarshal(out.Bytes(), &got); err != nil {
				t.Fatalf("ready line %q: %v", out.String(), err)
			}
			if diff := cmp.Diff("/tmp/cluster/admin.kubeconfig", got.Kubeconfig); diff != "" {
				t.Errorf("kubeconfig (-want +got):\n%s", diff)
			}
			seen := map[int]bool{}
			for _, p := range got.Ports {
				if p < 20000 || p > 32767 || seen[p] {
					t.Errorf("port %d: want distinct ports below the ephemeral range", p)
				}
				seen[p] = true
			}
			if len(got.Ports) != tc.wantPorts {
				t.Errorf("%d ports, want %d", len(got.Ports), tc.wantPorts)
			}
			if !stopped {
				t.Error("the control plane was not stopped when ctx ended")
			}
		})
	}
}
