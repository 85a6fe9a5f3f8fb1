#include "idle_poll.hpp"

#include <sched.h>

#include <charconv>
#include <cstdlib>
#include <cstring>

namespace uroce::shim {

namespace {

constexpr unsigned default_threshold = 64;

unsigned read_threshold() {
  const char* v = std::getenv("UROCE_POLL_YIELD");
  if (v == nullptr || *v == '\0') return default_threshold;
  unsigned n = 0;
  const char* end = v + std::strlen(v);
  const auto [p, ec] = std::from_chars(v, end, n);
  return ec == std::errc{} && p == end ? n : default_threshold;  // not a number: the default
}

// How many empty polls in a row make a yield (0: never), read once.
unsigned poll_yield_threshold() {
  static const unsigned threshold = read_threshold();
  return threshold;
}

}  // namespace

void note_poll(bool found) {
  // Per thread: a thread polling two CQs (a send and a receive CQ) is idle only if both are empty.
  thread_local unsigned empty = 0;
  if (found) {
    empty = 0;
    return;
  }
  const unsigned threshold = poll_yield_threshold();
  if (threshold != 0 && ++empty >= threshold) {
    empty = 0;
    sched_yield();
  }
}

}  // namespace uroce::shim
