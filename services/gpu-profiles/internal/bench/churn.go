package bench

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpuhub/gpuhub/services/internal/benchkit"
)

type churnCount struct{ done, failed int }

// churn deletes one GPU pod of the synthetic cluster and creates it again, one change every `every`, until ctx
// ends: the pod events a hub has all day. Each reaches gpu-quota's and gpu-profiles' informers; the control plane
// has no kubelet, so a pod deleted at once is gone at once.
func churn(ctx context.Context, c kubernetes.Interface, s benchkit.Synth, every time.Duration) churnCount {
	var pod *corev1.Pod
	for _, p := range s.PodObjects(namespace) {
		if p.Spec.NodeName != "" && len(p.Spec.Containers) > 0 && len(p.Spec.Containers[0].Resources.Limits) > 0 {
			pod = p
			break
		}
	}
	var n churnCount
	if pod == nil {
		return n
	}
	pods := c.CoreV1().Pods(namespace)
	tick := time.NewTicker(every)
	defer tick.Stop()
	gone := false
	for {
		select {
		case <-ctx.Done():
			if gone { // leave the cluster as it was
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				_, _ = pods.Create(cctx, pod.DeepCopy(), metav1.CreateOptions{})
				cancel()
			}
			return n
		case <-tick.C:
		}
		var err error
		if gone {
			_, err = pods.Create(ctx, pod.DeepCopy(), metav1.CreateOptions{})
		} else {
			err = pods.Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		}
		if err != nil {
			if ctx.Err() == nil {
				n.failed++
			}
			continue
		}
		gone = !gone
		n.done++
	}
}
