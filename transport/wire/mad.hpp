// Management datagrams (MADs) as they appear on QP1 over RoCEv2: the 24-byte common header, and the names
// of the communication-management attributes that rdma_cm exchanges.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

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

std::string_view mgmt_class_name(uint8_t mgmt_class);             // "CM", "SubnAdm", ...
std::string_view cm_attribute_name(uint16_t attribute_id);        // "REQ", "REP", ... ("" if unknown)

}  // namespace uroce::wire
