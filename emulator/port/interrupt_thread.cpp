// DPDK 22.11 makes interrupt instances (rte_intr_instance_alloc and its setters) only through API it marks
// experimental; Debian 12 pins the version, so we use it knowingly rather than warn on every build.
#define ALLOW_EXPERIMENTAL_API 1

#include "emulator/port/interrupt_thread.hpp"

#include <rte_alarm.h>
#include <rte_interrupts.h>
#include <spdlog/spdlog.h>

#include <sys/eventfd.h>
#include <unistd.h>

#include <future>
#include <utility>

namespace uroce::emulator::port {

namespace {

struct Call {
  const std::function<void()>* work;
  std::promise<void> done;
};

void run_call(void* arg) {
  auto* call = static_cast<Call*>(arg);
  (*call->work)();
  call->done.set_value();
}

// An interrupt callback that never returns: exit_group ends the thread with the process. pause() returns
// only after a signal handler has run on this thread, so it loops.
[[noreturn]] void park(void* arg) {
  static_cast<std::promise<void>*>(arg)->set_value();
  for (;;) pause();
}

}  // namespace

bool run_on_interrupt_thread(const std::function<void()>& work, std::chrono::milliseconds patience) {
  if (rte_thread_is_intr()) {  // already there: an alarm would wait for us
    work();
    return true;
  }
  Call call{&work, {}};
  std::future<void> done = call.done.get_future();
  // One microsecond: EAL's shortest alarm; it fires on the interrupt thread's next turn.
  int rc = rte_eal_alarm_set(1, run_call, &call);
  if (rc != 0) {
    spdlog::debug("no EAL alarm ({}): running on the calling thread", rc);
    work();
    return false;
  }
  if (done.wait_for(patience) == std::future_status::ready) return true;
  // rte_eal_alarm_cancel waits for an alarm that is running; if it cancelled ours, it never ran.
  if (rte_eal_alarm_cancel(run_call, &call) > 0) {
    spdlog::warn("EAL's interrupt thread did not answer in {} ms: running on the calling thread",
                 patience.count());
    work();
    return false;
  }
  done.wait();
  return true;
}

bool park_interrupt_thread(std::chrono::milliseconds patience) {
  // Not an alarm: rte_eal_cleanup waits for a running alarm callback to return (rte_eal_alarm_cleanup
  // unregisters the alarms' source synchronously). An interrupt source of our own, an eventfd made ready
  // at once, is one cleanup never touches. Its handle is private (malloc), so it survives the unmapping,
  // and the promise, handle and descriptor are never freed: the parked thread keeps using them.
  static bool tried = false;  // once per process, whether or not the first try worked
  if (std::exchange(tried, true)) return false;
  // In statics: the parked thread uses them for the rest of the process, and a leak checker must see that
  // they are still referenced (EAL's own list of sources is gone after rte_eal_cleanup).
  static std::promise<void>* parked = nullptr;
  static rte_intr_handle* handle = nullptr;
  parked = new std::promise<void>;
  std::future<void> done = parked->get_future();
  const int fd = eventfd(1, EFD_NONBLOCK | EFD_CLOEXEC);
  handle = rte_intr_instance_alloc(RTE_INTR_INSTANCE_F_PRIVATE);
  if (fd < 0 || handle == nullptr || rte_intr_fd_set(handle, fd) != 0 ||
      rte_intr_type_set(handle, RTE_INTR_HANDLE_EXT) != 0 ||
      rte_intr_callback_register(handle, park, parked) != 0) {
    spdlog::debug("EAL's interrupt thread not parked: no interrupt source");
    rte_intr_instance_free(handle);  // never registered: nothing refers to it
    if (fd >= 0) close(fd);
    delete parked;
    handle = nullptr;
    parked = nullptr;
    return false;
  }
  if (done.wait_for(patience) == std::future_status::ready) return true;
  // Unregistering fails with EAGAIN while the callback runs, that is, once the thread is parked.
  if (rte_intr_callback_unregister(handle, park, parked) > 0) {
    spdlog::warn("EAL's interrupt thread did not answer in {} ms: not parked", patience.count());
    return false;
  }
  done.wait();
  return true;
}

}  // namespace uroce::emulator::port
