#include "memif_peer.hpp"

#include "emulator/port/dpdk_port.hpp"
#include "emulator/port/eal.hpp"

#include <rte_mbuf.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <stdexcept>
#include <thread>

namespace uroce::emulator::port::test {

int run_memif_echo_peer(const std::string& socket) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the test process
  spdlog::set_level(spdlog::level::off);
  EalOptions options;
  options.memory_mb = 128;
  options.log_level = spdlog::level::off;
  Eal eal(options);
  PortOptions port_options;
  port_options.mbufs = 1023;
  auto port = DpdkPort::open("net_memif_peer,role=client,id=0,socket=" + socket, port_options);
  rte_mbuf* burst[32];
  for (;;) {
    uint16_t n = port->rx_burst(burst, 32);
    if (n == 0) {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
      continue;
    }
    port->send_or_drop(burst, n);
  }
}

MemifPeerProcess::MemifPeerProcess(const std::string& socket) {
  pid_ = fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    // exec at once: the child of a DPDK process must not use DPDK (its EAL threads are gone).
    execl("/proc/self/exe", "uroce_port_tests", "--memif-peer", socket.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
}

MemifPeerProcess::~MemifPeerProcess() { kill(); }

void MemifPeerProcess::kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

}  // namespace uroce::emulator::port::test
