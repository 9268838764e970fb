#!/usr/bin/env bash
# in-netns.sh CMD...: run CMD in a network namespace made for it, removed afterwards. The namespace has
# loopback and one veth pair; the node's address GPUHUB_NODE_IP (10.250.0.2/24) is on node0, with a route for
# the Service range. There is no default route and no link to the machine's interfaces: nothing CMD starts can
# reach outside it.
# CMD enters only the network namespace (nsenter --net): `ip netns exec` would also mount a fresh /sys,
# which hides the cgroup hierarchies a kubelet needs.
set -euo pipefail
[[ $(id -u) -eq 0 ]] || { echo "in-netns.sh: needs root (network namespaces, containers)"; exit 1; }
ns="gpuhub-e2e-$$"
cleanup() {
	# Processes that outlived CMD in the namespace (none should) go with it.
	for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
	ip netns delete "$ns" 2>/dev/null || true
}
trap cleanup EXIT
ip netns add "$ns"
ip -n "$ns" link set lo up
ip -n "$ns" link add node0 type veth peer name node0-peer
ip -n "$ns" addr add 10.250.0.2/24 dev node0
ip -n "$ns" link set node0 up
ip -n "$ns" link set node0-peer up
# Services' cluster IPs (kube-proxy rewrites them to pod addresses) are reached through the node.
ip -n "$ns" route add 10.96.0.0/16 dev node0
export GPUHUB_NODE_IP=10.250.0.2 GPUHUB_NETNS="$ns"
nsenter --net="/var/run/netns/$ns" -- "$@"
