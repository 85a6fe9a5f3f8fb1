// The envelope of control messages (protocol.hpp): checking the fields every request carries, and
// building the responses and events the server sends. The verbs themselves (what an "op" means) belong to
// the daemon's handler, not here.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace uroce::emulator::control {

struct RequestError {
  int error_number;
  std::string text;
};

struct CheckedRequest {
  nlohmann::json id = nullptr;  // the request's id once known, else null (the response carries it back)
  std::string op;
  std::optional<RequestError> error;  // set when the request must be refused without reaching a handler
};

// Checks "id" (unsigned integer), "v" (equal to kProtocolVersion) and "op" (non-empty string).
CheckedRequest check_request(const nlohmann::json& message);

nlohmann::json success_response(const nlohmann::json& id, nlohmann::json body);
nlohmann::json error_response(const nlohmann::json& id, int error_number, std::string_view text);

// True when `message` is an event: an object whose "event" member is a string.
bool is_event(const nlohmann::json& message);

// The UTF-8 text of a message. Invalid UTF-8 in a string a handler produced is replaced (U+FFFD) rather
// than thrown on, so a bad string cannot abort a reply half-built.
std::string encode(const nlohmann::json& message);

}  // namespace uroce::emulator::control
