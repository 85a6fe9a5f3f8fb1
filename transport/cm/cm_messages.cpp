// Field layouts from IBTA vol. 1 section 12.6 (REQ table 99, REP table 103, ...) and 12.11 (SIDR_REQ and
// SIDR_REP); byte offsets below count from the start of the MAD, its 24-byte common header included (a
// REQ's two 44-byte paths put its private data at 164). Checked against rxe's rping capture
// (tests/unit/cm/test_cm_messages.cpp decodes its fields and re-encodes it byte for byte); SIDR, which no
// capture of ours holds, against Linux's table of the fields (include/rdma/ibta_vol1_c12.h).
#include "transport/cm/cm_messages.hpp"

#include <cstring>
#include <iterator>

#include "transport/wire/bytes.hpp"

namespace uroce::cm {

using namespace uroce::wire;

namespace {

template <size_t N>
void read_bytes(const uint8_t* p, std::array<uint8_t, N>& out) {
  std::memcpy(out.data(), p, N);
}
template <size_t N>
void write_bytes(uint8_t* p, const std::array<uint8_t, N>& in) {
  std::memcpy(p, in.data(), N);
}

void read_path(const uint8_t* p, CmPath& path) {
  path.local_lid = load_be16(p);
  path.remote_lid = load_be16(p + 2);
  path.local_gid = IpAddress::from_v6_bytes(p + 4);
  path.remote_gid = IpAddress::from_v6_bytes(p + 20);
  const uint32_t w = load_be32(p + 36);
  path.flow_label = w >> 12;
  path.packet_rate = uint8_t(w & 0x3f);
  path.traffic_class = p[40];
  path.hop_limit = p[41];
  path.sl = p[42] >> 4;
  path.subnet_local = (p[42] & 0x08) != 0;
  path.local_ack_timeout = p[43] >> 3;
}

void write_path(uint8_t* p, const CmPath& path) {
  store_be16(p, path.local_lid);
  store_be16(p + 2, path.remote_lid);
  std::memcpy(p + 4, path.local_gid.bytes.data(), 16);
  std::memcpy(p + 20, path.remote_gid.bytes.data(), 16);
  store_be32(p + 36, (path.flow_label & 0xfffff) << 12 | (path.packet_rate & 0x3f));
  p[40] = path.traffic_class;
  p[41] = path.hop_limit;
  p[42] = uint8_t((path.sl & 0xf) << 4 | (path.subnet_local ? 0x08 : 0));
  p[43] = uint8_t((path.local_ack_timeout & 0x1f) << 3);
}

Req read_req(const uint8_t* p) {
  Req r;
  r.local_comm_id = load_be32(p + 24);
  r.service_id = load_be64(p + 32);
  r.local_ca_guid = load_be64(p + 40);
  r.local_qkey = load_be32(p + 52);
  r.local_qpn = load_be24(p + 56);
  r.responder_resources = p[59];
  r.local_eecn = load_be24(p + 60);
  r.initiator_depth = p[63];
  r.remote_eecn = load_be24(p + 64);
  r.remote_cm_response_timeout = p[67] >> 3;
  r.service_type = ServiceType((p[67] >> 1) & 3);
  r.end_to_end_flow_control = (p[67] & 1) != 0;
  r.starting_psn = load_be24(p + 68);
  r.local_cm_response_timeout = p[71] >> 3;
  r.retry_count = p[71] & 7;
  r.pkey = load_be16(p + 72);
  r.path_mtu = p[74] >> 4;
  r.rdc_exists = (p[74] & 0x08) != 0;
  r.rnr_retry_count = p[74] & 7;
  r.max_cm_retries = p[75] >> 4;
  r.srq = (p[75] & 0x08) != 0;
  r.extended_transport = p[75] & 7;
  read_path(p + 76, r.primary);
  read_path(p + 120, r.alternate);
  read_bytes(p + 164, r.private_data);
  return r;
}

void write_req(uint8_t* p, const Req& r) {
  store_be32(p + 24, r.local_comm_id);
  store_be64(p + 32, r.service_id);
  store_be64(p + 40, r.local_ca_guid);
  store_be32(p + 52, r.local_qkey);
  store_be24(p + 56, r.local_qpn);
  p[59] = r.responder_resources;
  store_be24(p + 60, r.local_eecn);
  p[63] = r.initiator_depth;
  store_be24(p + 64, r.remote_eecn);
  p[67] = uint8_t((r.remote_cm_response_timeout & 0x1f) << 3 | (uint8_t(r.service_type) & 3) << 1 |
                  (r.end_to_end_flow_control ? 1 : 0));
  store_be24(p + 68, r.starting_psn);
  p[71] = uint8_t((r.local_cm_response_timeout & 0x1f) << 3 | (r.retry_count & 7));
  store_be16(p + 72, r.pkey);
  p[74] = uint8_t((r.path_mtu & 0xf) << 4 | (r.rdc_exists ? 0x08 : 0) | (r.rnr_retry_count & 7));
  p[75] = uint8_t((r.max_cm_retries & 0xf) << 4 | (r.srq ? 0x08 : 0) | (r.extended_transport & 7));
  write_path(p + 76, r.primary);
  write_path(p + 120, r.alternate);
  write_bytes(p + 164, r.private_data);
}

Rep read_rep(const uint8_t* p) {
  Rep r;
  r.local_comm_id = load_be32(p + 24);
  r.remote_comm_id = load_be32(p + 28);
  r.local_qkey = load_be32(p + 32);
  r.local_qpn = load_be24(p + 36);
  r.local_eecn = load_be24(p + 40);
  r.starting_psn = load_be24(p + 44);
  r.responder_resources = p[48];
  r.initiator_depth = p[49];
  r.target_ack_delay = p[50] >> 3;
  r.failover_accepted = (p[50] >> 1) & 3;
  r.end_to_end_flow_control = (p[50] & 1) != 0;
  r.rnr_retry_count = p[51] >> 5;
  r.srq = (p[51] & 0x10) != 0;
  r.local_ca_guid = load_be64(p + 52);
  read_bytes(p + 60, r.private_data);
  return r;
}

void write_rep(uint8_t* p, const Rep& r) {
  store_be32(p + 24, r.local_comm_id);
  store_be32(p + 28, r.remote_comm_id);
  store_be32(p + 32, r.local_qkey);
  store_be24(p + 36, r.local_qpn);
  store_be24(p + 40, r.local_eecn);
  store_be24(p + 44, r.starting_psn);
  p[48] = r.responder_resources;
  p[49] = r.initiator_depth;
  p[50] = uint8_t((r.target_ack_delay & 0x1f) << 3 | (r.failover_accepted & 3) << 1 |
                  (r.end_to_end_flow_control ? 1 : 0));
  p[51] = uint8_t((r.rnr_retry_count & 7) << 5 | (r.srq ? 0x10 : 0));
  store_be64(p + 52, r.local_ca_guid);
  write_bytes(p + 60, r.private_data);
}

SidrReq read_sidr_req(const uint8_t* p) {
  SidrReq r;
  r.request_id = load_be32(p + 24);
  r.pkey = load_be16(p + 28);
  r.service_id = load_be64(p + 32);  // 30..31 reserved
  read_bytes(p + 40, r.private_data);
  return r;
}

void write_sidr_req(uint8_t* p, const SidrReq& r) {
  store_be32(p + 24, r.request_id);
  store_be16(p + 28, r.pkey);
  store_be64(p + 32, r.service_id);
  write_bytes(p + 40, r.private_data);
}

SidrRep read_sidr_rep(const uint8_t* p) {
  SidrRep r;
  r.request_id = load_be32(p + 24);
  r.status = SidrStatus(p[28]);  // kept as it came, even a status IBTA does not define
  r.additional_info_length = p[29];
  r.qpn = load_be24(p + 32);     // 30..31 and 35 reserved
  r.service_id = load_be64(p + 36);
  r.qkey = load_be32(p + 44);
  read_bytes(p + 48, r.additional_info);
  read_bytes(p + 120, r.private_data);
  return r;
}

void write_sidr_rep(uint8_t* p, const SidrRep& r) {
  store_be32(p + 24, r.request_id);
  p[28] = uint8_t(r.status);
  p[29] = r.additional_info_length;
  store_be24(p + 32, r.qpn);
  store_be64(p + 36, r.service_id);
  store_be32(p + 44, r.qkey);
  write_bytes(p + 48, r.additional_info);
  write_bytes(p + 120, r.private_data);
}

// REJ, MRA, RTU, DREQ and DREP all begin with the two communication IDs.
void read_ids(const uint8_t* p, uint32_t& local, uint32_t& remote) {
  local = load_be32(p + 24);
  remote = load_be32(p + 28);
}
void write_ids(uint8_t* p, uint32_t local, uint32_t remote) {
  store_be32(p + 24, local);
  store_be32(p + 28, remote);
}

struct Encoder {
  uint8_t* p;
  void operator()(const Req& m) { write_req(p, m); }
  void operator()(const Rep& m) { write_rep(p, m); }
  void operator()(const SidrReq& m) { write_sidr_req(p, m); }
  void operator()(const SidrRep& m) { write_sidr_rep(p, m); }
  void operator()(const Rej& m) {
    write_ids(p, m.local_comm_id, m.remote_comm_id);
    p[32] = uint8_t(uint8_t(m.message_rejected) << 6);
    p[33] = uint8_t((m.reject_info_length & 0x7f) << 1);
    store_be16(p + 34, m.reason);
    write_bytes(p + 36, m.ari);
    write_bytes(p + 108, m.private_data);
  }
  void operator()(const Mra& m) {
    write_ids(p, m.local_comm_id, m.remote_comm_id);
    p[32] = uint8_t(uint8_t(m.message_mraed) << 6);
    p[33] = uint8_t((m.service_timeout & 0x1f) << 3);
    write_bytes(p + 36, m.private_data);
  }
  void operator()(const Rtu& m) {
    write_ids(p, m.local_comm_id, m.remote_comm_id);
    write_bytes(p + 32, m.private_data);
  }
  void operator()(const Dreq& m) {
    write_ids(p, m.local_comm_id, m.remote_comm_id);
    store_be24(p + 32, m.remote_qpn);
    write_bytes(p + 36, m.private_data);
  }
  void operator()(const Drep& m) {
    write_ids(p, m.local_comm_id, m.remote_comm_id);
    write_bytes(p + 32, m.private_data);
  }
};

}  // namespace

std::string_view to_string(DecodeError e) {
  switch (e) {
    case DecodeError::truncated: return "truncated";
    case DecodeError::bad_base_version: return "bad base version";
    case DecodeError::not_cm_class: return "not the CM class";
    case DecodeError::bad_class_version: return "bad class version";
    case DecodeError::bad_method: return "bad method";
    case DecodeError::unknown_attribute: return "unknown attribute";
  }
  return "?";
}

CmAttribute attribute_of(const CmMessage& message) {
  static constexpr CmAttribute by_index[] = {CmAttribute::req,  CmAttribute::mra,      CmAttribute::rej,
                                             CmAttribute::rep,  CmAttribute::rtu,      CmAttribute::dreq,
                                             CmAttribute::drep, CmAttribute::sidr_req, CmAttribute::sidr_rep};
  static_assert(std::size(by_index) == std::variant_size_v<CmMessage>, "an attribute for every message");
  return by_index[message.index()];
}

std::variant<Decoded, DecodeError> decode(std::span<const uint8_t> mad) {
  if (mad.size() < wire::mad_size) return DecodeError::truncated;
  const std::optional<MadHeader> h = read_mad_header(mad);
  if (!h || h->base_version != 1) return DecodeError::bad_base_version;
  if (h->mgmt_class != mgmt_class_cm) return DecodeError::not_cm_class;
  if (h->class_version != cm_class_version) return DecodeError::bad_class_version;
  if (h->method != mad_method_send) return DecodeError::bad_method;
  const uint8_t* p = mad.data();
  Decoded d{*h, Req{}};
  switch (CmAttribute(h->attribute_id)) {
    case CmAttribute::req: d.message = read_req(p); break;
    case CmAttribute::rep: d.message = read_rep(p); break;
    case CmAttribute::sidr_req: d.message = read_sidr_req(p); break;
    case CmAttribute::sidr_rep: d.message = read_sidr_rep(p); break;
    case CmAttribute::rej: {
      Rej m;
      read_ids(p, m.local_comm_id, m.remote_comm_id);
      m.message_rejected = MessageRef(p[32] >> 6);
      m.reject_info_length = p[33] >> 1;
      m.reason = load_be16(p + 34);
      read_bytes(p + 36, m.ari);
      read_bytes(p + 108, m.private_data);
      d.message = m;
      break;
    }
    case CmAttribute::mra: {
      Mra m;
      read_ids(p, m.local_comm_id, m.remote_comm_id);
      m.message_mraed = MessageRef(p[32] >> 6);
      m.service_timeout = p[33] >> 3;
      read_bytes(p + 36, m.private_data);
      d.message = m;
      break;
    }
    case CmAttribute::rtu: {
      Rtu m;
      read_ids(p, m.local_comm_id, m.remote_comm_id);
      read_bytes(p + 32, m.private_data);
      d.message = m;
      break;
    }
    case CmAttribute::dreq: {
      Dreq m;
      read_ids(p, m.local_comm_id, m.remote_comm_id);
      m.remote_qpn = load_be24(p + 32);
      read_bytes(p + 36, m.private_data);
      d.message = m;
      break;
    }
    case CmAttribute::drep: {
      Drep m;
      read_ids(p, m.local_comm_id, m.remote_comm_id);
      read_bytes(p + 32, m.private_data);
      d.message = m;
      break;
    }
    default: return DecodeError::unknown_attribute;
  }
  return d;
}

Mad encode(const CmMessage& message, uint64_t transaction_id) {
  Mad mad{};
  MadHeader h;
  h.base_version = 1;
  h.mgmt_class = mgmt_class_cm;
  h.class_version = cm_class_version;
  h.method = mad_method_send;
  h.transaction_id = transaction_id;
  h.attribute_id = uint16_t(attribute_of(message));
  write_mad_header(mad.data(), h);
  std::visit(Encoder{mad.data()}, message);
  return mad;
}

}  // namespace uroce::cm
