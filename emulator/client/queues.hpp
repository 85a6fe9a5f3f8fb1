// The client's side of the shared queues: posting work requests and polling completions are plain
// loads and stores on memory shared with uroced, with no system call (docs/daemon.md). Not thread-safe by
// themselves: the verbs shim serialises each queue with its own lock, as rdma-core's providers do.
#pragma once

#include <cstdint>
#include <span>

#include "emulator/protocol/queue_entries.hpp"
#include "emulator/protocol/ring.hpp"
#include "emulator/protocol/shared_region.hpp"

namespace uroce::emulator::client {

// The engine status page and the eventfd that wakes a sleeping engine.
class Doorbell {
 public:
  Doorbell() = default;
  Doorbell(protocol::SharedRegion status, int wake_fd);
  Doorbell(Doorbell&&) noexcept;
  Doorbell& operator=(Doorbell&&) noexcept;
  ~Doorbell();
  // After a producer index was published: wakes the engine if (and only if) it sleeps.
  void ring() const;
  bool daemon_shutting_down() const;
  uint32_t daemon_pid() const;

 private:
  protocol::SharedRegion status_;
  int wake_fd_ = -1;
};

class SendRing {
 public:
  SendRing() = default;
  // Takes ownership of the fd; checks the header the daemon wrote.
  SendRing(int fd, size_t bytes, uint32_t capacity, uint32_t entry_size, uint32_t max_sge, uint32_t max_inline);
  // Writes one work request into the next slot and publishes it. EINVAL: too many SGEs or too much
  // inline data; ENOMEM: the queue is full (ibv_post_send's errors).
  int post(const protocol::SendEntry& wr, std::span<const protocol::WireSge> sges,
           std::span<const uint8_t> inline_data);
  uint32_t capacity() const { return ring_.capacity(); }

 private:
  protocol::SharedRegion region_;
  protocol::RingView ring_;
  uint32_t producer_ = 0;
  uint32_t max_sge_ = 0, max_inline_ = 0;
};

class RecvRing {
 public:
  RecvRing() = default;
  RecvRing(int fd, size_t bytes, uint32_t capacity, uint32_t entry_size, uint32_t max_sge);
  int post(uint64_t wr_id, std::span<const protocol::WireSge> sges);
  uint32_t capacity() const { return ring_.capacity(); }

 private:
  protocol::SharedRegion region_;
  protocol::RingView ring_;
  uint32_t producer_ = 0;
  uint32_t max_sge_ = 0;
};

class CompletionRing {
 public:
  CompletionRing() = default;
  CompletionRing(int fd, size_t bytes, uint32_t capacity);
  // Copies up to out.size() completions out; returns how many.
  int poll(std::span<protocol::CompletionEntry> out);
  // ibv_req_notify_cq: the next completion (or, with solicited_only, the next solicited one) writes the
  // CQ's completion channel.
  void arm(bool solicited_only);
  uint32_t capacity() const { return ring_.capacity(); }

 private:
  protocol::SharedRegion region_;
  protocol::RingView ring_;
  uint32_t consumer_ = 0;
};

}  // namespace uroce::emulator::client
