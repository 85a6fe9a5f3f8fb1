// Ethernet MAC Control frames (ethertype 0x8808): link-level flow control. Lossless RoCE fabrics run on
// them: PFC (priority-based flow control, IEEE 802.1Qbb / 802.3 Annex 31D) pauses one or more 802.1p
// priorities at a time, so a switch can stop a sender's RoCE priority without touching its other traffic;
// the older PAUSE (802.3 Annex 31B) stops the whole link. Both go to 01:80:c2:00:00:01, untagged, and give
// times in quanta of 512 bit times (so how long a quantum lasts depends on the link's speed); a time of 0
// lifts a pause at once ("XON").
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "transport/wire/address.hpp"

namespace uroce::wire {

inline constexpr uint16_t ethertype_mac_control = 0x8808;
inline constexpr uint16_t mac_control_pause = 0x0001;  // PAUSE: every priority
inline constexpr uint16_t mac_control_pfc = 0x0101;    // PFC: per priority (class-based flow control)
inline constexpr MacAddress mac_control_group{{0x01, 0x80, 0xc2, 0x00, 0x00, 0x01}};

inline constexpr size_t mac_control_opcode_size = 2;
inline constexpr size_t pause_body_size = 4;   // opcode, pause time
inline constexpr size_t pfc_body_size = 20;    // opcode, class-enable vector, 8 times
inline constexpr unsigned pause_quantum_bits = 512;

struct MacControl {
  uint16_t opcode = 0;
  uint16_t pause_quanta = 0;              // PAUSE
  uint8_t enabled = 0;                    // PFC: bit i set: the frame speaks for priority i
  std::array<uint16_t, 8> quanta{};       // PFC: the time for each priority (meaningful where enabled)
  uint8_t reserved_enable_bits = 0;       // PFC: the vector's upper byte, zero on a well-formed frame

  bool is_pfc() const { return opcode == mac_control_pfc; }
  bool is_pause() const { return opcode == mac_control_pause; }
};

// The body's size for this opcode: what read_mac_control needs (2 for opcodes it does not decode).
size_t mac_control_body_size(uint16_t opcode);
// Decodes the body at `p` (`n` bytes, starting with the opcode); false if it is shorter than its opcode's.
bool read_mac_control(const uint8_t* p, size_t n, MacControl& m);
// Writes a PAUSE or PFC body; returns its size. `out` must hold mac_control_body_size(m.opcode) bytes.
size_t write_mac_control(uint8_t* out, const MacControl& m);

// How long `quanta` last on a link of `bits_per_second`, in nanoseconds (rounded up).
inline constexpr uint64_t pause_nanoseconds(uint16_t quanta, uint64_t bits_per_second) {
  const uint64_t bits = uint64_t(quanta) * pause_quantum_bits;
  return bits_per_second == 0 ? 0 : (bits * 1'000'000'000 + bits_per_second - 1) / bits_per_second;
}

}  // namespace uroce::wire
