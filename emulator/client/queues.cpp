#include "emulator/client/queues.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "emulator/protocol/doorbell.hpp"

namespace uroce::emulator::client {

using namespace uroce::emulator::protocol;

namespace {

RingView attach_ring(SharedRegion& region, uint32_t capacity, uint32_t entry_size) {
  if (region.size() < ring_bytes(capacity, entry_size) ||
      !ring_header_ok(*reinterpret_cast<const RingHeader*>(region.data()), capacity, entry_size)) {
    throw std::runtime_error("uroced sent a queue whose layout does not match its description");
  }
  return RingView(region.data(), capacity, entry_size);
}

// After the producer index (release store): a read-modify-write, so that the engine that sees the word
// move sees this publication even when another thread bumped the word after us (protocol/doorbell.hpp).
void bump(uint32_t* doorbell) {
  if (doorbell != nullptr) std::atomic_ref<uint32_t>(*doorbell).fetch_add(1, std::memory_order_release);
}

}  // namespace

Doorbell::Doorbell(SharedRegion status, int wake_fd, SharedRegion session)
    : status_(std::move(status)), wake_fd_(wake_fd), session_(std::move(session)) {
  if (status_.size() < sizeof(EngineStatus) ||
      reinterpret_cast<const EngineStatus*>(status_.data())->magic != engine_status_magic) {
    throw std::runtime_error("uroced's engine status page is not what this client expects");
  }
  if (session_.data() != nullptr) {
    const auto* d = reinterpret_cast<const SessionDoorbell*>(session_.data());
    if (d->magic != session_doorbell_magic || d->version != session_doorbell_version) {
      throw std::runtime_error("uroced's doorbell page is not what this client expects");
    }
  }
}

Doorbell::Doorbell(Doorbell&& o) noexcept
    : status_(std::move(o.status_)), wake_fd_(std::exchange(o.wake_fd_, -1)), session_(std::move(o.session_)) {}

Doorbell& Doorbell::operator=(Doorbell&& o) noexcept {
  if (this != &o) {
    if (wake_fd_ >= 0) close(wake_fd_);
    status_ = std::move(o.status_);
    wake_fd_ = std::exchange(o.wake_fd_, -1);
    session_ = std::move(o.session_);
  }
  return *this;
}

uint32_t* Doorbell::session_word() const {
  if (session_.data() == nullptr) return nullptr;
  return &reinterpret_cast<SessionDoorbell*>(session_.data())->rung;
}

Doorbell::~Doorbell() {
  if (wake_fd_ >= 0) close(wake_fd_);
}

// Pairs with the engine's "set sleeping, fence, look at every ring once more" before it sleeps: either
// the engine sees our producer index, or we see its sleeping flag and wake it.
void Doorbell::ring() const {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  auto* s = reinterpret_cast<EngineStatus*>(status_.data());
  if (std::atomic_ref<uint32_t>(s->sleeping).load(std::memory_order_relaxed) != 0) {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof one);
  }
}

bool Doorbell::daemon_shutting_down() const {
  auto* s = reinterpret_cast<EngineStatus*>(status_.data());
  return std::atomic_ref<uint32_t>(s->shutting_down).load(std::memory_order_acquire) != 0;
}

uint32_t Doorbell::daemon_pid() const { return reinterpret_cast<const EngineStatus*>(status_.data())->daemon_pid; }

uint32_t Doorbell::gid_generation() const {
  auto* s = reinterpret_cast<EngineStatus*>(status_.data());
  return std::atomic_ref<uint32_t>(s->gid_generation).load(std::memory_order_acquire);
}

SendRing::SendRing(int fd, size_t bytes, uint32_t capacity, uint32_t entry_size, uint32_t max_sge, uint32_t max_inline)
    : region_(SharedRegion::attach(fd, bytes)), ring_(attach_ring(region_, capacity, entry_size)),
      producer_(ring_.load_producer()), staged_(producer_), consumer_seen_(producer_ - capacity),
      max_sge_(max_sge), max_inline_(max_inline) {
  // Posting writes up to max_sge SGEs or max_inline bytes after the entry: the slot must hold them.
  if (entry_size < send_entry_size(max_sge, max_inline)) throw std::runtime_error("uroced sent a send queue too small");
}

