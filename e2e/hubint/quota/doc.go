// Package quota holds the Hub integration tests of gpu-quota's refusals at spawn time (build tag
// integration; make integration runs them once per Hub line, JupyterHub 5.5 and 6.x). A real JupyterHub with
// KubeSpawner loads the chart's Hub glue (chart/gpuhub/files/gpuhub_hub_config.py) unchanged as
// hub.extraConfig, a real gpu-quota (built from ./services/gpu-quota) answers with a policy that refuses whole
// GPUs, and a real control plane (etcd, kube-apiserver) holds the GPU nodes of e2e/topology.yaml: KubeSpawner
// needs an API server to get as far as modify_pod_hook, where the glue asks gpu-quota, and gpu-quota runs with
// the chart's RBAC. A refusal creates no pod, so no kubelet is needed.
//
// Two Hubs per run: "z2jh" with Zero-to-JupyterHub's spawn settings (slow_spawn_timeout 0, so every spawn is
// answered 202 and the reason is in the progress stream; consecutive_failure_limit 5), and "plain" with
// JupyterHub's defaults (a refusal within slow_spawn_timeout is the spawn request's own answer: 403 from the
// REST API, the re-rendered form from POST /hub/spawn).
package quota
