# parallel.bash — runs a list of jobs a few at a time, the slowest first (sourced by tests/run_all.sh
# and fuzz/run.sh; bash >= 4.3 for `wait -n`).

# pm_jobs_max VAR: how many at a time: $VAR when set, else the CPU count, at most 4.
pm_jobs_max() {
  local n=${!1:-}
  if [ -z "$n" ]; then n=$(nproc 2>/dev/null || echo 1); [ "$n" -gt 4 ] && n=4; fi
  echo "$n"
}

# pm_run_parallel MAX FUNC SLOW... -- ITEM...: calls `FUNC ITEM` in the background for every ITEM, at
# most MAX at once, the ITEMs named in SLOW first (fewer idle cores at the end), the rest in their
# order; returns when all have ended. (Names hold no spaces.)
pm_run_parallel() {
  local max=$1 fn=$2 slow=() items=() order=() x
  shift 2
  while [ $# -gt 0 ] && [ "$1" != -- ]; do slow+=("$1"); shift; done
  shift
  items=("$@")
  for x in "${slow[@]}"; do [[ " ${items[*]} " == *" $x "* ]] && order+=("$x"); done
  for x in "${items[@]}"; do [[ " ${order[*]} " == *" $x "* ]] || order+=("$x"); done
  for x in "${order[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$max" ]; do wait -n; done
    "$fn" "$x" &
  done
  wait
}
