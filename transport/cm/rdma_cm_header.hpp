// What rdma_cm adds on top of the IB CM for IP addressing: the service ID made of a port space and a port,
// and the 36-byte header it puts at the front of a REQ's private data (Linux: struct cma_hdr), which
// tells the listener the connecting side's IP address and port and the address it was trying to reach.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "transport/wire/address.hpp"
#include "transport/wire/mad.hpp"

namespace uroce::cm {

// The service ID of an rdma_cm port: the port space (rdma_cma.h's enum rdma_port_space: TCP 0x0106, UDP
// 0x0111, IB 0x013f; wire/mad.hpp names them) shifted by 16, plus the port, as Linux's cma_get_service_id.
inline constexpr uint64_t service_id_of(uint16_t port_space, uint16_t port) {
  return uint64_t(port_space) << 16 | port;
}

inline constexpr size_t ip_header_size = 36;
inline constexpr uint8_t ip_header_version = 0x00;  // CMA_VERSION

struct IpHeader {
  uint16_t source_port = 0;      // the connecting side's port (what rdma_get_dst_port shows the listener)
  wire::IpAddress source;
  wire::IpAddress destination;
};

// Reads the header at the front of a REQ's private data; nullopt if too short, of another version, or
// of an IP version other than 4 and 6.
std::optional<IpHeader> read_ip_header(std::span<const uint8_t> private_data);
// Writes it into out[0..36).
void write_ip_header(uint8_t* out, const IpHeader& h);

}  // namespace uroce::cm
