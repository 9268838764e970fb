// Package profiles holds the Hub integration tests of the spawn form built from gpu-profiles (build tag
// integration; make integration runs them once per Hub line, JupyterHub 5.5 and 6.x). A real JupyterHub with
// KubeSpawner loads the chart's Hub glue (chart/gpuhub/files/gpuhub_hub_config.py) unchanged as
// hub.extraConfig, a real gpu-profiles (built from ./services/gpu-profiles) watches a real control plane
// (etcd, kube-apiserver) holding the GPU nodes of e2e/topology.yaml, and pods placed on those nodes by the
// test use GPUs, so the form has something in use to show. gpu-quota is not deployed: the glue must refuse an
// unavailable choice on gpu-profiles' word alone. A refusal creates no pod, so no kubelet is needed.
//
// Two Hubs per run, as in e2e/hubint/quota: "z2jh" with Zero-to-JupyterHub's spawn settings
// (slow_spawn_timeout 0: every spawn is answered 202 and the reason is in the progress stream;
// consecutive_failure_limit 5) and "plain" with JupyterHub's defaults (a refusal within slow_spawn_timeout is
// the answer to the spawn request itself). A third, "waitlist", has z2jh's settings, GPUHUB_WAITLIST=1 and a
// fake gpu-quota answering as gpu-quota's waitlist does (waitlist_test.go): joining from the form.
package profiles
