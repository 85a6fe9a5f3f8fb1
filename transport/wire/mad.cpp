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

unsigned ib_mtu_bytes(uint8_t code) { return code >= 1 && code <= 5 ? 128u << code : 0; }

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

std::string_view cm_reject_reason_name(uint16_t reason) {
  switch (reason) {
    case 1: return "no QP available";
    case 2: return "no EEC available";
    case 3: return "no resources available";
    case 4: return "timeout";
    case 5: return "unsupported request";
    case 6: return "invalid communication ID";
    case 7: return "invalid communication instance";
    case 8: return "invalid service ID";  // nobody listens on that service (rdma_cm port) yet
    case 9: return "invalid transport service type";
    case 10: return "stale connection";
    case 11: return "RDC does not exist";
    case 12: return "invalid GID";
    case 13: return "invalid LID";
    case 14: return "invalid SL";
    case 15: return "invalid traffic class";
    case 16: return "invalid hop limit";
    case 17: return "invalid packet rate";
    case 18: return "invalid alternate GID";
    case 19: return "invalid alternate LID";
    case 20: return "invalid alternate SL";
    case 21: return "invalid alternate traffic class";
    case 22: return "invalid alternate hop limit";
    case 23: return "invalid alternate packet rate";
    case 24: return "port CM redirection";
    case 25: return "port redirection";
    case 26: return "invalid path MTU";
    case 27: return "insufficient responder resources";
    case 28: return "consumer reject";
    case 29: return "invalid RNR NAK retry count";
    case 30: return "duplicate local communication ID";
    case 31: return "unsupported class version";
    case 32: return "invalid primary flow label";
    case 33: return "invalid alternate flow label";
    default: return "";
  }
}

std::string_view cm_sidr_status_name(uint8_t status) {
  switch (status) {
    case 0: return "valid";
    case 1: return "service ID not supported";  // nobody listens on that service (rdma_cm port)
    case 2: return "rejected";                  // by the service provider (the application, or no rdma_cm ID)
    case 3: return "no QP available";
    case 4: return "redirect";                  // to the ClassPortInfo in the additional information
    case 5: return "unsupported class version";
    default: return "";
  }
}

}  // namespace uroce::wire
