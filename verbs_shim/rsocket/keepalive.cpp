// SO_KEEPALIVE: one thread for the process sends each kept-alive rsocket a zero-length RDMA WRITE every
// keepalive_time seconds (TCP_KEEPIDLE). It needs no receive at the peer, and a peer that has gone makes
// the write fail after the QP's retries, which puts the rsocket in error, as TCP's keepalive does.
#include <chrono>
#include <condition_variable>
#include <map>
#include <thread>

#include "verbs_shim/rsocket/rsocket.hpp"

namespace uroce::rsocket {

namespace {

using Clock = std::chrono::steady_clock;

struct Service {
  std::mutex lock;  // held while a keepalive is posted: removal waits for it, so the rsocket stays valid
  std::condition_variable changed;
  std::map<Rsocket*, Clock::time_point> due;
  std::thread thread;
  bool running = false;

  void run() {
    std::unique_lock g(lock);
    while (!due.empty()) {
      const auto now = Clock::now();
      auto next = Clock::time_point::max();
      for (auto& [rs, when] : due) {
        if (when <= now) {
          post_keepalive(rs);
          when = now + std::chrono::seconds(rs->keepalive_time);
        }
        next = std::min(next, when);
      }
      changed.wait_until(g, next);
    }
    running = false;
  }
};

Service& service() {
  static Service* s = new Service;  // never destroyed: the thread may outlive static destruction
  return *s;
}

}  // namespace

int keepalive_add(Rsocket* rs) {
  Service& s = service();
  std::lock_guard g(s.lock);
  s.due[rs] = Clock::now() + std::chrono::seconds(rs->keepalive_time);
  rs->opts |= kOptSvcActive;
  if (!s.running) {
    if (s.thread.joinable()) s.thread.detach();  // one that has just ended
    s.running = true;
    try {
      s.thread = std::thread([&s] { s.run(); });
    } catch (const std::system_error&) {
      s.running = false;
      s.due.erase(rs);
      rs->opts &= ~kOptSvcActive;
      return fail(EAGAIN);
    }
  }
  s.changed.notify_all();
  return 0;
}

int keepalive_remove(Rsocket* rs) {
  Service& s = service();
  std::lock_guard g(s.lock);
  if (s.due.erase(rs) == 0) return fail(EBADF);
  rs->opts &= ~kOptSvcActive;
  s.changed.notify_all();
  return 0;
}

int keepalive_update(Rsocket* rs) {
  Service& s = service();
  std::lock_guard g(s.lock);
  auto it = s.due.find(rs);
  if (it == s.due.end()) return fail(EBADF);
  it->second = Clock::now() + std::chrono::seconds(rs->keepalive_time);
  s.changed.notify_all();
  return 0;
}

}  // namespace uroce::rsocket
