// A scripted endpoint for the simulation network's tests: it sends RC SEND_ONLY packets on a schedule,
// fires alarms, optionally answers what it receives, and records every frame as the receiver parsed it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "transport/packet_io.hpp"
#include "transport/sim/endpoint.hpp"
#include "transport/sim/sim_network.hpp"
#include "transport/verbs/work.hpp"
#include "transport/wire/frame.hpp"

namespace uroce::sim::test {

inline constexpr uint8_t op_send_only = 0x04;
inline constexpr uint8_t op_ack = 0x11;
inline constexpr uint32_t test_qpn = 0x11;

inline wire::IpAddress ip4(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
  return wire::IpAddress::from_v4(uint32_t(a) << 24 | uint32_t(b) << 16 | uint32_t(c) << 8 | d);
}

inline wire::IpAddress ip(const char* text) { return *wire::parse_ip(text); }

inline verbs::AddressVector to(const wire::IpAddress& dgid) {
  verbs::AddressVector av;
  av.dgid = dgid;
  return av;
}

struct Received {
  Nanos at = 0;
  std::vector<uint8_t> bytes;  // empty unless the endpoint keeps bytes
  bool parsed = false;         // parse_frame() found no error
  bool roce = false;           // ... and it is RoCEv2
  bool icrc = false;           // ... and its ICRC matches
  uint8_t opcode = 0;
  uint32_t psn = 0;
  size_t size = 0;

  bool good() const { return parsed && roce && icrc; }
};

class TestEndpoint : public Endpoint {
 public:
  bool keep_bytes = true;
  bool echo_sends = false;  // answer every good SEND with an ACK of its PSN (through pending work)
  bool echo_all = false;    // answer every good frame, ACKs included: a ping-pong that never ends
  bool stuck = false;       // claims pending work forever
  Nanos echo_at_deadline = 0;  // non-zero: answer after this long, by deadline instead of pending work

  std::vector<Received> received;
  std::vector<Nanos> runs;          // every run() call
  std::vector<Nanos> alarms_fired;  // alarm times that run() found due
  uint64_t sent = 0;

  void attach(transport::PacketSink& sink) { sink_ = &sink; }

  // `count` packets to av.dgid with PSNs from `first_psn`: the first at `start`, then every `interval`.
  void stream(const verbs::AddressVector& av, Nanos start, Nanos interval, uint32_t count, size_t payload = 16,
              uint32_t first_psn = 0, bool ecn = false) {
    streams_.push_back({av, start, interval, count, first_psn, payload, ecn});
  }

  // Transmits one packet right now, outside run() (as a verb posted by the test would).
  void send(const verbs::AddressVector& av, uint32_t psn, size_t payload = 16, bool ecn = false,
            uint8_t opcode = op_send_only, uint16_t udp_src_port = 0xc000) {
    std::vector<uint8_t> data(payload);
    for (size_t i = 0; i < payload; ++i) data[i] = uint8_t(psn + i);
    transport::OutPacket p;
    p.destination = &av;
    p.src_qpn = test_qpn;
    p.udp_src_port = udp_src_port;
    p.ecn_capable = ecn;
    p.headers.bth.opcode = opcode;
    p.headers.bth.dest_qp = test_qpn;
    p.headers.bth.psn = psn & wire::psn_mask;
    if (opcode == op_ack) p.headers.aeth = wire::Aeth::ack(psn);
    p.payload = data;
    sink_->transmit(p);
    ++sent;
  }

  void alarm(Nanos t) { alarms_.insert(t); }

  size_t good_count() const {
    size_t n = 0;
    for (const Received& r : received) n += r.good();
    return n;
  }

  // Endpoint
  void receive(std::span<const uint8_t> frame, Nanos now) override {
    wire::Frame f;
    wire::parse_frame(frame, f);
    Received r;
    r.at = now;
    r.parsed = f.ok();
    r.roce = f.is_roce();
    r.icrc = r.roce && wire::icrc_ok(f);
    r.size = frame.size();
    if (r.roce) {
      r.opcode = f.roce.bth().opcode;
      r.psn = f.roce.bth().psn;
    }
    if (keep_bytes) r.bytes.assign(frame.begin(), frame.end());
    if (r.good() && (echo_all || (echo_sends && r.opcode == op_send_only))) {
      replies_.emplace(echo_at_deadline ? now + echo_at_deadline : now, Reply{to(f.src_ip()), r.psn});
    }
    received.push_back(std::move(r));
  }

  void run(Nanos now) override {
    runs.push_back(now);
    while (!replies_.empty() && replies_.begin()->first <= now) {
      const Reply reply = replies_.begin()->second;
      replies_.erase(replies_.begin());
      send(reply.av, reply.psn, 0, false, op_ack);
    }
    for (Stream& s : streams_) {
      while (s.remaining > 0 && s.next <= now) {
        send(s.av, s.psn++, s.payload, s.ecn);
        --s.remaining;
        s.next += s.interval;
      }
    }
    while (!alarms_.empty() && *alarms_.begin() <= now) {
      alarms_fired.push_back(*alarms_.begin());
      alarms_.erase(alarms_.begin());
    }
  }

  Nanos next_deadline() const override {
    Nanos t = never;
    for (const Stream& s : streams_) {
      if (s.remaining > 0) t = std::min(t, s.next);
    }
    if (!alarms_.empty()) t = std::min(t, *alarms_.begin());
    if (echo_at_deadline && !replies_.empty()) t = std::min(t, replies_.begin()->first);
    return t;
  }

  bool has_pending_work() const override { return stuck || (!echo_at_deadline && !replies_.empty()); }

 private:
  struct Stream {
    verbs::AddressVector av;
    Nanos next;
    Nanos interval;
    uint32_t remaining;
    uint32_t psn;
    size_t payload;
    bool ecn;
  };
  struct Reply {
    verbs::AddressVector av;
    uint32_t psn;
  };

  transport::PacketSink* sink_ = nullptr;
  std::vector<Stream> streams_;
  std::multimap<Nanos, Reply> replies_;
  std::set<Nanos> alarms_;
};

// Two endpoints on one network: a = 10.0.0.1, b = 10.0.0.2 unless given.
struct Pair {
  explicit Pair(uint64_t seed, wire::IpAddress ip_a = ip4(10, 0, 0, 1), wire::IpAddress ip_b = ip4(10, 0, 0, 2))
      : net(seed), a_ip(ip_a), b_ip(ip_b) {
    na = net.add_node(a, a_ip, "a");
    nb = net.add_node(b, b_ip, "b");
    a.attach(net.sink(na));
    b.attach(net.sink(nb));
  }
  SimNetwork net;
  TestEndpoint a, b;
  wire::IpAddress a_ip, b_ip;
  NodeId na = 0, nb = 0;
};

}  // namespace uroce::sim::test
