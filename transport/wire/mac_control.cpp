#include "transport/wire/mac_control.hpp"

#include "transport/wire/bytes.hpp"

namespace uroce::wire {

size_t mac_control_body_size(uint16_t opcode) {
  switch (opcode) {
    case mac_control_pause: return pause_body_size;
    case mac_control_pfc: return pfc_body_size;
    default: return mac_control_opcode_size;
  }
}

bool read_mac_control(const uint8_t* p, size_t n, MacControl& m) {
  if (n < mac_control_opcode_size) return false;
  m = MacControl{};
  m.opcode = load_be16(p);
  if (n < mac_control_body_size(m.opcode)) return false;
  if (m.is_pause()) {
    m.pause_quanta = load_be16(p + 2);
  } else if (m.is_pfc()) {
    m.reserved_enable_bits = p[2];
    m.enabled = p[3];
    for (unsigned i = 0; i < 8; ++i) m.quanta[i] = load_be16(p + 4 + 2 * i);
  }
  return true;
}

size_t write_mac_control(uint8_t* out, const MacControl& m) {
  store_be16(out, m.opcode);
  if (m.is_pause()) {
    store_be16(out + 2, m.pause_quanta);
  } else if (m.is_pfc()) {
    out[2] = m.reserved_enable_bits;
    out[3] = m.enabled;
    for (unsigned i = 0; i < 8; ++i) store_be16(out + 4 + 2 * i, m.quanta[i]);
  }
  return mac_control_body_size(m.opcode);
}

}  // namespace uroce::wire
