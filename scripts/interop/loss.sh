#!/usr/bin/env bash
# Packet loss on the harness's bridge, host side: an nftables netdev ingress rule per bridge port drops
# the given percentage of RoCEv2 frames (UDP port 4791) that enter the bridge through that port, i.e.
# frames SENT by whoever sits behind it (vb: uroced, tap0: vm0, tap1: vm1). ARP and the programs' TCP
# exchange are never dropped. (tc netem does not exist in this host kernel.)
#
#   loss.sh NETNS set DEV PERCENT     drop PERCENT% of DEV's RoCE frames (replaces an earlier rule)
#   loss.sh NETNS clear               no loss anywhere
set -euo pipefail
ns=$1 what=$2
nft() { ip netns exec "$ns" nft "$@"; }
case "$what" in
  set)
    dev=$3 pct=$4
    nft delete chain netdev interop "in_$dev" 2>/dev/null || true
    nft add chain netdev interop "in_$dev" "{ type filter hook ingress device \"$dev\" priority 0; }"
    nft add rule netdev interop "in_$dev" udp dport 4791 numgen random mod 100 "<" "$pct" counter drop
    ;;
  clear)
    nft flush table netdev interop
    for chain in $(nft list table netdev interop | sed -n 's/^\s*chain \(\S*\) {/\1/p'); do
      nft delete chain netdev interop "$chain"
    done
    ;;
  *) echo "loss.sh: unknown action $what" >&2; exit 2 ;;
esac
