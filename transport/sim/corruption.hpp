// Single-bit corruption of a RoCEv2 frame.
//
// Which bits may flip matters for what a test can assert. The ICRC covers the IP packet except the fields
// that routers legitimately rewrite (IPv4 TOS/TTL/checksum, IPv6 traffic class/flow label/hop limit, UDP
// checksum, BTH byte 4 with FECN/BECN), and nothing of the Ethernet header (the port's FCS guards that on
// a real link, and the simulation has no FCS). A flip inside the protected bits is always caught by the
// receiver (ICRC mismatch, or a length/version field that no longer parses); a flip elsewhere may pass
// unnoticed, which is what a real network does too, but makes "every corruption is detected" unprovable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace uroce::sim {

enum class CorruptionScope : uint8_t {
  icrc_protected,  // only bits a receiver is guaranteed to notice (default)
  anywhere,        // any bit of the frame, Ethernet header and ICRC-masked fields included
};

// Number of bits of `frame` that `scope` allows to flip. A frame that is not Ethernet + IPv4/IPv6 (which
// the network never builds) is treated as `anywhere`.
size_t corruptible_bits(std::span<const uint8_t> frame, CorruptionScope scope);

// Flips the (draw mod corruptible_bits)-th eligible bit; returns its bit offset from the frame start
// (byte * 8 + bit, bit 0 = least significant), or nothing when no bit is eligible.
std::optional<size_t> flip_bit(std::span<uint8_t> frame, CorruptionScope scope, uint64_t draw);

}  // namespace uroce::sim
