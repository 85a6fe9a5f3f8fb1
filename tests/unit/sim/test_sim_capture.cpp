// The capture hook and the pcap writer: what a failing property test leaves behind must be a valid pcap
// with the virtual time as timestamps.
#include <catch2/catch.hpp>

#include <pcap/pcap.h>

#include <unistd.h>

#include <filesystem>
#include <map>

#include "sim_test_support.hpp"
#include "transport/sim/pcap_writer.hpp"

using namespace uroce;
using namespace uroce::sim;
using namespace uroce::sim::test;

namespace {

struct TempFile {
  std::filesystem::path path;
  explicit TempFile(const char* name)
      : path(std::filesystem::temp_directory_path() /
             (std::string(name) + "-" + std::to_string(::getpid()) + ".pcap")) {}
  ~TempFile() { std::filesystem::remove(path); }
};

struct PcapRecord {
  Nanos time;
  std::vector<uint8_t> bytes;
};

std::vector<PcapRecord> read_pcap(const std::filesystem::path& path, int& linktype) {
  char err[PCAP_ERRBUF_SIZE];
  pcap_t* p = pcap_open_offline_with_tstamp_precision(path.c_str(), PCAP_TSTAMP_PRECISION_NANO, err);
  REQUIRE(p != nullptr);
  linktype = pcap_datalink(p);
  std::vector<PcapRecord> out;
  pcap_pkthdr* h;
  const u_char* data;
  while (pcap_next_ex(p, &h, &data) == 1) {
    REQUIRE(h->caplen == h->len);
    out.push_back({Nanos(h->ts.tv_sec) * 1'000'000'000 + Nanos(h->ts.tv_usec), {data, data + h->caplen}});
  }
  pcap_close(p);
  return out;
}

}  // namespace

TEST_CASE("a pcap of delivered frames reads back with virtual timestamps", "[sim][capture]") {
  TempFile file("uroce-sim-capture");
  Pair p(8);
  LinkProfile prof;
  prof.delay = 1500;
  prof.corrupt = 0.3;
  p.net.set_default_profile(prof);
  p.b.echo_sends = true;
  p.a.stream(to(p.b_ip), 7, 400'000'001, 6);  // spans seconds: tests the seconds/nanoseconds split
  {
    PcapWriter w(file.path.string());
    p.net.set_capture(w.hook());
    REQUIRE(p.net.run_until_idle(never));
    p.net.set_capture({});
    CHECK(w.frames_written() == p.a.received.size() + p.b.received.size());
  }
  int linktype = 0;
  const auto recs = read_pcap(file.path, linktype);
  CHECK(linktype == DLT_EN10MB);
  REQUIRE(recs.size() == 6 + p.a.received.size());
  // The file interleaves both directions in delivery order.
  std::vector<PcapRecord> expected;
  size_t ia = 0, ib = 0;
  while (ia < p.a.received.size() || ib < p.b.received.size()) {
    const bool take_b = ia == p.a.received.size() ||
                        (ib < p.b.received.size() && p.b.received[ib].at <= p.a.received[ia].at);
    const Received& r = take_b ? p.b.received[ib++] : p.a.received[ia++];
    expected.push_back({r.at, r.bytes});
  }
  for (size_t i = 0; i < recs.size(); ++i) {
    CHECK(recs[i].time == expected[i].time);
    CHECK(recs[i].bytes == expected[i].bytes);
  }
  CHECK(recs.back().time > 2'000'000'000);
  CHECK(p.net.stats().links.corrupted > 0);  // corrupted frames are captured as the receiver got them
}

TEST_CASE("the hook sees transmissions, deliveries and drops with reasons", "[sim][capture]") {
  Pair p(9);
  LinkProfile prof;
  prof.delay = 10;
  prof.loss = 0.2;
  prof.duplicate = 0.2;
  p.net.set_default_profile(prof);
  std::map<CapturePoint, uint64_t> count;
  std::map<DropReason, uint64_t> reasons;
  Nanos last = 0;
  bool ordered = true;
  p.net.set_capture([&](const CaptureEvent& e) {
    ++count[e.point];
    if (e.point == CapturePoint::dropped) ++reasons[e.reason];
    if (e.time < last) ordered = false;
    last = e.time;
    CHECK(e.from == p.na);
    CHECK(e.to == p.nb);
  });
  p.a.stream(to(p.b_ip), 0, 5, 2000);
  REQUIRE(p.net.run_until_idle(never));
  const LinkStats s = p.net.link_stats(p.na, p.nb);
  CHECK(ordered);
  CHECK(count[CapturePoint::transmitted] == 2000);
  CHECK(count[CapturePoint::delivered] == s.frames_delivered);
  CHECK(count[CapturePoint::dropped] == s.dropped_loss);
  CHECK(reasons[DropReason::loss] == s.dropped_loss);
  CHECK(s.dropped_loss > 0);

  TempFile file("uroce-sim-capture-tx");
  {
    PcapWriter w(file.path.string());
    p.net.set_capture(w.hook({CapturePoint::transmitted, CapturePoint::dropped}));
    p.a.stream(to(p.b_ip), p.net.now(), 5, 100);
    REQUIRE(p.net.run_until_idle(never));
    w.flush();
    const LinkStats s2 = p.net.link_stats(p.na, p.nb);
    CHECK(w.frames_written() == 100 + (s2.dropped_loss - s.dropped_loss));
  }
  int linktype = 0;
  CHECK(read_pcap(file.path, linktype).size() > 100);
}

TEST_CASE("a pcap that cannot be created is an exception", "[sim][capture]") {
  CHECK_THROWS_AS(PcapWriter("/nonexistent-dir/x.pcap"), std::runtime_error);
}
