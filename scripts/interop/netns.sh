# The harness's network: one network namespace that this run creates and owns, holding a bridge, one
# tap per VM, and a veth pair whose end "vu" is uroce's port. As on a host with a real RDMA NIC, uroce's
# address is also the kernel's there: uroced (af_packet on vu) owns RoCEv2 (UDP 4791) and answers ARP for
# it, the kernel (the same address on vu, so the same MAC in its ARP replies) owns TCP, which the
# programs' out-of-band exchange and rdma_cm programs such as qperf (one address for both) need. An
# nftables input rule keeps the kernel from answering RoCE frames (ICMP port unreachable); uroced sees
# them first. Nothing in the namespace has a route out of it. Deleting the namespace deletes every
# interface in it. Source after lib.sh.
#
#   10.99.0.1   uroce: uroced for RoCE, the kernel for TCP (veth "vu")
#   10.99.0.2   VM vm0 (tap0)          10.99.0.3   VM vm1 (tap1, rxe<->rxe cells)
#   10.99.0.4   uroced in VM vm0 on its second NIC, a PCI device driven by DPDK (tap2, scripts/pci_port.sh)
#   10.99.100.1 uroce on 802.1Q VLAN 100 (uroced --vlan 100 on vu)   10.99.100.2 vm0's eth0.100 (rxe)
#   (the "vlan" cells: the bridge carries the tagged frames as they are; the kernels here have no VLAN
#   device, so only uroced takes them on vu)
#   fd99::1 .. fd99::4: the same four over IPv6, shared the same way (fd99::1 is the kernel's on vu too:
#   rping's getaddrinfo wants a non-loopback IPv6 address on the host before it resolves an IPv6 one)

INTEROP_NET=10.99.0
INTEROP_UROCE_IP=$INTEROP_NET.1
INTEROP_UROCE_IP6=fd99::1

netns_create() {
  local ns=$1
  ip netns add "$ns" || die "cannot create network namespace $ns"
  record netns "$ns"
  local n=(ip -n "$ns")
  "${n[@]}" link set lo up
  "${n[@]}" link add br0 type bridge forward_delay 0 stp_state 0
  "${n[@]}" link add vu type veth peer name vb
  "${n[@]}" tuntap add tap0 mode tap
  "${n[@]}" tuntap add tap1 mode tap
  "${n[@]}" tuntap add tap2 mode tap
  for dev in br0 vb tap0 tap1 tap2; do  # bridge ports: no addresses, no IPv6 chatter of their own
    ip netns exec "$ns" sysctl -qw "net.ipv6.conf.$dev.disable_ipv6=1"
  done
  # ARP for 10.99.0.1 only from vu. By default Linux answers ARP for any of its addresses on any interface,
  # and br0 receives every broadcast on the bridge: a VM asking for 10.99.0.1 then also got br0's MAC, and
  # whichever reply came first won. A VM's uroced that learned br0's MAC sent its first UD datagram to the
  # namespace's kernel, which dropped it (ibv_ud_pingpong in the PCI column stalled; RC retransmits once a
  # later reply corrected the entry).
  ip netns exec "$ns" sysctl -qw net.ipv4.conf.all.arp_ignore=1
  for dev in vb tap0 tap1 tap2; do "${n[@]}" link set "$dev" master br0; done
  "${n[@]}" addr add "$INTEROP_UROCE_IP/24" dev vu
  "${n[@]}" addr add "$INTEROP_UROCE_IP6/64" dev vu nodad
  for dev in br0 vu vb tap0 tap1 tap2; do "${n[@]}" link set "$dev" up; done
  ip netns exec "$ns" nft add table inet interop_host
  ip netns exec "$ns" nft add chain inet interop_host input '{ type filter hook input priority 0; }'
  ip netns exec "$ns" nft add rule inet interop_host input udp dport 4791 drop
  # nftables table of this namespace for loss injection; rules are added per cell (loss.sh).
  ip netns exec "$ns" nft add table netdev interop
}
