// The daemon's control thread (the control socket, the rdma_cm, link watching), placed as DPDK places its
// own control threads: on the CPUs the process was allowed at rte_eal_init minus the lcores, so on none the
// engine polls (or, if the lcores took every CPU, on the main lcore's, which is DPDK's fallback).
//
// Why not a plain std::thread: a thread inherits its creator's affinity, and the engine's thread is the
// EAL's main lcore, pinned to one CPU. A control thread started from it shared that CPU with the engine,
// whose busy back-off (back_off.hpp) then held the CPU while the control thread waited for its turn after
// every request it handed to the engine. Measured on 2 vCPUs with the engine idle: alloc_pd + dealloc_pd
// 106-150 us on the engine's CPU, 48-75 us beside it (docs/daemon.md, "Threads and CPUs").
#pragma once

#include <pthread.h>

#include <exception>
#include <functional>
#include <string>

namespace uroce::emulator::port {

class ControlThread {
 public:
  // Starts `body` on a new control thread named `name` (at most 15 characters: the kernel's limit, seen
  // in /proc/PID/task/TID/comm). Needs a started Eal. Throws std::system_error if it cannot.
  ControlThread(const std::string& name, std::function<void()> body);
  ~ControlThread();  // joins, if join() was not called
  ControlThread(const ControlThread&) = delete;
  ControlThread& operator=(const ControlThread&) = delete;

  // Waits for `body` to return. If it threw, rethrows that here, on the joining thread.
  void join();

 private:
  static void* trampoline(void* self);

  std::string name_;
  std::function<void()> body_;
  std::exception_ptr failure_;
  pthread_t thread_{};
  bool joined_ = false;
};

}  // namespace uroce::emulator::port
