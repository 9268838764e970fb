#!/usr/bin/env bash
# with-localcluster.sh CMD...: start bin/localcluster (make demo's program) in the background on free
# ports, wait until it is ready, run CMD with GPUHUB_UI_HUB_URL, GPUHUB_INFO_FILE and the demo password
# in the environment, and always stop the cluster (SIGINT to its process group, then wait; SIGKILL
# after a grace period). Exits with CMD's status, or 1 when the cluster does not come up.
# Environment: LOCALCLUSTER (default bin/localcluster), LOCALCLUSTER_FLAGS, READY_TIMEOUT_S (default 300).
set -euo pipefail

localcluster=${LOCALCLUSTER:-bin/localcluster}
ready_timeout=${READY_TIMEOUT_S:-300}
work=$(mktemp -d -t gpuhub-with-cluster-XXXXXX)
info=$work/info.json
log=$work/localcluster.log
password=${GPUHUB_DEMO_PASSWORD:-gpuhub-demo}

[[ $# -gt 0 ]] || { echo "usage: $0 CMD..." >&2; exit 2; }
[[ -x $localcluster ]] || { echo "ERROR: $localcluster not found; run it through make (make e2e-ui)" >&2; exit 1; }

# Own process group, so Ctrl-C semantics (SIGINT to the group) reach localcluster and only it.
set -m
"$localcluster" --port=0 --info-file="$info" --password="$password" --kubeconfig-out="$work/kubeconfig" \
  ${LOCALCLUSTER_FLAGS:-} >"$log" 2>&1 &
pid=$!
set +m

stop() {
  if kill -0 "$pid" 2>/dev/null; then
    echo "==> stopping the local cluster (SIGINT to process group $pid)"
    kill -INT -- "-$pid" 2>/dev/null || true
    for _ in $(seq 1 90); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    if kill -0 "$pid" 2>/dev/null; then
      echo "WARNING: local cluster still running after 90 s; SIGKILL to its process group" >&2
      kill -KILL -- "-$pid" 2>/dev/null || true
    fi
  fi
  wait "$pid" 2>/dev/null || true
  tail -n 3 "$log" | sed 's/^/    /'
  if [[ ${rc:-1} -eq 0 ]]; then rm -rf "$work"; else echo "==> cluster log kept: $log"; fi
}
trap stop EXIT
trap 'exit 130' INT TERM

echo "==> starting the local cluster in the background (log $log)"
for ((i = 0; i < ready_timeout; i++)); do
  # The info file is written just before the ready banner; wait for both.
  [[ -s $info ]] && grep -q 'Press Ctrl-C' "$log" && break
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "ERROR: localcluster exited before it was ready:" >&2; cat "$log" >&2; exit 1
  fi
  sleep 1
done
[[ -s $info ]] || { echo "ERROR: local cluster not ready after ${ready_timeout}s:" >&2; tail -n 40 "$log" >&2; exit 1; }
sed -n '/==> ready/,/Ctrl-C/p' "$log"

hub_url=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["hubURL"])' "$info")
rc=1
set +e
GPUHUB_UI_HUB_URL=$hub_url GPUHUB_INFO_FILE=$info GPUHUB_DEMO_PASSWORD=$password "$@"
rc=$?
set -e
if [[ $rc -ne 0 ]]; then
  echo "==> command failed ($rc); last lines of the cluster log:"; tail -n 30 "$log"
fi
exit $rc
