#!/bin/sh
# The guest agent: PID 1 of the interop VM, running in the host's root filesystem (shared over 9p).
# Brings up eth0 with the address from the kernel command line (interop.ip=A/N) and fd99::<A's last
# byte>/64 (RoCEv2 over IPv6: rxe makes a GID of it, index 2), adds the rxe device and a VLAN device,
# then runs the commands the host drops into the shared directory /run/interop:
#   NAME.cmd  a shell script; renamed NAME.run when taken, its output goes to NAME.out and its exit
#             status to NAME.rc (written last, atomically). Commands run concurrently, each in the
#             background; the host bounds each one with `timeout` inside the script.
# Writes /run/interop/ready (the rxe device's details) when it is ready.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
share=/run/interop
ip=
for word in $(cat /proc/cmdline); do
  case "$word" in interop.ip=*) ip=${word#interop.ip=} ;; esac
done
exec >/dev/console 2>&1
mount -t configfs configfs /sys/kernel/config 2>/dev/null
ip link set lo up
ip link set eth0 up
ip addr add "$ip" dev eth0
rdma link add rxe0 type rxe netdev eth0 || echo "agent: rdma link add failed"
# After the rxe device, so that the IPv4 GID keeps index 1. nodad: nothing else on the bridge has it.
ip4=${ip%/*}
ip -6 addr add "fd99::${ip4##*.}/64" dev eth0 nodad
# 802.1Q VLAN 100 (the "vlan" cells), as Linux runs RoCE on a VLAN: eth0.100 with 10.99.100.<N>, whose
# address rxe0 gets as a GID after the others, and whose frames leave tagged with priority 3 (rxe's packets
# have skb priority 0; the egress map makes it 3).
ip link add link eth0 name eth0.100 type vlan id 100 egress-qos-map 0:3 &&
  ip addr add "10.99.100.${ip4##*.}/24" dev eth0.100 && ip link set eth0.100 up || echo "agent: no VLAN device"
{ rdma link show; ibv_devinfo -d rxe0 -v 2>&1 | grep -E "GID|state|active_mtu"; } >"$share/ready.tmp" 2>&1
mv "$share/ready.tmp" "$share/ready"
echo "agent: ready ($ip)"
while :; do
  for f in "$share"/*.cmd; do
    [ -e "$f" ] || continue
    id=${f%.cmd}
    mv "$f" "$id.run" || continue
    (sh "$id.run" >"$id.out" 2>&1; echo $? >"$id.rc.tmp"; mv "$id.rc.tmp" "$id.rc") &
  done
  sleep 0.1
done
