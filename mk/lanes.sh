#!/usr/bin/env bash
# lanes.sh LOGDIR [--shared TARGETS] LANE... runs make targets in lanes side by side: each LANE is a quoted list of
# targets, run one after another by `$MAKE target`; the lanes run at the same time. A lane done with its own list
# takes the next of the --shared targets not yet taken (in the order given: put the longest first), so a tail of
# targets goes to whichever lane is free first, not to one fixed in advance. Every line a target prints goes to the
# terminal prefixed with its name and, whole, to LOGDIR/<target>.log. After a failure no lane starts another target;
# the running ones finish. At the end: the time of each target (in the order given, with the lane that ran it) and
# the CPU time its processes used, the wall time and how busy the machine's CPUs were, the failed targets with the
# end of their logs and then their Go tests' own lines (the failed tests and the file:line of each message), and the
# exit status (1 if any failed).
# Those lines come last because a failed suite's cleanup often dumps logs after its failure message, and a CI
# summary shows only the end of the output.
#
# Why lanes: most of make test's wall time is the local-cluster suites and the real node waiting on the Hub, timers,
# containers and the browser, on 2 cores; the other targets (compiling, unit tests, fuzzing) use that time. Why a
# shared tail: which lane ends first depends on the caches (the images and the real node take 43 minutes on a fresh
# machine, 19 with warm caches), so a fixed split is right for one of the two only.
set -uo pipefail

MAKE=${MAKE:-make}
logdir=${1:?usage: lanes.sh LOGDIR [--shared TARGETS] LANE...}
shift
shared=()
if [[ ${1:-} == --shared ]]; then
  (($# >= 2)) || { echo "lanes.sh: --shared needs a list of targets" >&2; exit 2; }
  read -ra shared <<<"$2"
  shift 2
fi
(($# > 0)) || { echo "lanes.sh: no lanes given" >&2; exit 2; }
mkdir -p "$logdir"
stop="$logdir/.stop"
queue="$logdir/.shared"
rm -f "$stop" "$logdir"/.time-* "$logdir"/.cpu-* "$queue" "$queue.lock"
printf '%s\n' "${shared[@]}" >"$queue"

# cpu_ticks prints the machine's busy and total CPU ticks so far (/proc/stat's first line; nothing elsewhere).
cpu_ticks() {
  local _ user nice system idle iowait rest
  [[ -r /proc/stat ]] || return 0
  read -r _ user nice system idle iowait rest </proc/stat
  local steal=0 irq softirq
  read -r irq softirq steal _ <<<"$rest"
  echo "$((user + nice + system + irq + softirq + steal)) $((user + nice + system + idle + iowait + irq + softirq + steal))"
}
ticks_at_start=$(cpu_ticks)

# cpu_seconds prints the user + system seconds of the children's line of a `times` output file ("-" without one).
cpu_seconds() {
  local u s
  [[ -r $1 ]] && { read -r _ _ && read -r u s; } <"$1" || { echo -; return; }
  # times writes the locale's decimal point ("0m1,234s" in some): a comma is read as a point.
  awk -v u="$u" -v s="$s" 'function sec(x, m) { gsub(/,/, ".", x); split(x, m, /[ms]/); return m[1] * 60 + m[2] }
    BEGIN { printf "%d", sec(u) + sec(s) + 0.5 }'
}

# next_shared prints the next shared target not yet taken (nothing when none is left), taking it.
next_shared() {
  local t=""
  {
    flock 9 || { echo "lanes.sh: flock failed: cannot hand out the shared targets safely" >&2; exit 2; }
    if [[ -s $queue ]]; then
      t=$(head -n 1 "$queue")
      tail -n +2 "$queue" >"$queue.next" && mv "$queue.next" "$queue"
    fi
  } 9>"$queue.lock"
  printf '%s' "$t"
}

run_lane() {
  local lane=$1 t start rc
  shift
  local own=("$@")
  while :; do
    if ((${#own[@]} > 0)); then
      t=${own[0]}
      own=("${own[@]:1}")
    else
      t=$(next_shared)
      [[ -n $t ]] || break
    fi
    if [[ -e $stop ]]; then
      echo "==> [lane $lane] not starting make $t: an earlier target failed"
      continue
    fi
    echo "==> [lane $lane] make $t"
    start=$SECONDS
    # The subshell's `times` (its second line) is the CPU time of make and every process it waited for.
    ("$MAKE" --no-print-directory "$t"; rc=$?; times >"$logdir/.cpu-$t"; exit $rc) 2>&1 | tee "$logdir/$t.log" | sed -u "s/^/[$t] /"
    rc=${PIPESTATUS[0]}
    echo "$lane $((SECONDS - start)) $rc $(cpu_seconds "$logdir/.cpu-$t")" >"$logdir/.time-$t"
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
order+=("${shared[@]}")
for pid in "${pids[@]}"; do
  wait "$pid"
done

failed=()
cpu_total=0
echo "==> make test: time per target (lane, seconds; the lanes ran side by side; CPU: seconds of CPU its processes used)"
printf '  %-26s %4s %7s %7s\n' "target" "lane" "time" "CPU"
for t in "${order[@]}"; do
  if [[ -f "$logdir/.time-$t" ]]; then
    read -r l secs rc cpu <"$logdir/.time-$t"
    status=""
    if ((rc != 0)); then
      status=" FAILED"
      failed+=("$t")
    fi
    if [[ $cpu =~ ^[0-9]+$ ]]; then
      cpu_total=$((cpu_total + cpu))
      cpu="${cpu}s"
    else
      cpu=-
    fi
    printf '  %-26s %4s %6ss %7s%s\n' "$t" "$l" "$secs" "$cpu" "$status"
  else
    printf '  %-26s %4s %7s\n' "$t" "-" "skipped"
  fi
done
printf '  %-26s %4s %6ss %6ss\n' "wall time" "" "$SECONDS" "$cpu_total"
if [[ -n $ticks_at_start ]]; then
  read -r busy0 total0 <<<"$ticks_at_start"
  read -r busy1 total1 <<<"$(cpu_ticks)"
  if ((total1 > total0)); then
    echo "  CPUs busy over the wall time: $((100 * (busy1 - busy0) / (total1 - total0))) % of $(nproc) (the whole machine's, not only make test's)"
  fi
fi
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
