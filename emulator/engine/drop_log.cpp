#include "emulator/engine/drop_log.hpp"

#include <spdlog/spdlog.h>

namespace uroce::emulator::engine {

std::map<std::string, uint64_t> DropLog::snapshot(const net::NetCounters& net,
                                                  const transport::DeviceCounters& d) const {
  std::map<std::string, uint64_t> m;
  net::for_each_counter(net, [&](std::string_view name, uint64_t v) {
    if (name.rfind("dropped.", 0) == 0) m[std::string(name)] = v;
  });
  m["transport.malformed"] = d.rx_malformed;
  m["transport.bad_icrc"] = d.rx_bad_icrc;
  m["transport.unknown_qp"] = d.rx_unknown_qp;
  m["transport.bad_pkey"] = d.rx_bad_pkey;
  m["transport.bad_qkey"] = d.rx_bad_qkey;
  m["transport.wrong_transport"] = d.rx_wrong_transport;
  m["transport.qp_not_ready"] = d.rx_qp_not_ready;
  m["transport.no_receive"] = d.rx_no_receive;
  m["transport.multicast_no_members"] = d.rx_multicast_no_members;
  return m;
}

void DropLog::maybe_report(uint64_t now, const net::NetCounters& net, const transport::DeviceCounters& device) {
  if (!limit_.allow(now)) return;
  std::map<std::string, uint64_t> current = snapshot(net, device);
  std::string line;
  for (const auto& [name, value] : current) {
    const uint64_t delta = value - previous_[name];
    if (delta != 0) line += (line.empty() ? "" : ", ") + name + " " + std::to_string(delta);
  }
  previous_ = std::move(current);
  if (!line.empty()) spdlog::warn("dropped frames in the last {} ms: {}", limit_.interval_ns() / 1'000'000, line);
}

}  // namespace uroce::emulator::engine
