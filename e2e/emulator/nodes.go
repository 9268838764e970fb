package emulator

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

// KubeletVersion is what emulated nodes report as their kubelet version.
const KubeletVersion = "v1.36.3-gpuhub-emulator"

// registerNode creates (or updates) the Node, reports it Ready and removes the not-ready taint
// the API server's TaintNodesByCondition admission adds to new nodes.
func (e *Emulator) registerNode(ctx context.Context, i int, spec NodeSpec) error {
	capacity, allocatable, err := spec.capacity()
	if err != nil {
		return err
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: spec.Name, Labels: map[string]string{}},
	}
	for k, v := range spec.Labels {
		node.Labels[k] = v
	}
	node.Labels["kubernetes.io/hostname"] = spec.Name
	node.Labels["kubernetes.io/os"] = "linux"
	node.Labels["kubernetes.io/arch"] = "amd64"
	node.Labels["gpuhub.io/emulated"] = "true"
	_, err = e.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur, err := e.client.CoreV1().Nodes().Get(ctx, spec.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			cur.Labels = node.Labels
			_, err = e.client.CoreV1().Nodes().Update(ctx, cur, metav1.UpdateOptions{})
			return err
		})
	}
	if err != nil {
		return fmt.Errorf("register node %s: %w", spec.Name, err)
	}
	status := corev1.NodeStatus{
		Capacity:    capacity,
		Allocatable: allocatable,
		Phase:       corev1.NodeRunning,
		Conditions:  e.nodeConditions(),
		Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: e.ips.nodeIP(i).String()},
			{Type: corev1.NodeHostName, Address: spec.Name},
		},
		NodeInfo: corev1.NodeSystemInfo{
			KubeletVersion:          KubeletVersion,
			ContainerRuntimeVersion: "gpuhub-emulator://1",
			OperatingSystem:         "linux",
			Architecture:            "amd64",
			OSImage:                 "gpuhub node emulator",
			MachineID:               spec.Name,
			SystemUUID:              spec.Name,
			BootID:                  e.bootID,
		},
	}
	if err := e.patchNodeStatus(ctx, spec.Name, status); err != nil {
		return err
	}
	return e.removeNotReadyTaint(ctx, spec.Name)
}

func (e *Emulator) nodeConditions() []corev1.NodeCondition {
	now := metav1.NewTime(e.opts.Now())
	cond := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: s, Reason: reason, Message: msg,
			LastHeartbeatTime: now, LastTransitionTime: e.started}
	}
	return []corev1.NodeCondition{
		cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "emulated"),
		cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "emulated"),
		cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "emulated"),
		cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "gpuhub node emulator is posting ready status"),
	}
}

func (e *Emulator) patchNodeStatus(ctx context.Context, name string, status corev1.NodeStatus) error {
	body, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return fmt.Errorf("node status: %w", err)
	}
	if _, err := e.client.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, body,
		metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("patch node %s status: %w", name, err)
	}
	return nil
}

func (e *Emulator) removeNotReadyTaint(ctx context.Context, name string) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := e.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		var kept []corev1.Taint
		for _, t := range n.Spec.Taints {
			if t.Key != corev1.TaintNodeNotReady && t.Key != corev1.TaintNodeUnreachable {
				kept = append(kept, t)
			}
		}
		if len(kept) == len(n.Spec.Taints) {
			return nil
		}
		n.Spec.Taints = kept
		_, err = e.client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("remove not-ready taint from %s: %w", name, err)
	}
	return nil
}

// heartbeat renews the node's conditions and its Lease, as a kubelet does.
func (e *Emulator) heartbeat(ctx context.Context, name string) error {
	body, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": e.nodeConditions()}})
	if err != nil {
		return err
	}
	if _, err := e.client.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, body,
		metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("heartbeat %s: %w", name, err)
	}
	leases := e.client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	now := metav1.NewMicroTime(e.opts.Now())
	lease, err := leases.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(name), LeaseDurationSeconds: ptr.To[int32](40),
				RenewTime: &now},
		}, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return fmt.Errorf("lease %s: %w", name, err)
	}
	lease.Spec.RenewTime = &now
	_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
	return err
}

func (e *Emulator) heartbeats(ctx context.Context) {
	t := time.NewTicker(e.opts.HeartbeatInterval)
	defer t.Stop()
	for {
		for _, n := range e.opts.Topology.Nodes {
			if err := e.heartbeat(ctx, n.Name); err != nil && ctx.Err() == nil {
				e.log.Warn("heartbeat failed", "node", n.Name, "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
