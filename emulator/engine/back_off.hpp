// When the engine gives its core away: after each loop turn, poll again, nap, or sleep.
//
// On a machine with fewer cores than busy threads (uroced's engine, and a perftest server and client that
// both spin on their CQs: three on two cores) the engine shares its core with a client. Spinning there
// helps nobody: the client that is to post the next request or repost a receive waits for the CPU the
// engine is idling on, for a whole scheduler slice (milliseconds). So an idle engine naps. A nap is still
// "awake" to clients: they do not ring the wake eventfd for it (no system call). Only after doze_ns without
// work does the engine really sleep, with a timeout that doubles up to max_sleep_ns, telling clients to wake
// it (docs/daemon.md).
//
// A nap is a sched_yield(), with no spin before it: the core goes to whoever waits for it, for as long as
// that thread has work, and comes straight back if nobody does (a yield that finds nobody costs about one
// system call). With the verbs shim's polls yielding in turn when they find nothing
// (verbs_shim/idle_poll.hpp), the threads that share a core hand it to each other when they run out of
// work instead of at the end of a slice; measured on the 2-core VM, that cut ib_send_lat from 20 to 4-5 us
// on the loopback port and from 66-72 to 10-18 us between two daemons (docs/daemon.md). The cost: a
// neighbour that spins without ever polling a CQ (ib_write_lat watches its buffer for the peer's WRITE)
// keeps a yielded core until the next scheduler tick, so ib_write_lat's p99 is 2 ms in some runs on the
// loopback port and over memif (its median is 2.5-10 us). The engine counts those slow yields.
//
// The other kind of nap (yield_naps false, --nap sleep) is a timed sleep of nap_ns after a short spin,
// during which the client on the engine's core runs, and from which the timer brings the engine back ahead
// of it (a thread that sleeps often is owed CPU time, so the scheduler lets it preempt). It costs tens of
// microseconds of reaction time: 20 us on the loopback, 65 us of each round trip between two daemons (1 ms
// with 2-5 us naps, which leave the engine owed nothing). Using timed naps only once yields came back
// slowly was tried, and lost more than it won.
//
// A busy engine can starve its neighbour too: fed by a client on the other core, it may never be idle, and
// the server next to it stops reposting receives (perftest's ib_send_bw then ran into RNR NAKs, 0.64 ms
// each). Two signs make a busy engine nap:
// - A receiver ran low: the transport saw a QP's receive queue fall to half of what its application keeps
//   posted (transport::Device::take_low_receive_queues). Its application is most likely waiting for a
//   core, maybe this one, and its senders are about to be sent RNR NAKs: the engine naps at once. This is
//   what stopped the RNR storms (ib_send_bw 64 B with the server on the engine's core: 1.0-1.1 M/s and
//   160-200 RNR NAKs a run before, 2.2-3.3 M/s and none after).
// - It was preempted: a turn that starts long after the previous one, with no nap or sleep between. For a
//   while after that (share_ns) it naps after every busy_slice_ns of work as well.
//
// Pure logic with the time passed in, unit-tested.
#pragma once

#include <cstdint>

#include "transport/packet_io.hpp"

namespace uroce::emulator::engine {

// The defaults were measured on this project's 2-core VM (docs/daemon.md): naps much shorter than 20 us
// cost more in context switches than they give the client, and the engine that takes too much of its core
// loses its priority at wake-up; a 1-ms doze keeps clients from ringing while they are merely busy.
struct BackOffConfig {
  uint64_t spin_ns = 5'000;              // idle time spent polling before the first timed nap
  uint64_t nap_ns = 20'000;              // one nap; 0: no naps, poll until doze_ns
  bool yield_naps = true;                // a nap is a sched_yield() (see below); false: always timed
  uint64_t slow_yield_ns = 500'000;      // a yield that kept the engine away this long is a slow one
  uint64_t doze_ns = 1'000'000;          // idle time (spin and naps) before the first real sleep
  uint64_t max_sleep_ns = 500'000;       // the longest sleep; a received frame waits at most this long
  uint64_t in_flight_sleep_ns = 20'000;  // the longest sleep while transport timers run (traffic in flight)
  uint64_t preempted_ns = 1'000'000;     // two turns this far apart (no nap between): the core is shared
  uint64_t share_ns = 10'000'000'000;    // how long the engine then behaves as sharing its core
  uint64_t busy_slice_ns = 100'000;      // sharing, the longest run of work between two naps
};

class BackOff {
 public:
  enum class Kind { poll, nap, sleep };
  struct Step {
    Kind kind = Kind::poll;
    uint64_t timeout_ns = 0;  // nap and sleep
    bool yield = false;       // a nap: sched_yield() rather than a timed sleep of timeout_ns
  };

  explicit BackOff(BackOffConfig config = {}) : config_(config) {}

  // A turn that started at `now` did something; `receiver_starving`: a receive queue ran low in it.
  Step busy(transport::Nanos now, bool receiver_starving = false);
  // A turn that started at `now` found nothing. `deadline`: the next timer (transport or ARP),
  // transport::never if none; `in_flight`: a transport timer runs, an answer is due within microseconds.
  Step idle(transport::Nanos now, transport::Nanos deadline, bool in_flight);
  // The nap or sleep a Step asked for is over: the time it took is no sign of preemption.
  void rested() {
    last_turn_ = 0;
    busy_since_ = 0;
  }
  // A yield (Step::yield) that began at `before` returned at `after`. True if it was a slow one.
  bool yielded(transport::Nanos before, transport::Nanos after) {
    rested();
    return after - before >= config_.slow_yield_ns;
  }

  bool sharing(transport::Nanos now) const { return now < sharing_until_; }
  const BackOffConfig& config() const { return config_; }

 private:
  void note_turn(transport::Nanos now);

  BackOffConfig config_;
  transport::Nanos idle_since_ = 0;   // first turn of the current idle period (0: busy)
  transport::Nanos busy_since_ = 0;   // first busy turn since the last nap or sleep
  transport::Nanos last_turn_ = 0;    // start of the previous turn (0: none, or a nap or sleep came after)
  transport::Nanos sharing_until_ = 0;
  uint64_t sleep_ns_ = 0;
};

}  // namespace uroce::emulator::engine
