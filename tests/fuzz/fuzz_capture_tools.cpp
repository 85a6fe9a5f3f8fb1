// libFuzzer target: arbitrary frame sequences through `uroce check` (ConformanceChecker) and `uroce replay`
// on both sides (rc_connections; replay_responder and both comparisons; replay_requester, its comparison
// and the description of every difference), the two commands that keep state across the frames of a
// capture. The input is a sequence of frames, each a 2-byte little-endian length and that many bytes
// (tests/fuzz/make_seed_corpus.py --sequences writes rxe's captures so). Beyond "no crash, no UB, no leak"
// (the sanitizers), it checks that an exact comparison of a replay with itself finds no difference, and
// that a requester replay that was skipped or refused sent nothing.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "pcap_tools/conformance.hpp"
#include "pcap_tools/requester_replay.hpp"
#include "pcap_tools/responder_replay.hpp"
#include "transport/wire/frame.hpp"

using namespace uroce;

namespace {

constexpr size_t max_connections = 4;  // each replay sets up a device: a few per input are enough

template <class T>
void describe_differences(const pcap_tools::SequenceComparison<T>& c) {
  for (const auto& d : c.differences) {
    if (d.uroce && d.captured && pcap_tools::what_differs(*d.uroce, *d.captured).empty()) std::abort();
  }
}

std::vector<std::span<const uint8_t>> split(const uint8_t* data, size_t size) {
  std::vector<std::span<const uint8_t>> frames;
  size_t off = 0;
  while (size - off >= 2) {
    const size_t len = size_t(data[off]) | size_t(data[off + 1]) << 8;
    off += 2;
    if (len > size - off) break;
    frames.emplace_back(data + off, len);
    off += len;
  }
  return frames;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  pcap_tools::ConformanceChecker checker;
  pcap_tools::FrameBytes roce;  // as `uroce replay` keeps them: RoCE frames, rebuilt (their ICRC made good)
  uint64_t n = 0;
  for (std::span<const uint8_t> bytes : split(data, size)) {
    wire::Frame f;
    wire::parse_frame(bytes, f);
    checker.add(++n, f);
    if (f.is_roce()) pcap_tools::add_rebuilt(roce, f);
  }
  const auto connections = pcap_tools::rc_connections(roce);
  for (size_t i = 0; i < connections.size() && i < max_connections; ++i) {
    const pcap_tools::ReplayResult r = pcap_tools::replay_responder(roce, connections[i]);
    if (!pcap_tools::compare_exact(r.got, r.got).same()) std::abort();
    pcap_tools::compare_exact(r.expected, r.got);
    pcap_tools::compare_lossy(r.expected, r.got);

    const pcap_tools::RequesterReplayResult q = pcap_tools::replay_requester(roce, connections[i]);
    if ((!q.skipped.empty() || !q.error.empty()) && !q.got.empty()) std::abort();
    if (!pcap_tools::compare_in_order(q.got, q.got).same()) std::abort();
    const pcap_tools::RequesterComparison cmp = pcap_tools::compare_requester(q);
    describe_differences(cmp.requests);
    describe_differences(cmp.completions);
  }
  return 0;
}
