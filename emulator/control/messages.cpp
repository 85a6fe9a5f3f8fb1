#include "emulator/control/messages.hpp"

#include <cerrno>

#include "emulator/control/protocol.hpp"

namespace uroce::emulator::control {

CheckedRequest check_request(const nlohmann::json& message) {
  CheckedRequest checked;
  if (!message.is_object()) {
    checked.error = RequestError{EBADMSG, "a request must be a JSON object"};
    return checked;
  }
  const auto id = message.find("id");
  if (id == message.end() || !id->is_number_unsigned()) {
    checked.error = RequestError{EBADMSG, "missing or invalid \"id\" (an unsigned integer)"};
    return checked;
  }
  checked.id = *id;
  const auto version = message.find("v");
  if (version == message.end() || !version->is_number_unsigned()) {
    checked.error = RequestError{EBADMSG, "missing or invalid \"v\" (the protocol version)"};
    return checked;
  }
  if (version->get<std::uint64_t>() != kProtocolVersion) {
    checked.error = RequestError{EPROTONOSUPPORT, "protocol version " + version->dump() +
                                                      " is not supported (uroced speaks version " +
                                                      std::to_string(kProtocolVersion) + ")"};
    return checked;
  }
  const auto op = message.find("op");
  if (op == message.end() || !op->is_string() || op->get_ref<const std::string&>().empty()) {
    checked.error = RequestError{EBADMSG, "missing or invalid \"op\" (the operation's name)"};
    return checked;
  }
  checked.op = op->get<std::string>();
  return checked;
}

nlohmann::json success_response(const nlohmann::json& id, nlohmann::json body) {
  // id and ok are set last so that a body can never pass for another request's answer or a failure.
  body["id"] = id;
  body["ok"] = true;
  return body;
}

nlohmann::json error_response(const nlohmann::json& id, int error_number, std::string_view text) {
  return {{"id", id}, {"ok", false}, {"errno", error_number}, {"error", text}};
}

bool is_event(const nlohmann::json& message) {
  if (!message.is_object()) return false;
  const auto name = message.find("event");
  return name != message.end() && name->is_string();
}

std::string encode(const nlohmann::json& message) {
  return message.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace uroce::emulator::control
