#include "emulator/protocol/tag_op_json.hpp"

#include <stdexcept>

#include "emulator/protocol/json_numbers.hpp"

namespace uroce::verbs {

using emulator::protocol::fitting_number;
using emulator::protocol::read_number;
using nlohmann::json;

void to_json(json& j, const TagOp& op) {
  json sges = json::array();
  for (const Sge& s : op.sg_list) sges.push_back({s.addr, s.length, s.lkey});
  j = {{"wr_id", op.wr_id},           {"opcode", uint32_t(op.opcode)}, {"flags", op.flags},
       {"unexpected_cnt", op.unexpected_cnt}, {"handle", op.handle},   {"recv_wr_id", op.recv_wr_id},
       {"tag", op.tag},               {"mask", op.mask},               {"sg_list", sges}};
}

void from_json(const json& j, TagOp& op) {
  if (!j.is_object()) throw std::invalid_argument("a list operation must be an object");
  op = TagOp{};
  read_number(j, "wr_id", op.wr_id);
  // An opcode the device does not know (3..255) still travels: the device refuses it in its turn, after
  // the operations before it, as ibv_post_srq_ops does. One beyond the field is a broken request.
  uint8_t opcode = 0;
  read_number(j, "opcode", opcode);
  op.opcode = TagOpcode(opcode);
  read_number(j, "flags", op.flags);
  read_number(j, "unexpected_cnt", op.unexpected_cnt);
  read_number(j, "handle", op.handle);
  read_number(j, "recv_wr_id", op.recv_wr_id);
  read_number(j, "tag", op.tag);
  read_number(j, "mask", op.mask);
  const auto sges = j.find("sg_list");
  if (sges == j.end()) return;
  if (!sges->is_array()) throw std::invalid_argument("sg_list must be an array");
  for (const json& s : *sges) {
    if (!s.is_array() || s.size() != 3) throw std::invalid_argument("an sge is [addr, length, lkey]");
    op.sg_list.push_back({fitting_number<uint64_t>(s[0], "sge addr"), fitting_number<uint32_t>(s[1], "sge length"),
                          fitting_number<uint32_t>(s[2], "sge lkey")});
  }
}

}  // namespace uroce::verbs
