// The communication-management messages (IBTA vol. 1 chapter 12.6) as they travel in a 256-byte MAD on
// QP1: REQ, MRA, REJ, REP, RTU, DREQ, DREP, and SIDR_REQ/SIDR_REP (12.11). Every field the specification
// defines is kept, so that a message decoded and encoded again is byte-identical (tests replay rxe's rping
// capture this way), and a peer such as Linux's ib_cm sees exactly what it expects.
//
// decode() is total: any byte string gives either a message or a reason, never an out-of-bounds read.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <variant>
#include <vector>

#include "transport/wire/address.hpp"
#include "transport/wire/mad.hpp"

namespace uroce::cm {

using Mad = std::array<uint8_t, wire::mad_size>;

inline constexpr uint8_t cm_class_version = 2;  // what Linux's ib_cm speaks (IB_CM_CLASS_VERSION)
inline constexpr uint8_t mad_method_send = 0x03;

enum class CmAttribute : uint16_t {
  req = 0x0010, mra = 0x0011, rej = 0x0012, rep = 0x0013, rtu = 0x0014, dreq = 0x0015, drep = 0x0016,
  sidr_req = 0x0017, sidr_rep = 0x0018,
};

// Private data room of each message (what is left of the 256 bytes).
inline constexpr size_t req_private_size = 92;
inline constexpr size_t rep_private_size = 196;
inline constexpr size_t rej_private_size = 148;
inline constexpr size_t rej_ari_size = 72;
inline constexpr size_t rtu_private_size = 224;
inline constexpr size_t dreq_private_size = 220;
inline constexpr size_t drep_private_size = 224;
inline constexpr size_t mra_private_size = 220;
inline constexpr size_t sidr_req_private_size = 216;
inline constexpr size_t sidr_rep_private_size = 136;
inline constexpr size_t sidr_rep_info_size = 72;  // ClassPortInfo, for a redirect

// Transport service types of REQ (and the QP types a connection joins). 3 is "extended": the REQ's
// extended transport type says which, and 1 there is XRC (an XRC initiator connecting to a target), as
// Linux's CM writes it (cm_req_set_qp_type).
enum class ServiceType : uint8_t { rc = 0, uc = 1, rd = 2, extended = 3 };
inline constexpr uint8_t extended_transport_xrc = 1;
inline bool is_xrc(ServiceType type, uint8_t extended_transport) {
  return type == ServiceType::extended && extended_transport == extended_transport_xrc;
}

struct CmPath {  // one path of a REQ (primary or alternate); RoCE uses the primary only
  uint16_t local_lid = 0xffff;   // permissive on RoCE
  uint16_t remote_lid = 0xffff;
  wire::IpAddress local_gid;
  wire::IpAddress remote_gid;
  uint32_t flow_label = 0;       // 20 bits
  uint8_t packet_rate = 0;       // 6 bits
  uint8_t traffic_class = 0;
  uint8_t hop_limit = 64;
  uint8_t sl = 0;                // 4 bits
  bool subnet_local = false;
  uint8_t local_ack_timeout = 0; // 5 bits: 4.096 us * 2^x
};

// The alternate path of a REQ that has none: every field zero. (Interop, found by scripts/interop.sh: a
// default CmPath has the permissive LIDs 0xffff, and Linux's CM takes a non-zero alternate local LID for
// an alternate path, fails to resolve it and REJects the REQ with reason 18, invalid alternate GID.)
inline CmPath no_alternate_path() {
  CmPath none;
  none.local_lid = none.remote_lid = 0;
  none.hop_limit = 0;
  return none;
}

struct Req {
  uint32_t local_comm_id = 0;
  uint64_t service_id = 0;
  uint64_t local_ca_guid = 0;    // network order as a number (the GUID's bytes, big-endian)
  uint32_t local_qkey = 0;
  uint32_t local_qpn = 0;
  uint8_t responder_resources = 0;
  uint32_t local_eecn = 0;
  uint8_t initiator_depth = 0;
  uint32_t remote_eecn = 0;
  uint8_t remote_cm_response_timeout = 0;  // 5 bits
  ServiceType service_type = ServiceType::rc;
  bool end_to_end_flow_control = false;
  uint32_t starting_psn = 0;
  uint8_t local_cm_response_timeout = 0;   // 5 bits
  uint8_t retry_count = 0;                 // 3 bits
  uint16_t pkey = 0xffff;
  uint8_t path_mtu = 0;                    // IB MTU code 1..5
  bool rdc_exists = false;
  uint8_t rnr_retry_count = 0;             // 3 bits
  uint8_t max_cm_retries = 0;              // 4 bits
  bool srq = false;
  uint8_t extended_transport = 0;          // 3 bits
  CmPath primary;
  CmPath alternate = no_alternate_path();  // all zero when there is none
  std::array<uint8_t, req_private_size> private_data{};
};

struct Rep {
  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  uint32_t local_qkey = 0;
  uint32_t local_qpn = 0;
  uint32_t local_eecn = 0;
  uint32_t starting_psn = 0;
  uint8_t responder_resources = 0;
  uint8_t initiator_depth = 0;
  uint8_t target_ack_delay = 0;     // 5 bits
  uint8_t failover_accepted = 0;    // 2 bits
  bool end_to_end_flow_control = false;
  uint8_t rnr_retry_count = 0;      // 3 bits
  bool srq = false;
  uint64_t local_ca_guid = 0;
  std::array<uint8_t, rep_private_size> private_data{};
};

// Which message a REJ or an MRA is about.
enum class MessageRef : uint8_t { req = 0, rep = 1, other = 2 };

// REJ reasons (IBTA table 112) that this CM sends or acts on.
enum class RejectReason : uint16_t {
  no_qp = 1, no_eec = 2, no_resources = 3, timeout = 4, unsupported_req = 5, invalid_comm_id = 6,
  invalid_comm_instance = 7, invalid_service_id = 8, invalid_transport_type = 9, stale_conn = 10,
  rdc_not_exist = 11, invalid_gid = 12, invalid_lid = 13, invalid_sl = 14, invalid_traffic_class = 15,
  invalid_hop_limit = 16, invalid_packet_rate = 17, invalid_alt_gid = 18, port_cm_redirect = 24,
  invalid_mtu = 26, insufficient_resp_resources = 27, consumer_defined = 28, invalid_rnr_retry = 29,
};

struct Rej {
  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  MessageRef message_rejected = MessageRef::req;
  uint8_t reject_info_length = 0;   // 7 bits
  uint16_t reason = 0;
  std::array<uint8_t, rej_ari_size> ari{};
  std::array<uint8_t, rej_private_size> private_data{};
};

struct Mra {
  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  MessageRef message_mraed = MessageRef::req;
  uint8_t service_timeout = 0;      // 5 bits: 4.096 us * 2^x
  std::array<uint8_t, mra_private_size> private_data{};
};

struct Rtu {
  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  std::array<uint8_t, rtu_private_size> private_data{};
};

struct Dreq {
  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  uint32_t remote_qpn = 0;          // 24 bits: the receiver's QP (or EEC)
  std::array<uint8_t, dreq_private_size> private_data{};
};

struct Drep {
  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  std::array<uint8_t, drep_private_size> private_data{};
};

// Service ID Resolution (IBTA 12.11): how a UD QP learns a service's QPN and Q_Key (rdma_cm's RDMA_PS_UDP).
// A SIDR_REQ is answered by one SIDR_REP; there is no connection.
struct SidrReq {
  uint32_t request_id = 0;
  uint16_t pkey = 0xffff;
  uint64_t service_id = 0;
  std::array<uint8_t, sidr_req_private_size> private_data{};
};
// SIDR_REP status (IBTA table 119).
enum class SidrStatus : uint8_t {
  valid = 0, service_id_not_supported = 1, rejected = 2, no_qp = 3, redirect = 4, unsupported_version = 5,
};
struct SidrRep {
  uint32_t request_id = 0;
  SidrStatus status = SidrStatus::valid;
  uint8_t additional_info_length = 0;
  uint32_t qpn = 0;                 // 24 bits
  uint64_t service_id = 0;
  uint32_t qkey = 0;
  std::array<uint8_t, sidr_rep_info_size> additional_info{};
  std::array<uint8_t, sidr_rep_private_size> private_data{};
};
using CmMessage = std::variant<Req, Mra, Rej, Rep, Rtu, Dreq, Drep, SidrReq, SidrRep>;

// Why a MAD was not a CM message we understand (each is a counter of the connection manager).
enum class DecodeError : uint8_t {
  truncated,        // shorter than 256 bytes
  bad_base_version, // not MAD base version 1
  not_cm_class,     // another management class
  bad_class_version,
  bad_method,       // not Send (CM messages are all sent with method Send)
  unknown_attribute,
};
std::string_view to_string(DecodeError e);

struct Decoded {
  wire::MadHeader header;
  CmMessage message;
};

// Decodes one MAD; the error when it is not a well-formed CM message.
std::variant<Decoded, DecodeError> decode(std::span<const uint8_t> mad);

// Encodes `message` with its MAD header (class CM, version 2, method Send, the attribute of the message,
// `transaction_id`). Every byte of the result is written: reserved fields are zero.
Mad encode(const CmMessage& message, uint64_t transaction_id);

CmAttribute attribute_of(const CmMessage& message);

// Copies at most `room` bytes of `data` into the front of `out` (zero-filled); false if data was longer.
template <size_t N>
bool set_private_data(std::array<uint8_t, N>& out, std::span<const uint8_t> data) {
  out.fill(0);
  if (data.size() > N) return false;
  std::copy(data.begin(), data.end(), out.begin());
  return true;
}

// 4.096 us * 2^code, the unit of every CM and ACK timeout, in nanoseconds (codes above 31 are clamped).
inline uint64_t timeout_code_ns(uint8_t code) { return 4096ull << (code > 31 ? 31 : code); }

}  // namespace uroce::cm
