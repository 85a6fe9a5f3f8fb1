// One direction between two nodes: its impairment profile's effect on each frame, its queue and counters.
//
// A link decides timing and fate only; the network owns the bytes. Every frame offered to a link consumes
// the same fixed number of draws from the link's own random stream, whatever happens to it, so the fate of
// the n-th frame on a link depends only on (seed, link, n, profile): traffic on other links, or turning
// jitter on, does not change which frames are lost, and raising the loss probability only adds losses.
// ECN marking draws from a second stream of the link's, also exactly once per frame: one more draw in the
// first stream would have shifted every later frame's draws, and so changed the fates that existing seeds
// (a failing property-test seed, a test's expected losses) stand for.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <utility>

#include "transport/sim/corruption.hpp"
#include "transport/sim/random.hpp"
#include "transport/sim/types.hpp"

namespace uroce::sim {

struct LinkProfile {
  Nanos delay = 0;                // propagation delay, added after serialization
  Nanos jitter = 0;               // extra delay, uniform in [0, jitter], drawn per copy: this reorders
  double loss = 0;                // probability that a frame that left the queue never arrives
  double duplicate = 0;           // probability that a delivered frame arrives twice
  double corrupt = 0;             // probability, per delivered copy, that one bit is flipped
  CorruptionScope corrupt_scope = CorruptionScope::icrc_protected;
  uint64_t bandwidth = 0;         // bytes per second; 0 = infinite (no serialization, no queue)
  uint64_t queue_limit = 0;       // bytes the queue may hold, the frame being serialized included; 0 = any
  bool blackhole = false;         // drops everything, also what is in flight when it is set
  // ECN marking at enqueue, RED-like as DCQCN switches do it; needs a queue (bandwidth > 0), off while
  // ecn_kmin is 0. With q the bytes queued when a frame is offered (itself not counted), the frame is
  // marked with probability 0 below ecn_kmin, ecn_pmax * (q - kmin) / (kmax - kmin) from kmin up to
  // ecn_kmax, 1 from ecn_kmax on; ecn_kmax <= ecn_kmin makes it a step at ecn_kmin. Only ECT frames get
  // CE (ecn_marking.hpp); Not-ECT ones pass unmarked.
  uint64_t ecn_kmin = 0;
  uint64_t ecn_kmax = 0;
  double ecn_pmax = 1.0;
};

// The probability that a frame offered while `queued` bytes wait is marked CE under `profile`.
double ecn_mark_probability(const LinkProfile& profile, uint64_t queued);

struct LinkStats {
  uint64_t frames_sent = 0;          // frames offered to the link
  uint64_t bytes_sent = 0;
  uint64_t frames_delivered = 0;     // copies handed to the destination, duplicates included
  uint64_t bytes_delivered = 0;
  uint64_t dropped_loss = 0;
  uint64_t dropped_queue_full = 0;
  uint64_t dropped_blackhole = 0;
  uint64_t duplicated = 0;           // extra copies created
  uint64_t corrupted = 0;            // delivered copies with a flipped bit
  uint64_t max_queue_bytes = 0;      // high-water mark of the queue
  uint64_t ecn_marked = 0;           // ECT frames marked CE at enqueue (a few may be lost after; copies
                                     // of a duplicated one all carry the mark and count once)

  uint64_t frames_dropped() const { return dropped_loss + dropped_queue_full + dropped_blackhole; }
  LinkStats& operator+=(const LinkStats& o);
};

class Link {
 public:
  struct Copy {
    Nanos arrival = 0;
    bool corrupt = false;
    uint64_t corrupt_draw = 0;  // for flip_bit
  };
  struct Decision {
    DropReason drop = DropReason::none;
    uint8_t copies = 0;  // 0 when dropped, 2 when duplicated
    bool ecn_mark = false;  // the queue says CE; the network marks the frame if it is ECT (even if lost)
    std::array<Copy, 2> copy{};
  };

  explicit Link(uint64_t stream_seed) : rng_(stream_seed), ecn_rng_(derive_seed(stream_seed, ecn_stream, 0)) {}

  // The fate of a frame of `bytes` offered at `now`; updates the queue and every counter but
  // frames_delivered/bytes_delivered/corrupted and in-flight blackhole drops, which the network counts
  // when copies arrive, and ecn_marked, which it counts when the frame turns out to be ECT.
  Decision offer(size_t bytes, Nanos now, const LinkProfile& profile, bool path_down);

  // Bytes waiting for or in serialization at `now` (never earlier than the last offer).
  uint64_t queued_bytes(Nanos now);

  LinkStats& stats() { return stats_; }
  const LinkStats& stats() const { return stats_; }

 private:
  void drain(Nanos now);

  static constexpr uint64_t ecn_stream = 0x65636e;  // "ecn": any constant, so the stream is unrelated

  Rng rng_;
  Rng ecn_rng_;
  Nanos busy_until_ = 0;                                // when the serializer is free
  std::deque<std::pair<Nanos, uint64_t>> serializing_;  // (end of serialization, bytes), in order
  uint64_t queued_ = 0;
  LinkStats stats_;
};

// How long `bytes` occupy a link of `bandwidth` bytes per second, rounded up to a whole nanosecond.
inline Nanos serialization_time(uint64_t bytes, uint64_t bandwidth) {
  return bandwidth == 0 ? 0 : (bytes * 1'000'000'000ull + bandwidth - 1) / bandwidth;
}

}  // namespace uroce::sim
