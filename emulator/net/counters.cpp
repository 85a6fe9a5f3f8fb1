#include "emulator/net/counters.hpp"

#include <string>

namespace uroce::emulator::net {

uint64_t NetCounters::dropped_total() const {
  uint64_t sum = 0;
  for (uint64_t n : dropped_by_reason) sum += n;
  return sum;
}

void for_each_counter(const NetCounters& c, const std::function<void(std::string_view, uint64_t)>& visit) {
  visit("rx_roce", c.rx_roce);
  visit("rx_arp", c.rx_arp);
  visit("rx_icmp_echo_requests", c.rx_icmp_echo_requests);
  visit("rx_nd", c.rx_nd);
  visit("rx_igmp", c.rx_igmp);
  visit("rx_mld", c.rx_mld);
  visit("rx_router_advertisements", c.rx_router_advertisements);
  visit("rx_pause", c.rx_pause);
  visit("arp_requests_received", c.arp_requests_received);
  visit("arp_replies_received", c.arp_replies_received);
  visit("arp_replies_sent", c.arp_replies_sent);
  visit("arp_ignored", c.arp_ignored);
  visit("arp_conflicts", c.arp_conflicts);
  visit("arp_requests_sent", c.arp_requests_sent);
  visit("arp_probes_sent", c.arp_probes_sent);
  visit("arp_resolution_failures", c.arp_resolution_failures);
  visit("arp_entries_expired", c.arp_entries_expired);
  visit("arp_parked", c.arp_parked);
  visit("arp_parked_released", c.arp_parked_released);
  visit("arp_parked_dropped", c.arp_parked_dropped);
  visit("nd_solicitations_received", c.nd_solicitations_received);
  visit("nd_advertisements_received", c.nd_advertisements_received);
  visit("nd_advertisements_sent", c.nd_advertisements_sent);
  visit("nd_ignored", c.nd_ignored);
  visit("nd_conflicts", c.nd_conflicts);
  visit("nd_solicitations_sent", c.nd_solicitations_sent);
  visit("nd_probes_sent", c.nd_probes_sent);
  visit("nd_resolution_failures", c.nd_resolution_failures);
  visit("nd_entries_expired", c.nd_entries_expired);
  visit("nd_parked", c.nd_parked);
  visit("nd_parked_released", c.nd_parked_released);
  visit("nd_parked_dropped", c.nd_parked_dropped);
  visit("igmp_queries_received", c.igmp_queries_received);
  visit("igmp_reports_sent", c.igmp_reports_sent);
  visit("igmp_leaves_sent", c.igmp_leaves_sent);
  visit("mld_queries_received", c.mld_queries_received);
  visit("mld_reports_sent", c.mld_reports_sent);
  visit("mld_dones_sent", c.mld_dones_sent);
  visit("rd_solicitations_sent", c.rd_solicitations_sent);
  visit("rd_advertisements_received", c.rd_advertisements_received);
  visit("rd_ignored", c.rd_ignored);
  visit("slaac_addresses_formed", c.slaac_addresses_formed);
  visit("slaac_prefixes_ignored", c.slaac_prefixes_ignored);
  visit("pfc_frames_received", c.pfc_frames_received);
  visit("pause_frames_received", c.pause_frames_received);
  visit("priority_pauses", c.priority_pauses);
  visit("priority_resumes", c.priority_resumes);
  visit("tx_frames_held", c.tx_frames_held);
  visit("tx_held_dropped", c.tx_held_dropped);
  visit("icmp_echo_replied", c.icmp_echo_replied);
  visit("icmp_echo_too_large", c.icmp_echo_too_large);
  for (size_t i = 0; i < drop_reason_count; ++i) {
    const std::string name = "dropped." + std::string(to_string(DropReason(i)));
    visit(name, c.dropped_by_reason[i]);
  }
}

}  // namespace uroce::emulator::net
