// The device node an RDMA device has under /dev/infiniband, which some RDMA libraries look for before
// they use a device that libibverbs listed.
//
// A kernel RDMA device has a character device there (uverbs0, ...) that its provider opens. uroce's verbs
// shim never opens one: it reaches uroced through its socket. But UCX (uct_ib_device_is_accessible) skips
// every device whose /dev/infiniband/<ibv_device.dev_name> is not a character device the process may read
// and write, so without the node UCX sees no RDMA device at all. uroced, which runs as root, makes the
// node the shim names (uverbs-NAME, NAME being --device-name: uverbs-uroce0 by default). It is a character
// device with no driver behind it (0:0): stat and access() see what UCX wants, and anyone who opens it
// gets ENXIO ("no such device"), never another device. The node and /dev/infiniband (when empty) are removed again when the last uroced that uses them
// stops: each holds a shared lock on /run/uroce/<name>.node-lock, and only the last can lock it alone.
#pragma once

#include <filesystem>
#include <string>

namespace uroce::emulator {

class DeviceNode {
 public:
  static constexpr const char* default_directory = "/dev/infiniband";
  static constexpr const char* default_lock_directory = "/run/uroce";

  // Makes `directory`/`name` unless it is there. Failures are logged as warnings and leave the object
  // inert: the daemon works without the node, only such libraries do not see the device.
  DeviceNode(std::string name, std::filesystem::path directory = default_directory,
             std::filesystem::path lock_directory = default_lock_directory);
  ~DeviceNode();
  DeviceNode(const DeviceNode&) = delete;
  DeviceNode& operator=(const DeviceNode&) = delete;

  // Whether the node is there for this daemon's clients.
  bool present() const { return present_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  void create();
  void remove_if_last();

  std::filesystem::path directory_;
  std::filesystem::path path_;
  std::filesystem::path lock_path_;
  int lock_fd_ = -1;
  bool present_ = false;
};

// Whether `path` is a node this class makes: a character device 0:0.
bool is_placeholder_device_node(const std::filesystem::path& path);

}  // namespace uroce::emulator
