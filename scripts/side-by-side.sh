# Sourced by the install scripts: installs that mostly wait on downloads (or build while the
# others download) run together.

# side_by_side FUNCTION LINE…: FUNCTION with each LINE's |-separated fields, all at once;
# fails when one of them failed, once all have ended.
side_by_side() {
  local fn="$1" line pid failed=0
  local -a fields pids=()
  shift
  for line in "$@"; do
    IFS='|' read -r -a fields <<<"$line"
    "$fn" "${fields[@]}" &
    pids+=("$!")
  done
  for pid in "${pids[@]}"; do
    wait "$pid" || failed=1
  done
  return "$failed"
}
