#include "transport/wire/mad.hpp"

#include "transport/wire/bytes.hpp"

namespace uroce::wire {

std::optional<MadHeader> read_mad_header(std::span<const uint8_t> payload) {
  if (payload.size() < mad_header_size) return std::nullopt;
  const uint8_t* p = payload.data();
  MadHeader h;
  h.base_version = p[0];
  h.mgmt_class = p[1];
  h.class_version = p[2];
  h.method = p[3];
  h.status = load_be16(p + 4);
  h.class_specific = load_be16(p + 6);
  h.transaction_id = load_be64(p + 8);
  h.attribute_id = load_be16(p + 16);
  h.reserved = load_be16(p + 18);
  h.attribute_modifier = load_be32(p + 20);
  return h;
}

void write_mad_header(uint8_t* out, const MadHeader& h) {
  out[0] = h.base_version;
  out[1] = h.mgmt_class;
  out[2] = h.class_version;
  out[3] = h.method;
  store_be16(out + 4, h.status);
  store_be16(out + 6, h.class_specific);
  store_be64(out + 8, h.transaction_id);
  store_be16(out + 16, h.attribute_id);
  store_be16(out + 18, h.reserved);
  store_be32(out + 20, h.attribute_modifier);
}

std::string_view mgmt_class_name(uint8_t c) {
  switch (c) {
    case 0x01: return "SubnMgt";
    case 0x03: return "SubnAdm";
    case 0x04: return "Perf";
    case 0x05: return "BM";
    case 0x06: return "DevMgt";
    case 0x07: return "CM";
    case 0x08: return "SNMP";
    case 0x81: return "SubnMgtDirectedRoute";
    default: return "";
  }
}

std::string_view cm_attribute_name(uint16_t a) {
  switch (a) {
    case 0x0010: return "REQ";
    case 0x0011: return "MRA";
    case 0x0012: return "REJ";
    case 0x0013: return "REP";
    case 0x0014: return "RTU";
    case 0x0015: return "DREQ";
    case 0x0016: return "DREP";
    case 0x0017: return "SIDR_REQ";
    case 0x0018: return "SIDR_REP";
    case 0x0019: return "LAP";
    case 0x001a: return "APR";
    case 0x0020: return "ClassPortInfo";
    default: return "";
  }
}

}  // namespace uroce::wire
