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

// The engine status page and the eventfd that wakes a sleeping engine, and the session's doorbell page
// (protocol/doorbell.hpp) when the daemon gave one: the rings bump its word whenever they publish.
class Doorbell {
 public:
  Doorbell() = default;
  // `session`: the doorbell page, or an empty region from a daemon that has none.
  Doorbell(protocol::SharedRegion status, int wake_fd, protocol::SharedRegion session = {});
  Doorbell(Doorbell&&) noexcept;
  Doorbell& operator=(Doorbell&&) noexcept;
  ~Doorbell();
  // After a producer index was published: wakes the engine if (and only if) it sleeps.
  void ring() const;
  bool daemon_shutting_down() const;
  uint32_t daemon_pid() const;
  // Moves whenever the port's GID table changes (EngineStatus::gid_generation).
  uint32_t gid_generation() const;
  // The word the rings bump (SendRing/RecvRing::use_doorbell), nullptr without a doorbell page.
  uint32_t* session_word() const;

 private:
  protocol::SharedRegion status_;
  int wake_fd_ = -1;
  protocol::SharedRegion session_;
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
  // A batch (the ibv_wr_* API): stage() writes a request into the next free slot without publishing it,
  // same errors as post(); publish() makes every staged request visible to the engine at once, discard()
  // forgets them (the engine never saw them).
  int stage(const protocol::SendEntry& wr, std::span<const protocol::WireSge> sges,
            std::span<const uint8_t> inline_data);
  void publish();
  void discard() { staged_ = producer_; }
  uint32_t capacity() const { return ring_.capacity(); }
  // Every publication then bumps the session's doorbell word (Doorbell::session_word).
  void use_doorbell(uint32_t* word) { doorbell_ = word; }

 private:
  protocol::SharedRegion region_;
  protocol::RingView ring_;
  uint32_t producer_ = 0;  // published
  uint32_t staged_ = 0;    // written, >= producer_
  // The daemon's consumer index as last read (RingView::writable); at first "full", so that the first post
  // reads the real one.
  uint32_t consumer_seen_ = 0;
  uint32_t max_sge_ = 0, max_inline_ = 0;
  uint32_t* doorbell_ = nullptr;
};

class RecvRing {
 public:
  RecvRing() = default;
  RecvRing(int fd, size_t bytes, uint32_t capacity, uint32_t entry_size, uint32_t max_sge);
  int post(uint64_t wr_id, std::span<const protocol::WireSge> sges);
  uint32_t capacity() const { return ring_.capacity(); }
  void use_doorbell(uint32_t* word) { doorbell_ = word; }

 private:
  protocol::SharedRegion region_;
  protocol::RingView ring_;
  uint32_t producer_ = 0;
  uint32_t consumer_seen_ = 0;
  uint32_t max_sge_ = 0;
  uint32_t* doorbell_ = nullptr;
};

class CompletionRing {
 public:
  CompletionRing() = default;
  CompletionRing(int fd, size_t bytes, uint32_t capacity);
  // Copies up to out.size() completions out; returns how many.
  int poll(std::span<protocol::CompletionEntry> out);
  // Removes the unpolled completions of QP `qpn`, keeping the others in order (the newest move up over
  // the gaps, and the consumer index passes the freed slots): what the client does when a QP goes to RESET,
  // after the daemon stopped making completions for it, as libmlx5's CQ clean. The daemon only writes past
  // the producer index read here, so this is safe beside it.
  void remove_qp(uint32_t qpn);
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
