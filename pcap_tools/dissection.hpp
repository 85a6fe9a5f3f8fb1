// A dissection: the fields of one frame as a tree, in the manner of Wireshark's field tables.
//
// Every output of `uroce dissect` (summary line, -V tree, --json) is rendered from this one tree, so a
// field shown in one output is shown with the same name and value in the others.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "pcap_tools/capture_reader.hpp"
#include "transport/wire/frame.hpp"

namespace uroce::pcap_tools {

struct Field {
  std::string key;       // JSON member name: "dest_qp"
  std::string label;     // human name: "Destination QP"
  nlohmann::ordered_json value;  // typed value: 17, true, "RC SEND_ONLY", an object for a header
  std::string display;   // value as shown in the tree: "0x000011"
  std::vector<Field> children;
};

struct Dissection {
  const Record* record = nullptr;
  const wire::Frame* frame = nullptr;
  double time = 0;               // seconds since the capture's first record
  std::optional<bool> icrc_ok;   // RoCE frames that parsed: whether the ICRC matched
  uint32_t icrc_computed = 0;
  std::vector<Field> layers;     // "frame", "eth", "arp", "ip", "udp", "bth", "reth", ..., "icrc", "error"
};

// Dissects a frame. `first_time_ns` is the timestamp of the capture's first record (times are relative).
Dissection dissect(const Record& record, const wire::Frame& frame, int64_t first_time_ns);

}  // namespace uroce::pcap_tools
