#!/usr/bin/env bash
# lanes.sh LOGDIR LANE... runs make targets in lanes side by side: each LANE is a quoted list of targets, run one
# after another by `$MAKE target`; the lanes run at the same time. Every line a target prints goes to the terminal
# prefixed with its name and, whole, to LOGDIR/<target>.log. After a failure no lane starts another target; the
# running ones finish. At the end: the time of each target (in the order given), the wall time, the failed targets
# with the end of their logs and then their Go tests' own lines (the failed tests and the file:line of each message),
# and the exit status (1 if any failed). Those lines come last because a failed suite's cleanup often dumps logs
# after its failure message, and a CI summary shows only the end of the output.
#
# Why lanes: most of make test's wall time is the local-cluster suites and the real node waiting on the Hub, timers,
# containers and the browser, on 2 cores; the other targets (compiling, unit tests, fuzzing) use that time.
set -uo pipefail

MAKE=${MAKE:-make}
logdir=${1:?usage: lanes.sh LOGDIR LANE...}
shift
(($# > 0)) || { echo "lanes.sh: no lanes given" >&2; exit 2; }
mkdir -p "$logdir"
stop="$logdir/.stop"
rm -f "$stop" "$logdir"/.time-*

run_lane() {
  local lane=$1 t start rc
  shift
  for t in "$@"; do
    if [[ -e $stop ]]; then
      echo "==> [lane $lane] not starting make $t: an earlier target failed"
      continue
    fi
    echo "==> [lane $lane] make $t"
    start=$SECONDS
    "$MAKE" --no-print-directory "$t" 2>&1 | tee "$logdir/$t.log" | sed -u "s/^/[$t] /"
    rc=${PIPESTATUS[0]}
    echo "$lane $((SECONDS - start)) $rc" >"$logdir/.time-$t"
    if ((rc != 0)); then
      echo "==> [lane $lane] make $t FAILED (exit $rc); log: $logdir/$t.log"
      touch "$stop"
    else
      echo "==> [lane $lane] make $t passed in $((SECONDS - start))s"
    fi
  done
}

order=()
lane=0
pids=()
for targets in "$@"; do
  lane=$((lane + 1))
  read -ra list <<<"$targets"
  order+=("${list[@]}")
  run_lane "$lane" "${list[@]}" &
  pids+=($!)
done
for pid in "${pids[@]}"; do
  wait "$pid"
done

failed=()
echo "==> make test: time per target (lane, seconds; the lanes ran side by side)"
for t in "${order[@]}"; do
  if [[ -f "$logdir/.time-$t" ]]; then
    read -r l secs rc <"$logdir/.time-$t"
    status=""
    if ((rc != 0)); then
      status=" FAILED"
      failed+=("$t")
    fi
    printf '  %-26s %4s %6ss%s\n' "$t" "$l" "$secs" "$status"
  else
    printf '  %-26s %4s %7s\n' "$t" "-" "skipped"
  fi
done
printf '  %-26s %4s %6ss\n' "wall time" "" "$SECONDS"
if ((${#failed[@]} > 0)); then
  for t in "${failed[@]}"; do
    echo "==> the end of $logdir/$t.log:"
    tail -n 60 "$logdir/$t.log"
  done
  for t in "${failed[@]}"; do
    echo "==> the Go tests' own lines in $logdir/$t.log (failed tests, messages with file:line, panics), the last 40:"
    grep -E '^\s*--- FAIL|^\s+[A-Za-z0-9_]+\.go:[0-9]+: |^panic: |^FAIL\s' "$logdir/$t.log" | tail -n 40
  done
  echo "FAILED: make ${failed[*]}"
  exit 1
fi
