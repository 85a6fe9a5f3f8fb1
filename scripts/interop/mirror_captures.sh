#!/usr/bin/env bash
# Makes the mirrored captures in tests/data/captures/linux-mirror/: RoCEv2 traffic between uroce and
# Linux's rxe, mirrored by Linux's own tunnel drivers, so that `uroce`'s reading of ERSPAN, GRE and VXLAN is
# tested on frames no one here wrote (tests/integration/test_tunnels_cli.py).
#
# In the interop VM (Debian's kernel, rxe on eth0; vm.sh), tc mirrors every frame eth0 receives or sends
# (clsact, matchall, mirred) into five tunnels whose far ends sit on a dummy interface, where tcpdump
# captures them: ERSPAN type II (erspan_ver 1) and type III (erspan_ver 2) over IPv4, type III over IPv6
# (ip6erspan), gretap with a key, and VXLAN. uroced on the host's side of the link captures the same traffic
# directly. The traffic: ibv_rc_pingpong (rxe the server) and rping (rdma_cm's MADs, RDMA READ and WRITE,
# rxe the server), uroce the client of both.
#
#   mirror_captures.sh BUILD_DIR OUT_DIR     (root; boots one VM: a minute or two under TCG)
#
# Writes OUT_DIR/mirror.pcap (what the tunnels carried) and OUT_DIR/direct.pcap (uroced's capture).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:?usage: mirror_captures.sh BUILD_DIR OUT_DIR}" && pwd)
out=${2:?usage: mirror_captures.sh BUILD_DIR OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)

export INTEROP_DIR=$repo/scripts/interop
. "$INTEROP_DIR/run.sh" uroce-mirror
prepare_guest_kernel
ns=uroce-mirror-$$
netns_create "$ns"
vm_boot vm0 "$ns" tap0 52:54:00:99:00:02 10.99.0.2/24
vm_wait_ready vm0
share=$INTEROP_WORK/vm0/share

# guest NAME LIMIT SCRIPT: runs SCRIPT in the VM (the guest agent's NAME.cmd) and waits for it; its output
# is shown, and its exit status returned.
guest() {
  local name=$1 limit=$2 script=$3
  printf '%s\n' "$script" >"$share/$name.tmp"
  mv "$share/$name.tmp" "$share/$name.cmd"
  wait_for "$limit" test -e "$share/$name.rc" || { log "$name did not finish in ${limit}s"; return 1; }
  sed "s/^/[vm0 $name] /" "$share/$name.out" >&2
  return "$(cat "$share/$name.rc")"
}

log "uroced on the host's end of the link, capturing"
socket=$INTEROP_WORK/uroced.sock
ip netns exec "$ns" "$build/emulator/uroced" --port net_af_packet0,iface=vu --ip "$INTEROP_UROCE_IP" \
  --socket "$socket" --capture "$INTEROP_WORK/direct.pcap" >"$INTEROP_WORK/uroced.log" 2>&1 &
uroced=$!
record pid "$uroced"
wait_for 60 test -S "$socket" || { cat "$INTEROP_WORK/uroced.log" >&2; die "uroced did not start"; }

log "the VM's mirror: eth0 into five tunnels, captured on a dummy interface"
guest mirror 300 '
set -e
modprobe -a dummy ip_gre ip6_gre cls_matchall act_mirred sch_ingress vxlan
ip link add mir0 mtu 9000 type dummy
ip addr add 10.200.0.1/24 dev mir0
ip -6 addr add fd00:200::1/64 dev mir0 nodad
ip link set mir0 up
ip link add ers2 type erspan seq key 100 local 10.200.0.1 remote 10.200.0.2 erspan_ver 1 erspan 77
ip link add ers3 type erspan seq key 200 local 10.200.0.1 remote 10.200.0.3 erspan_ver 2 erspan_dir egress erspan_hwid 9
ip link add ers6 type ip6erspan seq key 300 local fd00:200::1 remote fd00:200::4 erspan_ver 2 erspan_dir ingress erspan_hwid 3
ip link add gt0 type gretap key 400 local 10.200.0.1 remote 10.200.0.5
ip link add vx0 type vxlan id 5001 local 10.200.0.1 remote 10.200.0.6 dstport 4789
for d in ers2 ers3 ers6 gt0 vx0; do ip link set "$d" mtu 8000 up; done
tc qdisc add dev eth0 clsact
for dir in ingress egress; do
  tc filter add dev eth0 "$dir" matchall \
    action mirred egress mirror dev ers2 pipe action mirred egress mirror dev ers3 pipe \
    action mirred egress mirror dev ers6 pipe action mirred egress mirror dev gt0 pipe \
    action mirred egress mirror dev vx0 pipe
done
tcpdump -i mir0 -U -w /run/interop/mirror.pcap >/run/interop/tcpdump.log 2>&1 &
echo $! >/run/interop/tcpdump.pid
sleep 2
'

# client PROGRAM ARGS...: the program through uroce-run in the namespace, tried until the VM's server answers.
client() {
  local i
  for i in $(seq 30); do
    if ip netns exec "$ns" timeout 60 "$build/verbs_shim/uroce-run" --socket "$socket" "$@" \
         >"$INTEROP_WORK/client.out" 2>&1; then
      return 0
    fi
    sleep 1
  done
  cat "$INTEROP_WORK/client.out" >&2
  return 1
}

log "ibv_rc_pingpong: rxe serves, uroce is the client"
guest pingpong_server 5 'timeout 120 ibv_rc_pingpong -d rxe0 -g 1 -n 10 -s 1024 >/run/interop/pp.out 2>&1 &'
client ibv_rc_pingpong -d uroce0 -g 0 -n 10 -s 1024 10.99.0.2 || die "ibv_rc_pingpong failed"

log "rping: rxe serves, uroce is the client"
guest rping_server 5 'timeout 120 rping -s -a 10.99.0.2 -C 3 -S 512 -v >/run/interop/rping.out 2>&1 &'
client rping -c -a 10.99.0.2 -C 3 -S 512 -v || die "rping failed"
sleep 2

log "stopping the captures"
guest stop 60 'kill "$(cat /run/interop/tcpdump.pid)"; sleep 1; cat /run/interop/tcpdump.log'
kill "$uroced"
wait "$uroced" || true
cp "$share/mirror.pcap" "$out/mirror.pcap"
cp "$INTEROP_WORK/direct.pcap" "$out/direct.pcap"
log "written: $out/mirror.pcap ($(stat -c %s "$out/mirror.pcap") bytes), $out/direct.pcap"
