// The first thing the engine does with a received frame: decide who handles it (the RoCE transport, the ARP
// responder, the ICMP echo responder, neighbour discovery, IGMP or MLD membership) or why it is dropped.
//
// Only the headers needed to route the frame are checked (Ethernet, one optional 802.1Q tag, IPv4/IPv6,
// UDP, ARP, ICMP and ICMPv6 echo requests, PAUSE and PFC; ICMPv6 neighbour discovery, IGMP queries and MLD queries with
// the Hop-by-Hop header before them, which are parsed and validated whole here). A RoCEv2 frame is not
// parsed past its UDP header here: transport::Device::receive parses the BTH onwards and verifies the ICRC
// itself, so doing it here too would parse every data packet twice.
//
// classify() is total: any bytes, any length; it never reads outside `frame` (a fuzz target holds it to
// that).
#pragma once

#include <cstdint>
#include <span>

#include "emulator/net/counters.hpp"
#include "emulator/net/drop_reason.hpp"
#include "emulator/net/igmp_frames.hpp"
#include "emulator/net/mld_frames.hpp"
#include "emulator/net/nd_frames.hpp"
#include "emulator/net/port_addresses.hpp"
#include "emulator/net/router_discovery_frames.hpp"
#include "transport/wire/ethernet.hpp"
#include "transport/wire/icrc.hpp"
#include "transport/wire/mac_control.hpp"

namespace uroce::emulator::net {

enum class FrameClass : uint8_t {
  roce,               // IPv4 or IPv6, UDP to 4791, to one of our addresses or groups: for Device::receive
  arp,                // IPv4-over-Ethernet ARP, broadcast or to our MAC: the ARP responder decides
  icmp_echo_request,  // ICMPv4 or ICMPv6 echo request to one of our addresses, checksums valid: icmp.hpp answers
  nd,                 // valid IPv6 Neighbor Solicitation/Advertisement (RFC 4861 §7.1): nd_responder.hpp
  igmp,               // valid IGMP Membership Query to all-hosts or one of our groups: IgmpMembership::on_query
  mld,                // valid MLD query to all-nodes, one of our groups or solicited-node groups: MldMembership
  router_advertisement,  // valid IPv6 Router Advertisement (RFC 4861 §6.1.2): RouterDiscovery
  pause,              // PAUSE or PFC to 01:80:c2:00:00:01, untagged: the link partner holds our priorities (LinkPause)
  drop,               // see Classification::reason
};

struct Classification {
  FrameClass kind = FrameClass::drop;
  DropReason reason = DropReason::truncated_ethernet;  // meaningful when kind == drop
  wire::EthernetHeader eth;                            // valid unless reason == truncated_ethernet
  wire::ArpPacket arp;                                 // kind == arp
  NdMessage nd;                                        // kind == nd
  IgmpQuery igmp;                                      // kind == igmp
  MldQuery mld;                                        // kind == mld
  RouterAdvertisement ra;                              // kind == router_advertisement
  wire::MacControl mac_control;                        // kind == pause
  wire::IpVersion ip_version = wire::IpVersion::v4;    // roce, icmp_echo_request
  uint32_t l3_offset = 0;  // the IP or ARP header
  uint32_t l4_offset = 0;  // the UDP or ICMP header
  uint32_t l3_end = 0;     // one past the IP packet; Ethernet padding lies beyond

  bool dropped() const { return kind == FrameClass::drop; }
};

Classification classify(std::span<const uint8_t> frame, const PortAddresses& port);

// Adds one classified frame to the counters (rx_* or dropped_by_reason).
void count(NetCounters& counters, const Classification& c);

}  // namespace uroce::emulator::net
