#include "emulator/protocol/flow_json.hpp"

#include <stdexcept>
#include <string>

#include "emulator/protocol/json_numbers.hpp"

namespace uroce::transport::flow {

namespace {

using emulator::protocol::read_number;
using nlohmann::json;

template <size_t N>
json bytes_json(const std::array<uint8_t, N>& a) {
  return json(std::vector<uint8_t>(a.begin(), a.end()));
}

template <size_t N>
void read_bytes(const json& j, const char* key, std::array<uint8_t, N>& out) {
  const auto it = j.find(key);
  if (it == j.end()) return;
  // Each element checked: nlohmann would turn 256 into a byte of 0.
  if (!it->is_array() || it->size() != N) {
    throw std::invalid_argument(std::string(key) + ": " + std::to_string(N) + " bytes expected");
  }
  for (size_t i = 0; i < N; ++i) {
    const json& b = (*it)[i];
    if (!b.is_number_unsigned() || b.get<uint64_t>() > 0xff) throw std::invalid_argument(std::string(key) + ": not a byte");
    out[i] = uint8_t(b.get<uint64_t>());
  }
}

// A field and its mask.
template <class T>
void read_masked(const json& j, const std::string& key, T& value, T& mask) {
  read_number(j, key, value);
  read_number(j, key + "_mask", mask);
}

json spec_json(const Spec& s) {
  switch (s.kind) {
    case Spec::Kind::eth:
      return {{"type", "eth"},
              {"dst_mac", bytes_json(s.eth.dst.bytes)},       {"dst_mac_mask", bytes_json(s.eth.dst_mask.bytes)},
              {"src_mac", bytes_json(s.eth.src.bytes)},       {"src_mac_mask", bytes_json(s.eth.src_mask.bytes)},
              {"ether_type", s.eth.ether_type},               {"ether_type_mask", s.eth.ether_type_mask},
              {"vlan_tag", s.eth.vlan_tag},                   {"vlan_tag_mask", s.eth.vlan_tag_mask}};
    case Spec::Kind::ipv4:
      return {{"type", "ipv4"},
              {"src_ip", s.ipv4.src},     {"src_ip_mask", s.ipv4.src_mask},
              {"dst_ip", s.ipv4.dst},     {"dst_ip_mask", s.ipv4.dst_mask},
              {"proto", s.ipv4.proto},    {"proto_mask", s.ipv4.proto_mask},
              {"tos", s.ipv4.tos},        {"tos_mask", s.ipv4.tos_mask},
              {"ttl", s.ipv4.ttl},        {"ttl_mask", s.ipv4.ttl_mask},
              {"flags", s.ipv4.flags},    {"flags_mask", s.ipv4.flags_mask}};
    case Spec::Kind::ipv6:
      return {{"type", "ipv6"},
              {"src_ip", bytes_json(s.ipv6.src)},             {"src_ip_mask", bytes_json(s.ipv6.src_mask)},
              {"dst_ip", bytes_json(s.ipv6.dst)},             {"dst_ip_mask", bytes_json(s.ipv6.dst_mask)},
              {"flow_label", s.ipv6.flow_label},              {"flow_label_mask", s.ipv6.flow_label_mask},
              {"next_hdr", s.ipv6.next_hdr},                  {"next_hdr_mask", s.ipv6.next_hdr_mask},
              {"traffic_class", s.ipv6.traffic_class},        {"traffic_class_mask", s.ipv6.traffic_class_mask},
              {"hop_limit", s.ipv6.hop_limit},                {"hop_limit_mask", s.ipv6.hop_limit_mask}};
    case Spec::Kind::l4:
      return {{"type", s.l4.protocol == 6 ? "tcp" : "udp"},
              {"dst_port", s.l4.dst_port}, {"dst_port_mask", s.l4.dst_port_mask},
              {"src_port", s.l4.src_port}, {"src_port_mask", s.l4.src_port_mask}};
  }
  return {};
}

Spec spec_from(const json& j) {
  Spec s;
  const std::string type = j.at("type").get<std::string>();
  if (type == "eth") {
    s.kind = Spec::Kind::eth;
    read_bytes(j, "dst_mac", s.eth.dst.bytes);
    read_bytes(j, "dst_mac_mask", s.eth.dst_mask.bytes);
    read_bytes(j, "src_mac", s.eth.src.bytes);
    read_bytes(j, "src_mac_mask", s.eth.src_mask.bytes);
    read_masked(j, "ether_type", s.eth.ether_type, s.eth.ether_type_mask);
    read_masked(j, "vlan_tag", s.eth.vlan_tag, s.eth.vlan_tag_mask);
  } else if (type == "ipv4") {
    s.kind = Spec::Kind::ipv4;
    read_masked(j, "src_ip", s.ipv4.src, s.ipv4.src_mask);
    read_masked(j, "dst_ip", s.ipv4.dst, s.ipv4.dst_mask);
    read_masked(j, "proto", s.ipv4.proto, s.ipv4.proto_mask);
    read_masked(j, "tos", s.ipv4.tos, s.ipv4.tos_mask);
    read_masked(j, "ttl", s.ipv4.ttl, s.ipv4.ttl_mask);
    read_masked(j, "flags", s.ipv4.flags, s.ipv4.flags_mask);
  } else if (type == "ipv6") {
    s.kind = Spec::Kind::ipv6;
    read_bytes(j, "src_ip", s.ipv6.src);
    read_bytes(j, "src_ip_mask", s.ipv6.src_mask);
    read_bytes(j, "dst_ip", s.ipv6.dst);
    read_bytes(j, "dst_ip_mask", s.ipv6.dst_mask);
    read_masked(j, "flow_label", s.ipv6.flow_label, s.ipv6.flow_label_mask);
    read_masked(j, "next_hdr", s.ipv6.next_hdr, s.ipv6.next_hdr_mask);
    read_masked(j, "traffic_class", s.ipv6.traffic_class, s.ipv6.traffic_class_mask);
    read_masked(j, "hop_limit", s.ipv6.hop_limit, s.ipv6.hop_limit_mask);
  } else if (type == "tcp" || type == "udp") {
    s.kind = Spec::Kind::l4;
    s.l4.protocol = type == "tcp" ? 6 : 17;
    read_masked(j, "dst_port", s.l4.dst_port, s.l4.dst_port_mask);
    read_masked(j, "src_port", s.l4.src_port, s.l4.src_port_mask);
  } else {
    throw std::invalid_argument("unknown flow spec type " + type);
  }
  return s;
}

}  // namespace

void to_json(json& j, const FlowRule& rule) {
  json specs = json::array();
  for (const Spec& s : rule.specs) specs.push_back(spec_json(s));
  if (rule.drop) specs.push_back({{"type", "drop"}});
  j = {{"type", uint32_t(rule.type)}, {"priority", rule.priority}, {"flags", rule.flags}, {"specs", specs}};
}

void from_json(const json& j, FlowRule& rule) {
  const uint32_t type = j.at("type").get<uint32_t>();
  if (type > uint32_t(AttrType::sniffer)) throw std::invalid_argument("unknown flow attribute type");
  rule.type = AttrType(type);
  rule.priority = 0;
  rule.flags = 0;
  read_number(j, "priority", rule.priority);
  read_number(j, "flags", rule.flags);
  rule.specs.clear();
  rule.drop = false;
  const json specs = j.value("specs", json::array());
  if (!specs.is_array()) throw std::invalid_argument("specs: an array expected");
  for (const json& s : specs) {
    if (s.at("type") == "drop") {
      rule.drop = true;
    } else {
      rule.specs.push_back(spec_from(s));
    }
  }
}

}  // namespace uroce::transport::flow