int SendRing::post(const SendEntry& wr, std::span<const WireSge> sges, std::span<const uint8_t> inline_data) {
  const int rc = stage(wr, sges, inline_data);
  if (rc == 0) publish();
  return rc;
}

int SendRing::stage(const SendEntry& wr, std::span<const WireSge> sges, std::span<const uint8_t> inline_data) {
  if (region_.data() == nullptr) return EINVAL;  // a QP with no send queue (an RSS QP): nothing to post to
  const bool is_inline = (wr.send_flags & (1u << 3)) != 0;  // IBV_SEND_INLINE
  if (is_inline ? inline_data.size() > max_inline_ : sges.size() > max_sge_) return EINVAL;
  if (ring_.writable(staged_, consumer_seen_) == 0) return ENOMEM;
  uint8_t* slot = ring_.entry(staged_);
  SendEntry e = wr;
  e.num_sge = is_inline ? 0 : uint16_t(sges.size());
  e.inline_length = is_inline ? uint32_t(inline_data.size()) : 0;
  std::memcpy(slot, &e, sizeof e);
  if (is_inline) {
    if (!inline_data.empty()) std::memcpy(slot + sizeof e, inline_data.data(), inline_data.size());
  } else if (!sges.empty()) {
    std::memcpy(slot + sizeof e, sges.data(), sges.size_bytes());
  }
  ++staged_;
  return 0;
}

void SendRing::publish() {
  if (staged_ == producer_) return;
  producer_ = staged_;
  ring_.publish_producer(producer_);
  bump(doorbell_);
}

RecvRing::RecvRing(int fd, size_t bytes, uint32_t capacity, uint32_t entry_size, uint32_t max_sge)
    : region_(SharedRegion::attach(fd, bytes)), ring_(attach_ring(region_, capacity, entry_size)),
      producer_(ring_.load_producer()), consumer_seen_(producer_ - capacity), max_sge_(max_sge) {
  if (entry_size < recv_entry_size(max_sge)) throw std::runtime_error("uroced sent a receive queue too small");
}

int RecvRing::post(uint64_t wr_id, std::span<const WireSge> sges) {
  if (sges.size() > max_sge_) return EINVAL;
  if (ring_.writable(producer_, consumer_seen_) == 0) return ENOMEM;
  uint8_t* slot = ring_.entry(producer_);
  const RecvEntry e{wr_id, uint32_t(sges.size()), 0};
  std::memcpy(slot, &e, sizeof e);
  if (!sges.empty()) std::memcpy(slot + sizeof e, sges.data(), sges.size_bytes());
  ring_.publish_producer(++producer_);
  bump(doorbell_);
  return 0;
}

CompletionRing::CompletionRing(int fd, size_t bytes, uint32_t capacity)
    : region_(SharedRegion::attach(fd, bytes)), ring_(attach_ring(region_, capacity, completion_entry_size())),
      consumer_(ring_.load_consumer()) {}

int CompletionRing::poll(std::span<CompletionEntry> out) {
  const uint32_t n = std::min<uint32_t>(ring_.readable(consumer_), uint32_t(out.size()));
  for (uint32_t i = 0; i < n; ++i) std::memcpy(&out[i], ring_.entry(consumer_ + i), sizeof(CompletionEntry));
  if (n != 0) {
    consumer_ += n;
    ring_.publish_consumer(consumer_);
  }
  return int(n);
}

void CompletionRing::remove_qp(uint32_t qpn) {
  const uint32_t end = consumer_ + ring_.readable(consumer_);
  uint32_t removed = 0;
  for (uint32_t i = end; i != consumer_;) {
    --i;
    CompletionEntry e;
    std::memcpy(&e, ring_.entry(i), sizeof e);
    if (e.qp_num == qpn) {
      ++removed;
    } else if (removed != 0) {
      std::memcpy(ring_.entry(i + removed), &e, sizeof e);
    }
  }
  if (removed != 0) {
    consumer_ += removed;
    ring_.publish_consumer(consumer_);
  }
}

void CompletionRing::arm(bool solicited_only) {
  ring_.arm().store(uint32_t(solicited_only ? CqArm::solicited : CqArm::next), std::memory_order_seq_cst);
}

}  // namespace uroce::emulator::client
