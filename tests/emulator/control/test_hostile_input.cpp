// Input no client library sends: the server answers with an error or drops the session, closes every
// descriptor that came with a bad message, and keeps serving everybody else.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include <catch2/catch.hpp>

#include "emulator/client/control_connection.hpp"
#include "emulator/control/protocol.hpp"
#include "server_fixture.hpp"

using uroce::emulator::client::ControlConnection;
using uroce::emulator::control::kMaxFds;
using uroce::emulator::control::kMaxMessageBytes;
using uroce::emulator::control::UniqueFd;
using uroce::emulator::control::testing::pipe_reaches_eof;
using uroce::emulator::control::testing::RawPeer;
using uroce::emulator::control::testing::ServerFixture;

namespace {

const std::string kHello = R"({"v":1,"id":1,"op":"hello","client":"raw"})";

// The error the server answers `text` with: {"errno", "id"}.
std::pair<int, nlohmann::json> refusal_of(RawPeer& peer, const std::string& text) {
  peer.send(text);
  const auto reply = peer.receive();
  REQUIRE(reply.has_value());
  CHECK((*reply)["ok"] == false);
  CHECK((*reply)["error"].is_string());
  return {(*reply)["errno"].get<int>(), (*reply)["id"]};
}

void check_still_serving(const ServerFixture& fixture) {
  auto connection = ControlConnection::connect(fixture.path);
  CHECK(connection->call({{"op", "echo"}, {"data", "still here"}})["data"] == "still here");
}

struct Pipe {
  UniqueFd read_end;
  UniqueFd write_end;
  Pipe() {
    int ends[2];
    REQUIRE(::pipe2(ends, O_CLOEXEC) == 0);
    read_end.reset(ends[0]);
    write_end.reset(ends[1]);
  }
};

}  // namespace

TEST_CASE("malformed requests get an error and the session goes on", "[control][hostile]") {
  ServerFixture fixture;
  RawPeer peer(fixture.path);

  CHECK(refusal_of(peer, "\xff\xfe garbage") == std::pair<int, nlohmann::json>{EBADMSG, nullptr});
  CHECK(refusal_of(peer, "[1,2,3]") == std::pair<int, nlohmann::json>{EBADMSG, nullptr});
  CHECK(refusal_of(peer, "{\"v\":1,\"id\":1,\"op\":\"\xc3\x28\"}").first == EBADMSG);  // invalid UTF-8
  CHECK(refusal_of(peer, R"({"v":1,"op":"hello"})") == std::pair<int, nlohmann::json>{EBADMSG, nullptr});
  CHECK(refusal_of(peer, R"({"v":1,"id":-4,"op":"hello"})").first == EBADMSG);
  CHECK(refusal_of(peer, R"({"v":1,"id":"x","op":"hello"})").first == EBADMSG);
  CHECK(refusal_of(peer, R"({"id":2,"op":"hello"})") == std::pair<int, nlohmann::json>{EBADMSG, 2});
  CHECK(refusal_of(peer, R"({"v":1,"id":3})") == std::pair<int, nlohmann::json>{EBADMSG, 3});
  CHECK(refusal_of(peer, R"({"v":1,"id":4,"op":""})").first == EBADMSG);
  CHECK(refusal_of(peer, R"({"v":1,"id":5,"op":"hello","client":7})").first == EBADMSG);
  // Deep nesting must not exhaust the server's stack, parsing or freeing.
  CHECK(refusal_of(peer, std::string(30000, '[') + std::string(30000, ']')).first == EBADMSG);

  SECTION("requests before hello are refused") {
    CHECK(refusal_of(peer, R"({"v":1,"id":6,"op":"echo"})") == std::pair<int, nlohmann::json>{EPROTO, 6});
  }
  SECTION("another major version is refused at hello") {
    CHECK(refusal_of(peer, R"({"v":2,"id":7,"op":"hello","client":"future"})") ==
          std::pair<int, nlohmann::json>{EPROTONOSUPPORT, 7});
    CHECK(refusal_of(peer, R"({"v":1,"id":8,"op":"echo"})").first == EPROTO);
  }
  SECTION("after all that, hello works and so do requests; a second hello does not") {
    peer.send(kHello);
    CHECK((*peer.receive())["ok"] == true);
    peer.send(R"({"v":1,"id":9,"op":"echo","data":1})");
    CHECK((*peer.receive())["data"] == 1);
    CHECK(refusal_of(peer, kHello).first == EPROTO);
  }
  // The raw peer was never dropped: it still gets answers (an error or not, depending on the section).
  peer.send(R"({"v":1,"id":99,"op":"echo"})");
  const auto last = peer.receive();
  REQUIRE(last.has_value());
  CHECK((*last)["id"] == 99);
  check_still_serving(fixture);
}

TEST_CASE("descriptors that come with a bad message are closed", "[control][hostile]") {
  ServerFixture fixture;
  RawPeer peer(fixture.path);
  Pipe pipe;
  const int fds[] = {pipe.write_end.get()};

  SECTION("not JSON") { peer.send("not json", fds); }
  SECTION("before hello") { peer.send(R"({"v":1,"id":1,"op":"echo"})", fds); }
  SECTION("with a hello") { peer.send(kHello, fds); }
  SECTION("with a request the handler does not keep them for") {
    peer.send(kHello);
    REQUIRE(peer.receive().has_value());
    peer.send(R"({"v":1,"id":2,"op":"echo"})", fds);
  }
  REQUIRE(peer.receive().has_value());
  pipe.write_end.reset();
  CHECK(pipe_reaches_eof(pipe.read_end.get()));
}

TEST_CASE("framing violations drop the session but not the server", "[control][hostile]") {
  ServerFixture fixture;
  RawPeer peer(fixture.path);
  Pipe pipe;

  SECTION("too many descriptors") {
    const std::vector<int> fds(kMaxFds + 4, pipe.write_end.get());
    peer.send(kHello, fds);
    const auto reply = peer.receive();
    REQUIRE(reply.has_value());
    CHECK((*reply)["errno"] == E2BIG);
  }
  SECTION("a message longer than the limit") {
    peer.send(std::string(kMaxMessageBytes + 1000, 'x'));
    const auto reply = peer.receive();
    REQUIRE(reply.has_value());
    CHECK((*reply)["errno"] == EMSGSIZE);
  }
  SECTION("an empty datagram, which reads as a hang-up") { peer.send(""); }
  SECTION("a peer that never reads its events") {
    peer.send(kHello);
    REQUIRE(peer.receive().has_value());  // from here on it reads nothing
    for (int i = 0; i < 5000 && fixture.session_count() > 0; ++i) {
      fixture.on_server_thread([&] { fixture.server->broadcast({{"event", "flood"}, {"n", i}}); });
    }
  }
  CHECK(peer.hung_up());
  CHECK(fixture.handler.wait_until([](const auto& opened, const auto& closed) {
    return opened.size() == 1 && closed.size() == 1;
  }));
  pipe.write_end.reset();
  CHECK(pipe_reaches_eof(pipe.read_end.get()));
  check_still_serving(fixture);
}
