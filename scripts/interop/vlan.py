"""The VLAN cells' network (netns.sh): the 802.1Q VLAN, the priority both sides' RoCE frames carry, and the
two addresses on it. One place for the guest's VLAN device, the host's uroced and the capture check."""
VLAN_ID = 100
VLAN_PRIORITY = "3"             # the SL the programs name (-l, --sl): uroce's frames' priority; rxe's egress map
UROCE_VLAN_IP = "10.99.100.1"   # uroced --vlan 100 on vu
VLAN_GUEST_IP = "10.99.100.2"   # vm0's eth0.100 (guest-agent.sh: 10.99.100.<N>)
