package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpuhub/gpuhub/services/gpu-profiles/internal/catalog"
	"github.com/gpuhub/gpuhub/services/gpu-profiles/internal/profiles"
	"github.com/gpuhub/gpuhub/services/internal/server"
)

// Baseline is the anchor: the same form from the same packages (catalog, profiles), with the inventory read
// from the API server for every render (LIST the nodes, LIST every namespace's pods, as gpu-profiles counts
// them) instead of kept by informers. Without gpu-quota, as gpu-profiles' headline row.
type Baseline struct {
	Client kubernetes.Interface
	Config *profiles.Config // nil: every kind as generated
}

// Render answers one request as gpu-profiles would.
func (b *Baseline) Render(ctx context.Context, req profiles.Request) (profiles.Response, error) {
	nodeList, err := b.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return profiles.Response{}, fmt.Errorf("list nodes: %w", err)
	}
	podList, err := b.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return profiles.Response{}, fmt.Errorf("list pods: %w", err)
	}
	nodes := make([]*corev1.Node, len(nodeList.Items))
	for i := range nodeList.Items {
		nodes[i] = &nodeList.Items[i]
	}
	pods := make([]*corev1.Pod, len(podList.Items))
	for i := range podList.Items {
		pods[i] = &podList.Items[i]
	}
	o := catalog.Options{}
	if b.Config != nil {
		o.Tolerations = b.Config.TolerationsOrDefault()
	}
	r := &profiles.Renderer{Catalog: catalog.FromObjects(nodes, pods, o), Config: func() *profiles.Config { return b.Config }}
	return r.Render(ctx, req)
}

// Handler serves Render at gpu-profiles' path with its request and answer.
func (b *Baseline) Handler(prefix string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+prefix+"api/v1/profiles", func(w http.ResponseWriter, r *http.Request) {
		var req profiles.Request
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			server.WriteError(w, http.StatusBadRequest, "bad request: %v", err)
			return
		}
		res, err := b.Render(r.Context(), req)
		if err != nil {
			server.WriteError(w, http.StatusServiceUnavailable, "%v", err)
			return
		}
		server.WriteJSON(w, http.StatusOK, res)
	})
	return mux
}
