// The three renderings of a dissection: a one-line summary, the full field tree (-V), and JSON.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "pcap_tools/dissection.hpp"

namespace uroce::pcap_tools {

// "    7   0.000412  10.77.0.12 → 10.77.0.11  RC SEND_FIRST  qp 0x000011 psn 5236710 A len 1024  ICRC ok"
std::string summary_line(const Dissection& d);

// The field tree, one "Label: value" per line, indented per level (like tshark -V).
std::string field_tree(const Dissection& d);

// One JSON object with every field: {"frame": {...}, "eth": {...}, "bth": {...}, ...}.
nlohmann::ordered_json to_json(const Dissection& d);

}  // namespace uroce::pcap_tools
