// What the NIC did besides RoCE, as plain counters: the engine thread increments them with no atomics, and
// `uroce stats` reads a copy taken on the engine thread (Engine::run_on_engine) and prints them by name.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string_view>

#include "emulator/net/drop_reason.hpp"

namespace uroce::emulator::net {

struct NetCounters {
  // Received frames, by what the classifier said they are.
  uint64_t rx_roce = 0;
  uint64_t rx_arp = 0;
  uint64_t rx_icmp_echo_requests = 0;
  uint64_t rx_nd = 0;                  // valid IPv6 Neighbor Solicitations and Advertisements
  uint64_t rx_igmp = 0;                // valid IGMP Membership Queries to all-hosts or one of our groups
  uint64_t rx_mld = 0;                 // valid MLD queries to all-nodes, one of our groups or solicited-node groups
  uint64_t rx_router_advertisements = 0;  // valid IPv6 Router Advertisements (RFC 4861 §6.1.2)
  uint64_t rx_pause = 0;               // PAUSE and PFC frames (link_pause.hpp)
  std::array<uint64_t, drop_reason_count> dropped_by_reason{};

  // The ARP responder.
  uint64_t arp_requests_received = 0;  // requests for one of our addresses
  uint64_t arp_replies_received = 0;   // replies addressed to one of our addresses
  uint64_t arp_replies_sent = 0;
  uint64_t arp_ignored = 0;            // ARP for other stations (used only to refresh known entries)
  uint64_t arp_conflicts = 0;          // another station claims one of our addresses
  // The ARP cache.
  uint64_t arp_requests_sent = 0;      // broadcast requests resolving an unknown peer, retries included
  uint64_t arp_probes_sent = 0;        // unicast requests refreshing an entry in use before it expires
  uint64_t arp_resolution_failures = 0;
  uint64_t arp_entries_expired = 0;
  uint64_t arp_parked = 0;             // packets that waited for a resolution
  uint64_t arp_parked_released = 0;
  uint64_t arp_parked_dropped = 0;     // limit reached, cache full, or resolution failed
  // IPv6 neighbour discovery (nd_responder.hpp, nd_cache.hpp): the same meanings as the ARP counters.
  uint64_t nd_solicitations_received = 0;    // NS for one of our addresses
  uint64_t nd_advertisements_received = 0;   // NA that answered (or refreshed) an entry we hold
  uint64_t nd_advertisements_sent = 0;
  uint64_t nd_ignored = 0;                   // NS/NA about other stations' addresses
  uint64_t nd_conflicts = 0;                 // another station advertises one of our addresses
  uint64_t nd_solicitations_sent = 0;        // multicast NS resolving an unknown peer, retries included
  uint64_t nd_probes_sent = 0;               // unicast NS refreshing an entry in use
  uint64_t nd_resolution_failures = 0;
  uint64_t nd_entries_expired = 0;
  uint64_t nd_parked = 0;
  uint64_t nd_parked_released = 0;
  uint64_t nd_parked_dropped = 0;
  // IGMP membership (igmp.hpp).
  uint64_t igmp_queries_received = 0;  // queries handed to IgmpMembership, whether they covered a group of ours
  uint64_t igmp_reports_sent = 0;      // unsolicited (joins) and answering queries
  uint64_t igmp_leaves_sent = 0;
  // MLD membership (mld.hpp).
  uint64_t mld_queries_received = 0;   // queries handed to MldMembership, whether they covered a group of ours
  uint64_t mld_reports_sent = 0;       // unsolicited (joins) and answering queries
  uint64_t mld_dones_sent = 0;
  // IPv6 router discovery (router_discovery.hpp).
  uint64_t rd_solicitations_sent = 0;
  uint64_t rd_advertisements_received = 0;
  uint64_t rd_ignored = 0;             // a router or prefix that did not fit the bounded tables
  uint64_t slaac_addresses_formed = 0; // addresses formed under an advertised prefix (address_autoconf.hpp)
  uint64_t slaac_prefixes_ignored = 0; // autonomous prefixes that can form no address (length, lifetimes, ...)
  // Link-level flow control (link_pause.hpp, Engine::transmit).
  uint64_t pfc_frames_received = 0;
  uint64_t pause_frames_received = 0;
  uint64_t priority_pauses = 0;        // a priority paused (or its pause renewed) by a PFC or PAUSE frame
  uint64_t priority_resumes = 0;       // a paused priority released early by a time of 0
  uint64_t tx_frames_held = 0;         // RoCE frames held while their priority was paused
  uint64_t tx_held_dropped = 0;        // ... dropped because the hold queue was full (RC retransmits them)
  // ICMP.
  uint64_t icmp_echo_replied = 0;
  uint64_t icmp_echo_too_large = 0;    // request whose reply would exceed the reply size bound

  uint64_t dropped_total() const;
  uint64_t& dropped(DropReason r) { return dropped_by_reason[size_t(r)]; }
  uint64_t dropped(DropReason r) const { return dropped_by_reason[size_t(r)]; }
};

// Every counter with its name ("rx_roce", ..., "dropped.not_for_our_mac", ...), in a fixed order, so that
// the stats printer and any JSON output never list the fields by hand a second time.
void for_each_counter(const NetCounters& c, const std::function<void(std::string_view, uint64_t)>& visit);

}  // namespace uroce::emulator::net
