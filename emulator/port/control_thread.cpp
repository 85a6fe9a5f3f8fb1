#include "emulator/port/control_thread.hpp"

#include <rte_lcore.h>

#include <stdexcept>
#include <system_error>
#include <utility>

namespace uroce::emulator::port {

ControlThread::ControlThread(const std::string& name, std::function<void()> body)
    : name_(name), body_(std::move(body)) {
  // DPDK cuts a longer name silently (pthread_setname_np's 16 bytes); refuse it so that tests and `ps`
  // find the name given.
  if (name.empty() || name.size() > 15) throw std::invalid_argument("control thread name '" + name + "'");
  const int rc = rte_ctrl_thread_create(&thread_, name.c_str(), nullptr, &ControlThread::trampoline, this);
  if (rc != 0) throw std::system_error(-rc, std::generic_category(), "rte_ctrl_thread_create " + name);
}

ControlThread::~ControlThread() {
  if (!joined_) pthread_join(thread_, nullptr);
}

void ControlThread::join() {
  if (!joined_) {
    pthread_join(thread_, nullptr);
    joined_ = true;
  }
  if (failure_) std::rethrow_exception(std::exchange(failure_, nullptr));
}

// No exception may leave a function DPDK calls (its C frames have no unwind tables): it is kept for join().
void* ControlThread::trampoline(void* self) {
  auto* t = static_cast<ControlThread*>(self);
  // DPDK 22.11 names the thread from the creating thread after pthread_create returns, so the body could
  // start (and log, or be looked up by name) before that. Naming it here first closes the gap; DPDK's own
  // later naming writes the same name.
  pthread_setname_np(pthread_self(), t->name_.c_str());
  try {
    t->body_();
  } catch (...) {
    t->failure_ = std::current_exception();
  }
  return nullptr;
}

}  // namespace uroce::emulator::port
