// The uroce device a replay runs: one RC QP taking the place of one side of a captured connection, on a
// transport::Device of its own whose every transmitted packet goes to the replay's sink. Both replays
// (responder_replay.hpp, requester_replay.hpp) build theirs with this.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "transport/device.hpp"
#include "transport/wire/build.hpp"

namespace uroce::pcap_tools {

inline constexpr uint32_t replay_all_access = verbs::access_local_write | verbs::access_remote_write |
                                              verbs::access_remote_read | verbs::access_remote_atomic;

// How the replay's QP faces the captured peer.
struct ReplayPeer {
  wire::IpAddress address;
  uint32_t qpn = 0;
  uint32_t sq_psn = 0;      // the first PSN our QP sends
  uint32_t rq_psn = 0;      // the first PSN it expects
  uint8_t timeout = 14;     // 0: no retransmission timer (a replay has no notion of time)
};

class ReplayDevice {
 public:
  ReplayDevice(transport::PacketSink& sink, const wire::IpAddress& own_address, verbs::Mtu mtu);

  // A PD, a CQ of `cq_depth` and an RC QP with `cap`, taken to RTS facing `peer` as rxe's QPs were set up
  // (every access granted, RNR timer 12, 16 outstanding READs/atomics each way); an error text if not.
  std::string open(uint32_t cq_depth, const verbs::QpCap& cap, const ReplayPeer& peer);

  // Registers `length` bytes of memory of the replay's own at `va`; false if the device refuses.
  bool register_memory(uint64_t va, uint64_t length, uint32_t& key);
  // The memory registered by the `index`th call (in order, from 0).
  std::vector<uint8_t>& memory(size_t index) { return memory_.at(index); }
  const std::vector<uint8_t>& memory(size_t index) const { return memory_.at(index); }

  // Delivers a frame built from `spec`, addressed to our QP, as a burst of its own (an ACK owed for it,
  // coalesced over nothing, leaves at once), then lets the device send; false if it cannot be built.
  bool feed(wire::FrameSpec spec);

  transport::Device& device() { return device_; }
  uint32_t cq() const { return cq_; }
  uint32_t qpn() const { return qpn_; }

 private:
  bool connect(const ReplayPeer& peer, verbs::Mtu mtu);

  transport::Device device_;
  verbs::Mtu mtu_;
  uint32_t pd_ = 0, cq_ = 0, qpn_ = 0;
  std::vector<std::vector<uint8_t>> memory_;
  std::vector<uint8_t> rebuilt_;
};

}  // namespace uroce::pcap_tools
