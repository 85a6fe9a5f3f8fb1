// Management datagrams (MADs) as they appear on QP1 over RoCEv2: the 24-byte common header, and the names
// of the communication-management attributes that rdma_cm exchanges. The CM messages themselves are
// transport/cm/cm_messages.hpp's.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "transport/wire/address.hpp"

namespace uroce::wire {

inline constexpr unsigned mad_size = 256;
inline constexpr unsigned mad_header_size = 24;
inline constexpr uint32_t gsi_qpn = 1;               // QP1, the General Services Interface
inline constexpr uint32_t gsi_qkey = 0x80010000;     // well-known Q_Key of QP1
inline constexpr uint8_t mgmt_class_cm = 0x07;

struct MadHeader {
  uint8_t base_version = 1;
  uint8_t mgmt_class = 0;
  uint8_t class_version = 0;
  uint8_t method = 0;       // bit 7 is the response bit
  uint16_t status = 0;
  uint16_t class_specific = 0;
  uint64_t transaction_id = 0;
  uint16_t attribute_id = 0;
  uint16_t reserved = 0;
  uint32_t attribute_modifier = 0;
};

// Decodes the common header; nullopt if fewer than 24 bytes.
std::optional<MadHeader> read_mad_header(std::span<const uint8_t> payload);
void write_mad_header(uint8_t* out, const MadHeader& h);

// RDMA CM service IDs: port space << 16 | port, where the port spaces (TCP 0x0106, UDP 0x0111, IB 0x013f,
// IPoIB 0x0002) put 0x01 in bits 31:24 for all but IPoIB — e.g. 0x0000000001061c06 is rping's TCP port 7174.
// (Seen on the wire in rxe's rping capture and as RDMA_IB_IP_PS_TCP in the kernel.)
inline constexpr uint16_t rdma_cm_ps_tcp = 0x0106;
inline constexpr uint16_t rdma_cm_ps_udp = 0x0111;
inline constexpr uint16_t rdma_cm_ps_ib = 0x013f;
inline bool is_rdma_cm_service(uint64_t service_id) { return (service_id >> 32) == 0 && (service_id >> 24) == 1; }
inline uint16_t rdma_cm_port_space(uint64_t service_id) { return uint16_t(service_id >> 16); }
inline uint16_t rdma_cm_port(uint64_t service_id) { return uint16_t(service_id); }

// IB MTU code (1..5) to bytes; 0 for an invalid code.
unsigned ib_mtu_bytes(uint8_t code);

std::string_view mgmt_class_name(uint8_t mgmt_class);             // "CM", "SubnAdm", ...
std::string_view cm_attribute_name(uint16_t attribute_id);        // "REQ", "REP", ... ("" if unknown)
// A REJ's reason (IBTA table 112) in words, e.g. 8: "invalid service ID" ("" if unknown).
std::string_view cm_reject_reason_name(uint16_t reason);
// A SIDR_REP's status (IBTA 12.11) in words, e.g. 1: "service ID not supported" ("" if unknown).
std::string_view cm_sidr_status_name(uint8_t status);

}  // namespace uroce::wire
