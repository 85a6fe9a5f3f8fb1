// libFuzzer target: hostile MADs into the connection manager (transport/cm). The input is a sequence of
// MADs (a length byte, then that many bytes, padded into a 256-byte MAD with a CM header most of the
// time, so that the state machine sees hostile contents and not only bad headers), fed to a CM that
// listens and has connections in every state, with time moving on between MADs. Checks: no crash, no
// undefined behaviour, decode(encode(decode(x))) is stable, and every MAD is counted.
#include <cstdint>
#include <cstring>
#include <vector>

#include "transport/cm/connection_manager.hpp"
#include "transport/cm/rdma_cm_header.hpp"

using namespace uroce;
using namespace uroce::cm;

namespace {

struct Sink final : MadSender {
  void send(const MadAddress&, const Mad& mad) override {
    // What the CM sends must itself decode.
    if (!std::holds_alternative<Decoded>(decode(mad))) __builtin_trap();
  }
};

void check_round_trip(std::span<const uint8_t> bytes) {
  auto d = decode(bytes);
  if (!std::holds_alternative<Decoded>(d)) return;
  const Decoded& m = std::get<Decoded>(d);
  const Mad once = encode(m.message, m.header.transaction_id);
  auto again = decode(once);
  if (!std::holds_alternative<Decoded>(again)) __builtin_trap();
  const Mad twice = encode(std::get<Decoded>(again).message, m.header.transaction_id);
  if (once != twice) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Sink sink;
  ConnectionManager cm(sink, CmConfig{.ca_guid = 1, .first_comm_id = 1});
  const MadAddress peer{wire::IpAddress::from_v4(0x0a000002), 1};
  const uint64_t sid = service_id_of(wire::rdma_cm_ps_tcp, 7174);
  cm.listen(sid);
  Nanos now = 1'000'000;
  // Connections in several states: REQ sent (ids 1, 2), established (3, after a REP we make up).
  Req req;
  req.service_id = sid;
  req.max_cm_retries = 2;
  req.remote_cm_response_timeout = 3;
  cm.connect(req, peer, now);
  cm.connect(req, peer, now);
  const uint32_t third = cm.connect(req, peer, now);
  Rep rep;
  rep.remote_comm_id = third;
  rep.local_comm_id = 77;
  cm.receive(peer, encode(rep, 1), now);
  cm.establish(third, now);
  uint64_t fed = 1;
  size_t i = 0;
  while (i < size) {
    const size_t n = data[i++];
    const size_t take = std::min(n, size - i);
    Mad mad{};
    std::memcpy(mad.data(), data + i, std::min(take, mad.size()));
    i += take;
    std::span<const uint8_t> bytes(mad.data(), mad.size());
    if (n % 5 == 0) {
      bytes = bytes.first(std::min<size_t>(take, mad.size()));  // a truncated MAD
    } else if (n % 3 != 0) {
      mad[0] = 1, mad[1] = 7, mad[2] = 2, mad[3] = 3;
      mad[16] = 0, mad[17] = uint8_t(0x10 + n % 9);
    }
    check_round_trip(bytes);
    cm.receive(peer, bytes, now);
    ++fed;
    for (const CmEvent& e : cm.take_events()) {
      if (e.type == CmEventType::req_received) {
        if (n & 1) cm.accept(e.comm_id, rep, now); else cm.reject(e.comm_id, 28, {}, now);
      }
    }
    now += uint64_t(n) * 1'000'000'000;  // up to minutes: timers fire, retries run out
    cm.run(now);
    cm.take_events();
  }
  if (cm.counters().rx_mads != fed) __builtin_trap();
  return 0;
}
