#!/usr/bin/env bash
# uroce's main job, shown on a fresh Debian 12 machine: installs what it needs, builds, then reads real
# RoCEv2 traffic captured between two Linux Soft-RoCE (rxe) kernels and
#   1. dissects it, verifying every packet's ICRC (tshark does not);
#   2. shows one packet field by field;
#   3. explains what happens: the rdma_cm handshake, then messages, ACKs, NAKs and go-back-N retransmission
#      over a lossy link.
# (Once the daemon exists, the demo will run real verbs programs through it instead.)
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/deps.sh >/dev/null
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build/release --target uroce >/dev/null
uroce=build/release/pcap_tools/uroce
captures=tests/data/captures

banner() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

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

banner "a corrupted copy of a capture: one payload bit flipped"
cp "$captures/01-rc-send-pingpong.pcap" "$tmp/corrupt.pcap"
# Frame 3's record starts at byte 24 + 16 + 42 (ARP) + 16 + 42 (ARP); flip a bit deep in its payload.
offset=$((24 + 16 + 42 + 16 + 42 + 16 + 200))
byte=$(od -An -tu1 -j "$offset" -N1 "$tmp/corrupt.pcap" | tr -d ' ')
printf "$(printf '\\%03o' $((byte ^ 1)))" | dd of="$tmp/corrupt.pcap" bs=1 seek="$offset" conv=notrunc status=none
"$uroce" dissect -c 4 "$tmp/corrupt.pcap"
