// A memif peer in another process: this test executable started with --memif-peer <socket>, which runs
// its own EAL and echoes every frame back, until it is killed. Used to check that a port survives its
// peer going away (platform.md: a memif server once crashed when its client vanished mid-traffic).
#pragma once

#include <string>
#include <sys/types.h>

namespace uroce::emulator::port::test {

// The peer's side, called from main() instead of the tests; never returns normally.
int run_memif_echo_peer(const std::string& socket);

class MemifPeerProcess {
 public:
  explicit MemifPeerProcess(const std::string& socket);  // fork + exec of /proc/self/exe
  ~MemifPeerProcess();                                    // kill() if still running
  void kill();                                            // SIGKILL and reap: the peer vanishes
  MemifPeerProcess(const MemifPeerProcess&) = delete;
  MemifPeerProcess& operator=(const MemifPeerProcess&) = delete;

 private:
  pid_t pid_ = -1;
};

}  // namespace uroce::emulator::port::test
