// The rsocket protocol on the wire, as librdmacm (rdma-core's rsocket.c) speaks it, so that an rsocket
// made by uroce talks to one made by the real library on Linux rxe or a ConnectX.
//
// An rsocket is a byte stream over one RC QP. Data goes by RDMA WRITE WITH IMMEDIATE into a receive ring
// the peer advertised; the 32-bit immediate says what was written (message()). Each side also keeps a
// small "target SGL" array the peer writes into: the ring halves it may fill next (credits), and with
// riomap() the buffers it may write into directly. Nothing here does I/O: the byte layouts and the
// immediate's encoding only, so they can be checked against known bytes.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>

namespace uroce::rsocket {

inline constexpr uint8_t kVersion = 1;

// The immediate's top three bits (bit 31: control, bit 30: direct receive, bit 29: more data).
enum class Op : uint32_t {
  data = 0,       // bits 28..0: bytes written into the ring
  write = 2,      // a riowrite (plain RDMA WRITE: never on the wire as an immediate; names our own WRs)
  sgl = 4,        // the peer granted credits: bits 28..0 are its new receive sequence limit
  iomap_sgl = 6,  // the peer wrote entry (bits 15..0) of our iomap table
  ctrl = 7,       // bits 28..0: a Ctrl
};
enum class Ctrl : uint32_t { disconnect = 0, keepalive = 1, shutdown = 2 };

inline constexpr uint32_t message(Op op, uint32_t data) { return (uint32_t(op) << 29) | (data & 0x1FFFFFFF); }
inline constexpr Op op_of(uint32_t msg) { return Op(msg >> 29); }
inline constexpr uint32_t data_of(uint32_t msg) { return msg & 0x1FFFFFFF; }

// A buffer the peer may write: what target SGL and iomap entries hold. The peer writes these with RDMA in
// its own byte order; both sides agree when they are the same (ConnData::flags says so).
struct Sge {
  uint64_t addr;
  uint32_t key;
  uint32_t length;
};
static_assert(sizeof(Sge) == 16);

struct IoMap {
  uint64_t offset;  // where riowrite's offsets for this buffer begin
  Sge sge;
};
static_assert(sizeof(IoMap) == 24);

inline constexpr size_t kTargetSglEntries = 2;  // the two halves of the receive ring

enum ConnFlag : uint8_t { kConnFlagNetworkOrder = 1 << 0, kConnFlagIoMap = 1 << 1 };

// The 40 bytes each side puts in the connection's private data (REQ and REP), big-endian on the wire.
struct ConnData {
  uint8_t version = kVersion;
  uint8_t flags = 0;
  uint16_t credits = 0;            // receives the sender has posted
  uint8_t target_iomap_size = 0;   // entries of its iomap table, in scale form (to_scale)
  Sge target_sgl{};                // its target SGL array (length: entries)
  Sge data_buf{};                  // the first half of its receive ring
};
inline constexpr size_t kConnDataSize = 40;

std::array<uint8_t, kConnDataSize> encode(const ConnData& c);
// Nothing if the bytes are too short; the version is returned as found (the caller refuses others).
std::optional<ConnData> decode(const void* data, size_t length);

// Datagram rsockets (SOCK_DGRAM over UD QPs): every datagram starts with the sender's own address, so that
// the receiver can say where it came from (rrecvfrom) and answer it. librdmacm's struct ds_header: version
// (4 or 6), this header's length, the sender's port, then its IPv4 address, or its IPv6 flow information
// and address; all in network order.
inline constexpr size_t kDatagramHeaderV4 = 8;
inline constexpr size_t kDatagramHeaderV6 = 24;

struct DatagramHeader {
  uint8_t version = 4;        // 4 or 6
  uint16_t port = 0;          // host order here
  uint32_t flowinfo = 0;      // IPv6 only, as on the wire
  std::array<uint8_t, 16> address{};  // IPv4 in the first four bytes
  size_t size() const { return version == 6 ? kDatagramHeaderV6 : kDatagramHeaderV4; }
};

// Writes the header (size() bytes) at `out`.
void encode(const DatagramHeader& h, uint8_t* out);
// Nothing unless the bytes hold a whole header of version 4 (length 8) or 6 (length 24).
std::optional<DatagramHeader> decode_datagram_header(const void* data, size_t length);

// Sizes up to 2^(bits-1) as they are; above, the top bit set and the value shifted down by `bits`
// (librdmacm's rs_value_to_scale, for the iomap size in one byte).
uint32_t to_scale(uint32_t value, int bits);
uint32_t from_scale(uint32_t scaled, int bits);

}  // namespace uroce::rsocket
