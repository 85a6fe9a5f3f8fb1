#!/usr/bin/env bash
# Undoes what one harness run created, newest first, from its registry (WORK/created, see lib.sh):
# processes are stopped by PID (TERM, then KILL; only if the PID still has the recorded start time),
# network namespaces are deleted by name (which deletes the bridge, taps and veths inside them).
# Nothing that is not in the registry is touched. Safe to run more than once.
#
#   cleanup.sh WORK
set -uo pipefail
INTEROP_WORK=$1
. "$(dirname "$0")/lib.sh"
registry=$INTEROP_WORK/created
[ -f "$registry" ] || exit 0
# ours PID START: the process is alive (not a zombie) and is the one recorded.
ours() {
  [ -n "$2" ] && [ "$(proc_start_time "$1")" = "$2" ] &&
    [ "$(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)" != Z ]
}
pids=()
while read -r kind value start; do
  [ "$kind" = pid ] && ours "$value" "$start" && { kill "$value" 2>/dev/null; pids+=("$value $start"); }
done < <(tac "$registry")
for _ in $(seq 30); do
  alive=0
  for p in "${pids[@]}"; do ours $p && alive=1; done
  ((alive)) || break
  sleep 0.1
done
for p in "${pids[@]}"; do
  set -- $p
  ours "$1" "$2" && { log "cleanup: process $1 did not stop on TERM: KILL"; kill -9 "$1" 2>/dev/null; }
done
while read -r kind value _; do
  [ "$kind" = netns ] && ip netns del "$value" 2>/dev/null
done < <(tac "$registry")
: >"$registry"
