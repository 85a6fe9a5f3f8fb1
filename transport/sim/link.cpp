#include "transport/sim/link.hpp"

#include <algorithm>

namespace uroce::sim {

LinkStats& LinkStats::operator+=(const LinkStats& o) {
  frames_sent += o.frames_sent;
  bytes_sent += o.bytes_sent;
  frames_delivered += o.frames_delivered;
  bytes_delivered += o.bytes_delivered;
  dropped_loss += o.dropped_loss;
  dropped_queue_full += o.dropped_queue_full;
  dropped_blackhole += o.dropped_blackhole;
  duplicated += o.duplicated;
  corrupted += o.corrupted;
  max_queue_bytes = std::max(max_queue_bytes, o.max_queue_bytes);
  ecn_marked += o.ecn_marked;
  return *this;
}

double ecn_mark_probability(const LinkProfile& profile, uint64_t queued) {
  if (profile.ecn_kmin == 0 || profile.bandwidth == 0 || queued < profile.ecn_kmin) return 0;
  if (queued >= profile.ecn_kmax) return 1;  // also the step, when kmax <= kmin
  return profile.ecn_pmax * double(queued - profile.ecn_kmin) / double(profile.ecn_kmax - profile.ecn_kmin);
}

void Link::drain(Nanos now) {
  while (!serializing_.empty() && serializing_.front().first <= now) {
    queued_ -= serializing_.front().second;
    serializing_.pop_front();
  }
}

uint64_t Link::queued_bytes(Nanos now) {
  drain(now);
  return queued_;
}

Link::Decision Link::offer(size_t bytes, Nanos now, const LinkProfile& profile, bool path_down) {
  // Drawn up front and always in full: see the header on why every frame costs the same draws.
  enum { loss, dup, corrupt0, bit0, jitter0, corrupt1, bit1, jitter1, draw_count };
  uint64_t draw[draw_count];
  for (uint64_t& d : draw) d = rng_.next();
  const uint64_t ecn_draw = ecn_rng_.next();

  Decision d;
  ++stats_.frames_sent;
  stats_.bytes_sent += bytes;
  if (path_down) {
    ++stats_.dropped_blackhole;
    d.drop = DropReason::blackhole;
    return d;
  }

  drain(now);
  if (profile.queue_limit != 0 && queued_ + bytes > profile.queue_limit) {
    ++stats_.dropped_queue_full;
    d.drop = DropReason::queue_full;
    return d;
  }
  // At enqueue, on the queue the frame finds (itself not counted), as a switch's egress marks.
  d.ecn_mark = Rng::chance(ecn_draw, ecn_mark_probability(profile, queued_));
  const Nanos start = std::max(now, busy_until_);
  const Nanos sent = start + serialization_time(bytes, profile.bandwidth);
  busy_until_ = sent;
  if (sent > now) {
    serializing_.emplace_back(sent, bytes);
    queued_ += bytes;
    stats_.max_queue_bytes = std::max(stats_.max_queue_bytes, queued_);
  }

  // Lost after the queue: a frame that is lost on the wire still took its share of the bandwidth.
  if (Rng::chance(draw[loss], profile.loss)) {
    ++stats_.dropped_loss;
    d.drop = DropReason::loss;
    return d;
  }
  d.copies = Rng::chance(draw[dup], profile.duplicate) ? 2 : 1;
  if (d.copies == 2) ++stats_.duplicated;
  const uint64_t per_copy[2][3] = {{draw[corrupt0], draw[bit0], draw[jitter0]},
                                   {draw[corrupt1], draw[bit1], draw[jitter1]}};
  for (unsigned i = 0; i < d.copies; ++i) {
    Copy& c = d.copy[i];
    c.arrival = sent + profile.delay + (profile.jitter ? Rng::up_to(per_copy[i][2], profile.jitter) : 0);
    c.corrupt = Rng::chance(per_copy[i][0], profile.corrupt);
    c.corrupt_draw = per_copy[i][1];
  }
  return d;
}

}  // namespace uroce::sim
