// The /dev/infiniband node uroced makes for libraries that look for it (emulator/daemon/device_node.hpp),
// in a directory of the test's own: made when missing, a character device everyone may read and write that
// opens nothing, kept while any daemon uses it, removed with its directory by the last one.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>

#include "emulator/daemon/device_node.hpp"

namespace uroce::test::service {
namespace {

namespace fs = std::filesystem;
using emulator::DeviceNode;

struct TempDir {
  TempDir() {
    char name[] = "/tmp/uroce-devnode-XXXXXX";
    REQUIRE(::mkdtemp(name) != nullptr);
    path = name;
  }
  ~TempDir() { fs::remove_all(path); }
  fs::path path;
};

bool made_by_root() {
  if (::geteuid() == 0) return true;
  WARN("not root: mknod needs CAP_MKNOD, so these checks are skipped");
  return false;
}

TEST_CASE("device node: made when missing, a 0:0 character device for everyone that opens nothing",
          "[device-node]") {
  if (!made_by_root()) return;
  TempDir t;
  const fs::path dir = t.path / "infiniband";
  {
    DeviceNode node("uverbs-uroce0", dir, t.path / "run");
    REQUIRE(node.present());
    CHECK(node.path() == dir / "uverbs-uroce0");
    struct stat st{};
    REQUIRE(::stat(node.path().c_str(), &st) == 0);
    CHECK(S_ISCHR(st.st_mode));
    CHECK((st.st_mode & 07777) == 0666);  // whatever the umask
    CHECK(emulator::is_placeholder_device_node(node.path()));
    // What UCX asks (uct_ib_device_is_accessible), and what anyone who opens it gets: no device.
    CHECK(::access(node.path().c_str(), R_OK | W_OK) == 0);
    errno = 0;
    const int fd = ::open(node.path().c_str(), O_RDWR);
    CHECK(fd < 0);
    CHECK((errno == ENXIO || errno == EACCES));  // EACCES where the file system is mounted nodev
    if (fd >= 0) ::close(fd);
  }
  CHECK_FALSE(fs::exists(dir / "uverbs-uroce0"));
  CHECK_FALSE(fs::exists(dir));  // the directory went too: it was empty
}

TEST_CASE("device node: kept while another daemon uses it; the last one removes it", "[device-node]") {
  if (!made_by_root()) return;
  TempDir t;
  const fs::path dir = t.path / "infiniband", run = t.path / "run";
  std::optional<DeviceNode> first, second;
  first.emplace("uverbs-uroce0", dir, run);
  second.emplace("uverbs-uroce0", dir, run);
  REQUIRE(first->present());
  REQUIRE(second->present());
  first.reset();
  CHECK(emulator::is_placeholder_device_node(dir / "uverbs-uroce0"));  // the second still runs
  second.reset();
  CHECK_FALSE(fs::exists(dir / "uverbs-uroce0"));
}

TEST_CASE("device node: other devices' nodes and a file in the way are left alone", "[device-node]") {
  if (!made_by_root()) return;
  TempDir t;
  const fs::path dir = t.path / "infiniband";
  fs::create_directories(dir);
  std::ofstream(dir / "uverbs0") << "another device's node";
  std::ofstream(dir / "uverbs-uroce1") << "not a device";
  {
    DeviceNode ours("uverbs-uroce0", dir, t.path / "run");
    CHECK(ours.present());
    DeviceNode blocked("uverbs-uroce1", dir, t.path / "run");
    CHECK_FALSE(blocked.present());  // a regular file of that name: not ours to replace
  }
  CHECK_FALSE(fs::exists(dir / "uverbs-uroce0"));
  CHECK(fs::is_regular_file(dir / "uverbs-uroce1"));
  CHECK(fs::is_regular_file(dir / "uverbs0"));  // and the directory stays, as it is not empty
}

TEST_CASE("device node: a directory that cannot be made leaves the daemon without the node", "[device-node]") {
  TempDir t;
  std::ofstream(t.path / "file") << "x";
  DeviceNode node("uverbs-uroce0", t.path / "file" / "infiniband", t.path / "run");  // ENOTDIR
  CHECK_FALSE(node.present());
}

}  // namespace
}  // namespace uroce::test::service
