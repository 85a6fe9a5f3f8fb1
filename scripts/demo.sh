#!/usr/bin/env bash
# uroce's main job, shown on a fresh Debian 12 machine: installs what it needs, builds, then
#   1. starts uroced, the software RoCEv2 NIC, on its internal loopback port, and runs RDMA between two
#      processes through it (RDMA WRITE, READ, SEND, atomics; every byte checked), capturing every frame;
#      then runs unmodified Debian programs (ibv_devinfo, ibv_rc_pingpong) through it with the verbs shim;
#   2. dissects, explains and checks that capture (every ICRC verified, the protocol's rules kept);
#   3. reads real RoCEv2 traffic captured between two Linux Soft-RoCE (rxe) kernels: dissects it, shows one
#      packet field by field, explains the rdma_cm handshake and go-back-N recovery over a lossy link, and
#      replays rxe's requests into uroce's responder to compare the answers.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/deps.sh >/dev/null
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build/release --target uroce uroced uroce-rdma-test uroce_verbs_shim >/dev/null
uroce=build/release/pcap_tools/uroce
uroced=build/release/emulator/uroced
rdma_test=build/release/emulator/tools/uroce-rdma-test
uroce_run=build/release/verbs_shim/uroce-run
captures=tests/data/captures

banner() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
tmp=$(mktemp -d)
daemon_pid=
pingpong_pid=
cleanup() {
  if [ -n "$pingpong_pid" ]; then kill "$pingpong_pid" 2>/dev/null || true; wait "$pingpong_pid" 2>/dev/null || true; fi
  if [ -n "$daemon_pid" ]; then kill "$daemon_pid" 2>/dev/null || true; wait "$daemon_pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

banner "uroced: a RoCEv2 NIC in software, on its internal loopback port (192.0.2.1), capturing every frame"
"$uroced" --socket "$tmp/uroced.sock" --capture "$tmp/demo.pcap" >"$tmp/uroced.log" 2>&1 &
daemon_pid=$!
for _ in $(seq 100); do [ -S "$tmp/uroced.sock" ] && break; sleep 0.1; done
grep -E "ready|engine running" "$tmp/uroced.log" | sed 's/^.* info /  /'

pair() {  # two processes, one RDMA queue pair each, through uroced; the client prints the verdict
  "$rdma_test" --server --socket "$tmp/uroced.sock" --oob "$tmp/oob" "$@" &
  local server=$!
  "$rdma_test" --client --socket "$tmp/uroced.sock" --oob "$tmp/oob" "$@" |
    python3 -c 'import json,sys; r=json.loads(sys.stdin.read()); print("  %-6s %6d B x %5d: %6.2f GB/s, %5.0f k msg/s, every byte checked: %s" % (r["op"], r["size"], r["count"], r["gbytes_per_s"], r["messages_per_s"] / 1e3, r["verified"]))'
  wait "$server"
}
banner "RDMA between two processes through uroced (uroce-rdma-test)"
pair --op write --size 65536 --count 2000
pair --op read --size 65536 --count 2000
pair --op send --size 64 --count 20000
pair --op atomic --size 8 --count 5000
pair --op ud --size 1024 --count 5000

banner "unmodified Debian programs through uroced: ibv_devinfo, ibv_rc_pingpong (uroce-run, the verbs shim)"
"$uroce_run" --socket "$tmp/uroced.sock" ibv_devinfo >"$tmp/devinfo.txt"
sed '/link_layer/q' "$tmp/devinfo.txt"  # the device and its port, up to the link layer
echo "  ..."
"$uroce_run" --socket "$tmp/uroced.sock" ibv_rc_pingpong -d uroce0 -g 0 -n 1000 >"$tmp/pp-server.txt" 2>&1 &
pingpong_pid=$!
for try in $(seq 50); do  # the client gives up at once if the server is not listening yet: retry
  if "$uroce_run" --socket "$tmp/uroced.sock" ibv_rc_pingpong -d uroce0 -g 0 -n 1000 localhost \
       >"$tmp/pp-client.txt" 2>&1; then break; fi
  if [ "$try" = 50 ] || ! grep -q "Couldn't connect" "$tmp/pp-client.txt"; then cat "$tmp/pp-client.txt"; exit 1; fi
  sleep 0.1
done
wait "$pingpong_pid"
pingpong_pid=
sed 's/^/  client: /' "$tmp/pp-client.txt"

banner "uroce stats: the NIC's counters"
"$uroce" stats --socket "$tmp/uroced.sock" --nonzero | grep -E "^(device|net|engine|port)\." | head -20
kill "$daemon_pid"
wait "$daemon_pid" || true
daemon_pid=

banner "uroce dissect: the capture uroced wrote (first 12 frames), every ICRC verified"
"$uroce" dissect -c 12 "$tmp/demo.pcap"
"$uroce" dissect "$tmp/demo.pcap" 2>&1 >/dev/null | tail -1

banner "uroce explain: that capture as a story (the flow table)"
"$uroce" explain "$tmp/demo.pcap" >"$tmp/demo.txt"
sed -n '/^Flows/,$p' "$tmp/demo.txt"

banner "uroce check: that capture held to the protocol's rules (ICRCs, opcode sequences, lengths)"
"$uroce" check "$tmp/demo.pcap"

banner "uroce dissect: rping over rdma_cm, every packet's ICRC verified (first 16 frames)"
"$uroce" dissect -c 16 "$captures/10-rdma-cm-rping.pcap"

banner "uroce dissect -V: the CM REQ that opens the connection, field by field"
"$uroce" dissect -V --qp 1 -c 1 "$captures/10-rdma-cm-rping.pcap" 2>/dev/null

banner "uroce explain: the same capture as a story (the beginning)"
"$uroce" explain "$captures/10-rdma-cm-rping.pcap" >"$tmp/rping.txt"
sed -n 1,16p "$tmp/rping.txt"

banner "uroce explain: RDMA WRITEs over a link losing 5% of packets (NAKs and go-back-N)"
"$uroce" explain "$captures/11-rc-write-loss5.pcap" >"$tmp/loss.txt"
sed -n '/#55-61/,/#87-93/p' "$tmp/loss.txt"
echo "..."
sed -n '/^Flows/,$p' "$tmp/loss.txt"

banner "uroce replay: rxe's requests fed into uroce's own responder, its answers set beside rxe's"
"$uroce" replay "$captures/06-rc-read.pcap"
"$uroce" replay --lossy "$captures/11-rc-write-loss5.pcap" | sed -n '3,4p'

banner "a corrupted copy of a capture: one payload bit flipped"
cp "$captures/01-rc-send-pingpong.pcap" "$tmp/corrupt.pcap"
# Frame 3's record starts at byte 24 + 16 + 42 (ARP) + 16 + 42 (ARP); flip a bit deep in its payload.
offset=$((24 + 16 + 42 + 16 + 42 + 16 + 200))
byte=$(od -An -tu1 -j "$offset" -N1 "$tmp/corrupt.pcap" | tr -d ' ')
printf "$(printf '\\%03o' $((byte ^ 1)))" | dd of="$tmp/corrupt.pcap" bs=1 seek="$offset" conv=notrunc status=none
"$uroce" dissect -c 4 "$tmp/corrupt.pcap"
echo "uroce check on that copy (exit status 1: a violation):"
"$uroce" check "$tmp/corrupt.pcap" | sed -n '/^bad_icrc/,$p' || true
