// The port's flow steering table: the rules raw packet QPs created (ibv_create_flow) and the decision of
// which QPs a frame goes to. No I/O; the Device delivers (transport/qp/raw_packet.cpp).
//
// How a received frame is steered, as a ConnectX's NIC flow tables do it for the rules user space adds:
// - Normal rules are tried by priority, strongest (lowest number) first. At the first priority where rules
//   match, every matching rule's QP gets the frame (QPs listening to the same traffic each get a copy). A
//   matching rule with the drop action drops it. Unless every matching rule there has DONT_TRAP, the frame
//   is trapped: lower priorities and the port's own stack (ARP, RoCE, ...) never see it. With DONT_TRAP
//   only, it goes on to the next priority and then to the port's stack.
// - Default rules take what nothing else took (no normal rule trapped it, and the port's own stack had no
//   use for it): ALL_DEFAULT all of it, another station's frames too (a NIC's promiscuous mode, as mlx5 makes
//   it and perftest's --promiscuous uses it), MC_DEFAULT its multicast frames (all-multicast mode).
// - Sniffer rules get a copy of every frame the port receives or sends, whatever else happens to it.
// A raw packet QP never receives the frames it sent itself (a NIC blocks such self loopback).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "transport/flow/flow_rule.hpp"

namespace uroce::transport::flow {

class FlowTable {
 public:
  // Adds `rule` for QP `qpn`; returns its handle (never 0).
  uint32_t add(uint32_t qpn, FlowRule rule);
  // Removes a rule; false if `handle` is none. `qpn` receives the QP it was for.
  bool remove(uint32_t handle, uint32_t& qpn);
  bool empty() const { return rules_.empty(); }
  bool has_sniffers() const { return sniffers_ != 0; }

  // The QPs a received frame goes to under the normal rules (appended to `to`, each once); true if it
  // was trapped (or dropped by a rule): the port's own stack must not see it. `sender`: the QP that sent
  // the frame, if it comes from this port (0: from the wire).
  bool steer(std::span<const uint8_t> frame, uint32_t sender, std::vector<uint32_t>& to) const;
  // The QPs of the default rules, for a frame nothing else took.
  void unclaimed(std::span<const uint8_t> frame, uint32_t sender, std::vector<uint32_t>& to) const;
  // The QPs of the sniffer rules.
  void sniffers(std::vector<uint32_t>& to) const;

 private:
  struct Entry {
    uint32_t handle;
    uint32_t qpn;
    FlowRule rule;
  };
  std::vector<Entry> rules_;  // by priority, then age: the order rules are tried in
  uint32_t next_handle_ = 1;
  uint32_t sniffers_ = 0;
};

}  // namespace uroce::transport::flow
