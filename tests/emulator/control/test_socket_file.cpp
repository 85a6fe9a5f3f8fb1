// The socket file: where it is created and with which modes, stale files, a second server, removal.
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <cstring>
#include <fstream>
#include <system_error>

#include <catch2/catch.hpp>

#include "emulator/client/control_connection.hpp"
#include "emulator/control/control_server.hpp"
#include "server_fixture.hpp"

using uroce::emulator::client::ControlConnection;
using uroce::emulator::client::ControlError;
using uroce::emulator::control::ControlServer;
using uroce::emulator::control::UniqueFd;
using uroce::emulator::control::testing::ServerFixture;
using uroce::emulator::control::testing::TempDir;
using uroce::emulator::control::testing::TestHandler;

namespace {

mode_t mode_of(const std::string& path) {
  struct stat status {};
  REQUIRE(::lstat(path.c_str(), &status) == 0);
  return status.st_mode;
}

bool exists(const std::string& path) {
  struct stat status {};
  return ::lstat(path.c_str(), &status) == 0;
}

// A socket file with no server behind it, as a daemon that was killed leaves.
void make_stale_socket(const std::string& path) {
  UniqueFd socket(::socket(AF_UNIX, SOCK_SEQPACKET, 0));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof address.sun_path - 1);
  REQUIRE(::bind(socket.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0);
}

std::string failure_of(boost::asio::io_context& io, const std::string& path, TestHandler& handler) {
  try {
    ControlServer server(io, path, handler);
  } catch (const std::system_error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("the server makes its directory and a socket any user can open", "[control][socket]") {
  TempDir dir;
  const std::string path = dir.path() + "/run/uroce/uroced.sock";
  boost::asio::io_context io;
  TestHandler handler;
  {
    ControlServer server(io, path, handler);
    CHECK((mode_of(dir.path() + "/run") & 07777) == 0755);
    CHECK((mode_of(dir.path() + "/run/uroce") & 07777) == 0755);
    CHECK(S_ISSOCK(mode_of(path)));
    CHECK((mode_of(path) & 07777) == 0666);
  }
  CHECK_FALSE(exists(path));  // removed when the server stopped
}

TEST_CASE("a stale socket file is replaced", "[control][socket]") {
  ServerFixture fixture(/*start_now=*/true, make_stale_socket);
  auto connection = ControlConnection::connect(fixture.path);
  CHECK(connection->call({{"op", "echo"}, {"data", 1}})["data"] == 1);
}

TEST_CASE("a second server on the same path is refused and the first keeps working", "[control][socket]") {
  ServerFixture fixture;
  boost::asio::io_context other_io;
  TestHandler other_handler;
  CHECK_THAT(failure_of(other_io, fixture.path, other_handler),
             Catch::Contains("another uroced is running at " + fixture.path));
  REQUIRE(exists(fixture.path));
  auto connection = ControlConnection::connect(fixture.path);
  CHECK(connection->call({{"op", "echo"}, {"data", 2}})["data"] == 2);
}

TEST_CASE("a file that is not a socket is never removed", "[control][socket]") {
  TempDir dir;
  const std::string path = dir.path() + "/uroced.sock";
  std::ofstream(path) << "precious";
  boost::asio::io_context io;
  TestHandler handler;
  CHECK_THAT(failure_of(io, path, handler), Catch::Contains("not a socket"));
  CHECK(S_ISREG(mode_of(path)));
}

TEST_CASE("connecting without a daemon says so", "[control][socket]") {
  TempDir dir;
  const std::string path = dir.path() + "/uroced.sock";
  try {
    ControlConnection::connect(path);
    FAIL("connected to nothing");
  } catch (const ControlError& e) {
    CHECK(e.error_number() == ENOENT);
    CHECK_THAT(e.what(), Catch::StartsWith("cannot reach uroced at " + path + ": "));
    CHECK_THAT(e.what(), Catch::EndsWith("(is uroced running?)"));
  }
  make_stale_socket(path);
  try {
    ControlConnection::connect(path);
    FAIL("connected to a stale socket");
  } catch (const ControlError& e) {
    CHECK(e.error_number() == ECONNREFUSED);
  }
}
