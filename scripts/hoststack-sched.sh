# Scheduling readings of scripts/hoststack-redis-bench.sh (sourced; tested by
# python/tests/test_hoststack_redis_bench.py). Each check fails with a FAILED line rather
# than leaving a missing or empty reading to the table.

# snap <pid>: "cpu_ns wait_ns slices vcsw ivcsw" of the process's main thread
# (/proc/<pid>/schedstat, /proc/<pid>/status); fails, printing nothing, when either cannot
# be read (the process is gone, or a kernel without schedstat).
snap() {
  local a b e vn
  read -r a b e 2>/dev/null <"/proc/$1/schedstat" || return 1
  vn=$(awk '/^voluntary_ctxt/ { v = $2 } /^nonvoluntary_ctxt/ { n = $2 }
    END { if (v != "" && n != "") print v, n }' "/proc/$1/status" 2>/dev/null) || return 1
  # shellcheck disable=SC2086 # five numbers
  set -- $a $b $e $vn
  [ $# = 5 ] || return 1
  echo "$@"
}

# sched_line <name> <elapsed ms> "<snap before>" "<snap after>": the line
# "<name> elapsed_ms cpu_ms wait_ms slices vcsw ivcsw" of a process on the path over one
# cell; fails with a FAILED line when a reading is missing or the process had no CPU
# between the two (it cannot have been on the path: a wrong pid, or it was not running).
sched_line() {
  local name=$1 el=$2
  # shellcheck disable=SC2086 # two lists of five numbers
  set -- $3 $4
  if [ $# != 10 ]; then
    echo "FAILED: no scheduling reading of $name (/proc/<pid>/schedstat)"; return 1
  fi
  if [ $(($6 - $1)) -le 0 ]; then
    echo "FAILED: $name had 0 CPU over the cell (not on the path?)"; return 1
  fi
  printf '%s %s %.1f %.1f %d %d %d\n' "$name" "$el" "$(echo "($6 - $1) / 1000000" | bc -l)" \
    "$(echo "($7 - $2) / 1000000" | bc -l)" $(($8 - $3)) $(($9 - $4)) $((${10} - $5))
}

# rs_line <file>: "redis-benchmark elapsed_ms cpu_ms wait_ms slices vcsw ivcsw" from
# scripts/hoststack-runstat.py's output file; fails with a FAILED line when its schedstat
# could not be read (slices -1) or it shows no CPU.
rs_line() {
  local el cpu w sl v iv
  read -r el cpu w sl v iv <"$1" || {
    echo "FAILED: no scheduling reading of redis-benchmark"; return 1; }
  if [ -z "$iv" ] || [ "$sl" -lt 0 ]; then
    echo "FAILED: no scheduling reading of redis-benchmark (/proc/<pid>/schedstat)"; return 1
  fi
  if [ "$(echo "$cpu <= 0" | bc -l)" = 1 ]; then
    echo "FAILED: redis-benchmark had 0 CPU over the cell"; return 1
  fi
  echo "redis-benchmark $el $cpu $w $sl $v $iv"
}
