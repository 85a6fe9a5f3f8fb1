#include "transport/flow/flow_table.hpp"

#include <algorithm>

namespace uroce::transport::flow {

namespace {

void add_once(std::vector<uint32_t>& to, uint32_t qpn) {
  if (std::find(to.begin(), to.end(), qpn) == to.end()) to.push_back(qpn);
}

bool multicast_destination(std::span<const uint8_t> frame) { return !frame.empty() && (frame[0] & 1) != 0; }

}  // namespace

uint32_t FlowTable::add(uint32_t qpn, FlowRule rule) {
  uint32_t handle = next_handle_++;
  if (handle == 0) handle = next_handle_++;  // after 2^32 rules: 0 means none
  if (rule.type == AttrType::sniffer) ++sniffers_;
  // After every rule of the same or a stronger priority: equals are tried oldest first.
  const auto at = std::upper_bound(rules_.begin(), rules_.end(), rule.priority,
                                   [](uint16_t p, const Entry& e) { return p < e.rule.priority; });
  rules_.insert(at, Entry{handle, qpn, std::move(rule)});
  return handle;
}

bool FlowTable::remove(uint32_t handle, uint32_t& qpn) {
  const auto it = std::find_if(rules_.begin(), rules_.end(), [&](const Entry& e) { return e.handle == handle; });
  if (it == rules_.end()) return false;
  qpn = it->qpn;
  if (it->rule.type == AttrType::sniffer) --sniffers_;
  rules_.erase(it);
  return true;
}

bool FlowTable::steer(std::span<const uint8_t> frame, uint32_t sender, std::vector<uint32_t>& to) const {
  size_t i = 0;
  while (i < rules_.size()) {
    // One priority at a time: [i, end) holds its rules.
    const uint16_t priority = rules_[i].rule.priority;
    size_t end = i;
    while (end < rules_.size() && rules_[end].rule.priority == priority) ++end;
    bool matched = false, trapped = false, dropped = false;
    for (; i < end; ++i) {
      const Entry& e = rules_[i];
      if (e.rule.type != AttrType::normal || e.qpn == sender || !matches(e.rule, frame)) continue;
      matched = true;
      trapped |= (e.rule.flags & flag_dont_trap) == 0;
      if (e.rule.drop) {
        dropped = true;
      } else {
        add_once(to, e.qpn);
      }
    }
    if (dropped) {
      to.clear();  // a drop at the strongest matching priority wins over deliveries there
      return true;
    }
    if (matched && trapped) return true;
  }
  return false;
}

void FlowTable::unclaimed(std::span<const uint8_t> frame, uint32_t sender, std::vector<uint32_t>& to) const {
  const bool multicast = multicast_destination(frame);
  for (const Entry& e : rules_) {
    if (e.qpn == sender) continue;
    if (e.rule.type == AttrType::all_default || (e.rule.type == AttrType::mc_default && multicast)) {
      add_once(to, e.qpn);
    }
  }
}

void FlowTable::sniffers(std::vector<uint32_t>& to) const {
  if (sniffers_ == 0) return;
  for (const Entry& e : rules_) {
    if (e.rule.type == AttrType::sniffer) add_once(to, e.qpn);
  }
}

}  // namespace uroce::transport::flow
