# Shared by the interop harness's shell pieces: logging, the registry of what this run created, and
# bounded waiting. Source it; it needs $INTEROP_WORK (the run's private directory) to be set.
#
# Everything the harness creates is recorded in $INTEROP_WORK/created: one line per object, "pid N",
# "netns NAME". cleanup.sh undoes exactly those lines and nothing else.

log() { printf '[interop %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# record KIND VALUE: remember something this run created, so that cleanup removes it (and only it).
# A pid is recorded with its start time (field 22 of /proc/PID/stat), so that cleanup never signals a
# process that merely reuses the number.
record() {
  local value=$2
  if [ "$1" = pid ]; then value="$2 $(proc_start_time "$2")"; fi
  printf '%s %s\n' "$1" "$value" >>"$INTEROP_WORK/created"
}
proc_start_time() { sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f20; }

# wait_for SECONDS COMMAND...: polls COMMAND every 0.2 s until it succeeds; fails after SECONDS.
wait_for() {
  local limit=$1; shift
  local deadline=$((SECONDS + limit))
  until "$@" 2>/dev/null; do
    ((SECONDS < deadline)) || return 1
    sleep 0.2
  done
}
