// The DPDK Environment Abstraction Layer: started once per process, cleaned up at destruction.
#pragma once

#include "emulator/port/eal_args.hpp"

#include <stdexcept>
#include <string>
#include <vector>

namespace uroce::emulator::port {

struct EalError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// rte_eal_init can run only once in a process, even after rte_eal_cleanup, so a second Eal (or a first
// one after an earlier Eal was destroyed) throws. Destroy every DpdkPort before the Eal. Starting routes DPDK's log into spdlog first, so EAL's
// start-up messages and its reasons for failing land in the daemon's log and in the exception.
class Eal {
 public:
  explicit Eal(const EalOptions& options = {});
  ~Eal();
  Eal(const Eal&) = delete;
  Eal& operator=(const Eal&) = delete;

  const std::vector<std::string>& arguments() const { return arguments_; }
  bool hugepages() const { return hugepages_; }
  double init_milliseconds() const { return init_ms_; }  // how long rte_eal_init took

 private:
  std::vector<std::string> arguments_;
  bool hugepages_ = false;
  double init_ms_ = 0;
};

}  // namespace uroce::emulator::port
