// An outside opinion: the ARP, ICMP, neighbour discovery, IGMP and MLD frames we build, as Wireshark's
// dissectors decode them. Skipped (with a warning) when tshark is not installed.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "emulator/net/arp_frames.hpp"
#include "emulator/net/arp_responder.hpp"
#include "emulator/net/icmp.hpp"
#include "emulator/net/igmp.hpp"
#include "emulator/net/mld.hpp"
#include "emulator/net/nd_cache.hpp"
#include "emulator/net/nd_frames.hpp"
#include "emulator/net/nd_responder.hpp"
#include "net_test_support.hpp"

using namespace uroce::emulator::net;
using namespace uroce::emulator::net::test;

namespace {

void put_le32(std::ofstream& o, uint32_t v) {
  const char b[4] = {char(v), char(v >> 8), char(v >> 16), char(v >> 24)};
  o.write(b, 4);
}

// A classic pcap file (Ethernet link type) holding `frames`.
void write_pcap(const std::string& path, const std::vector<Bytes>& frames) {
  std::ofstream o(path, std::ios::binary);
  put_le32(o, 0xa1b2c3d4);
  put_le32(o, 0x00040002);  // version 2.4 (two little-endian 16-bit halves: major 2, minor 4)
  put_le32(o, 0);
  put_le32(o, 0);
  put_le32(o, 65535);
  put_le32(o, 1);
  uint32_t second = 1;
  for (const Bytes& f : frames) {
    put_le32(o, second++);
    put_le32(o, 0);
    put_le32(o, uint32_t(f.size()));
    put_le32(o, uint32_t(f.size()));
    o.write(reinterpret_cast<const char*>(f.data()), std::streamsize(f.size()));
  }
}

// tshark's fields for each frame, one line per frame, fields separated by '|'. A checksum status of 1 means
// "Good".
std::vector<std::string> tshark_fields(const std::string& pcap, const std::string& fields) {
  const std::string cmd = "tshark -o ip.check_checksum:TRUE -r " + pcap +
                          " -T fields -E separator='|' -E occurrence=a " + fields + " 2>/dev/null";
  std::vector<std::string> lines;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return lines;
  char buf[4096];
  while (fgets(buf, sizeof buf, p) != nullptr) {
    std::string line(buf);
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    lines.push_back(line);
  }
  pclose(p);
  return lines;
}

// The same for `frames`, written to a temporary capture that is removed afterwards.
std::vector<std::string> tshark_fields_of(const std::vector<Bytes>& frames, const std::string& fields) {
  static int n = 0;
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("uroce_net_tshark_" + std::to_string(getpid()) + "_" + std::to_string(n++) + ".pcap"))
                               .string();
  write_pcap(path, frames);
  auto lines = tshark_fields(path, fields);
  std::filesystem::remove(path);
  return lines;
}

bool have_tshark() { return std::system("command -v tshark >/dev/null 2>&1") == 0; }

}  // namespace

TEST_CASE("tshark decodes our ARP reply, gratuitous ARP and ICMP echo reply as intended", "[tshark]") {
  if (!have_tshark()) {
    WARN("tshark not installed: comparison skipped");
    return;
  }
  PortAddresses port = test_port();
  NetCounters counters;
  ArpCache cache(port, counters);
  ArpResponder arp(port, cache, counters);
  IcmpEchoResponder icmp(our_mac, counters);
  ArpOutput released;

  std::vector<Bytes> frames;
  Bytes buf(2000);
  const Bytes request = arp_frame({}, MacAddress::broadcast(), 0x200a);
  frames.emplace_back(buf.begin(),
                      buf.begin() + std::ptrdiff_t(arp.on_frame(classify(request, on_vlan_of(request, port)), 0, buf, released)));
  frames.emplace_back(buf.begin(), buf.begin() + std::ptrdiff_t(write_gratuitous_arp(buf, our_mac, our_ip2, {})));
  const Bytes ping = echo_request_frame(57);
  frames.emplace_back(buf.begin(), buf.begin() + std::ptrdiff_t(icmp.on_frame(ping, classify(ping, on_vlan_of(ping, port)), buf)));
  for (const Bytes& f : frames) REQUIRE_FALSE(f.empty());

  const auto lines = tshark_fields_of(
      frames, "-e eth.dst -e eth.src -e vlan.id -e arp.opcode -e arp.src.hw_mac -e arp.src.proto_ipv4 "
            "-e arp.dst.hw_mac -e arp.dst.proto_ipv4 -e arp.isgratuitous -e ip.src -e ip.dst "
            "-e ip.checksum.status -e icmp.type -e icmp.code -e icmp.checksum.status -e icmp.ident "
            "-e icmp.seq -e data.len -e _ws.malformed -e _ws.expert.severity");
  REQUIRE(lines.size() == 3);
  CHECK(lines[0] ==
        "02:00:00:00:00:02|02:00:00:00:00:01|10|2|02:00:00:00:00:01|10.0.0.1|02:00:00:00:00:02|10.0.0.2||||||||||||");
  CHECK(lines[1] == "ff:ff:ff:ff:ff:ff|02:00:00:00:00:01||1|02:00:00:00:00:01|192.168.1.1|00:00:00:00:00:00|"
                    "192.168.1.1|1|||||||||||");
  CHECK(lines[2] == "02:00:00:00:00:02|02:00:00:00:00:01||||||||10.0.0.1|10.0.0.2|1|0|0|1|16962|7|57||");
}

TEST_CASE("tshark decodes our Neighbor Solicitation and Advertisements as intended, checksums good", "[tshark]") {
  if (!have_tshark()) {
    WARN("tshark not installed: comparison skipped");
    return;
  }
  PortAddresses port = test_port();
  NetCounters counters;
  NdCache cache(port, counters);
  NdResponder nd(port, cache, counters);
  NdOutput released;
  const auto v6 = [](const uint8_t* p) { return uroce::wire::IpAddress::from_v6_bytes(p); };

  std::vector<Bytes> frames;
  Bytes buf(max_nd_frame_size);
  // Our NS for fd00::2, the NA answering the peer's NS (the peer's NS too, built by hand), a DAD answer.
  frames.emplace_back(buf.begin(), buf.begin() + std::ptrdiff_t(write_neighbor_solicitation(
                                                    buf, our_mac, v6(our_ip6), v6(peer_ip6), std::nullopt)));
  const Bytes ns = peer_ns();
  frames.push_back(ns);
  frames.emplace_back(buf.begin(), buf.begin() + std::ptrdiff_t(nd.on_frame(classify(ns, on_vlan_of(ns, port)), 0, buf, released)));
  Nd dad;
  const auto group = solicited_ip6(our_ip6);
  const Bytes dad_ns = nd_frame(dad, unspecified_ip6, group.data(), mcast_mac(group.data()));
  frames.emplace_back(buf.begin(),
                      buf.begin() + std::ptrdiff_t(nd.on_frame(classify(dad_ns, on_vlan_of(dad_ns, port)), 0, buf, released)));
  for (const Bytes& f : frames) REQUIRE_FALSE(f.empty());

  const auto lines = tshark_fields_of(
      frames, "-e eth.dst -e ipv6.src -e ipv6.dst -e ipv6.hlim -e icmpv6.type -e icmpv6.code "
            "-e icmpv6.checksum.status -e icmpv6.nd.ns.target_address -e icmpv6.nd.na.target_address "
            "-e icmpv6.nd.na.flag.s -e icmpv6.nd.na.flag.o -e icmpv6.opt.linkaddr -e _ws.malformed "
            "-e _ws.expert.severity");
  REQUIRE(lines.size() == 4);
  CHECK(lines[0] == "33:33:ff:00:00:02|fd00::1|ff02::1:ff00:2|255|135|0|1|fd00::2||||02:00:00:00:00:01||");
  CHECK(lines[1] == "33:33:ff:00:00:01|fd00::2|ff02::1:ff00:1|255|135|0|1|fd00::1||||02:00:00:00:00:02||");
  CHECK(lines[2] == "02:00:00:00:00:02|fd00::1|fd00::2|255|136|0|1||fd00::1|1|1|02:00:00:00:00:01||");
  CHECK(lines[3] == "33:33:00:00:00:01|fd00::1|ff02::1|255|136|0|1||fd00::1|0|1|02:00:00:00:00:01||");
}

TEST_CASE("tshark decodes our ICMPv6 echo reply as ping -6 expects, checksum good", "[tshark][ipv6]") {
  if (!have_tshark()) {
    WARN("tshark not installed: comparison skipped");
    return;
  }
  PortAddresses port = test_port();
  NetCounters counters;
  IcmpEchoResponder icmp(our_mac, counters);
  const Bytes ping = echo6_request_frame(57, 0x0007);
  Bytes buf(2000);
  std::vector<Bytes> frames{ping};
  frames.emplace_back(buf.begin(), buf.begin() + std::ptrdiff_t(icmp.on_frame(ping, classify(ping, on_vlan_of(ping, port)), buf)));
  REQUIRE_FALSE(frames[1].empty());

  const auto lines = tshark_fields_of(
      frames, "-e eth.dst -e vlan.id -e ipv6.src -e ipv6.dst -e ipv6.hlim -e icmpv6.type -e icmpv6.code "
            "-e icmpv6.checksum.status -e icmpv6.echo.identifier -e icmpv6.echo.sequence_number -e data.len "
            "-e icmpv6.resp_to -e _ws.malformed -e _ws.expert.severity");
  REQUIRE(lines.size() == 2);
  CHECK(lines[0] == "02:00:00:00:00:01|7|fd00::2|fd00::1|64|128|0|1|0x6666|3|57|||");
  CHECK(lines[1] == "02:00:00:00:00:02|7|fd00::1|fd00::2|64|129|0|1|0x6666|3|57|1||");
}

TEST_CASE("tshark decodes our IGMPv2 report and leave: TTL 1, Router Alert, checksums good", "[tshark][igmp]") {
  if (!have_tshark()) {
    WARN("tshark not installed: comparison skipped");
    return;
  }
  // Through IgmpMembership, as the engine gets them: a join's report, then a leave, on a tagged port.
  const PortAddresses port = test_port(0x0064);
  NetCounters counters;
  IgmpMembership igmp(port, counters);
  IgmpOutput out;
  igmp.join(group_a, 0);
  igmp.poll(0, out);
  igmp.leave(group_a, 1);
  igmp.poll(1, out);
  REQUIRE(out.frames.size() == 2);

  const auto lines = tshark_fields_of(
      out.frames, "-e eth.dst -e eth.src -e vlan.id -e ip.src -e ip.dst -e ip.ttl -e ip.opt.type "
                  "-e ip.opt.ra -e ip.checksum.status -e igmp.version -e igmp.type -e igmp.checksum.status "
                  "-e igmp.maddr -e _ws.malformed -e _ws.expert.severity -e _ws.col.Info");
  REQUIRE(lines.size() == 2);
  CHECK(lines[0].starts_with("01:00:5e:01:02:03|02:00:00:00:00:01|100|10.0.0.1|224.1.2.3|1|148|0|1|2|0x16|1|"
                             "224.1.2.3|||"));
  CHECK(lines[1].starts_with("01:00:5e:00:00:02|02:00:00:00:00:01|100|10.0.0.1|224.0.0.2|1|148|0|1|2|0x17|1|"
                             "224.1.2.3|||"));
  // The summary's wording varies between Wireshark versions ("Membership Report group ..." in 4.0).
  CHECK_THAT(lines[0], Catch::Contains("Membership Report"));
  CHECK_THAT(lines[1], Catch::Contains("Leave Group"));
}

TEST_CASE("tshark decodes our MLDv1 report and done: hop limit 1, Router Alert, checksum good", "[tshark][mld]") {
  if (!have_tshark()) {
    WARN("tshark not installed: comparison skipped");
    return;
  }
  // Through MldMembership, as the engine gets them: a join's report, then a done, on a tagged port with a
  // link-local address; then a report from :: on a port without one.
  PortAddresses port = test_port(0x0064);
  port.ips.push_back(uroce::wire::IpAddress::from_v6_bytes(our_link_local));
  NetCounters counters;
  MldMembership mld(port, counters);
  MldOutput out;
  mld.join(uroce::wire::IpAddress::from_v6_bytes(group6), 0);
  mld.poll(0, out);
  mld.leave(uroce::wire::IpAddress::from_v6_bytes(group6), 1);
  mld.poll(1, out);
  MldMembership without_link_local(test_port(), counters);
  without_link_local.join(solicited_node_address(uroce::wire::IpAddress::from_v6_bytes(our_ip6)), 0);
  without_link_local.poll(0, out);
  REQUIRE(out.frames.size() == 3);

  const auto lines = tshark_fields_of(
      out.frames, "-e eth.dst -e eth.src -e vlan.id -e ipv6.src -e ipv6.dst -e ipv6.hlim -e ipv6.nxt "
                  "-e ipv6.opt.type -e ipv6.opt.router_alert -e icmpv6.type -e icmpv6.code "
                  "-e icmpv6.checksum.status -e icmpv6.mld.multicast_address -e _ws.malformed "
                  "-e _ws.expert.severity -e _ws.col.Info");
  // Hop limit 1, next header 0 (Hop-by-Hop) with options Router Alert (5, value 0: MLD) and PadN (1), then
  // type 131 or 132 with a good checksum; nothing malformed, no expert warning.
  const std::vector<std::string> expected{
      "33:33:00:00:12:34|02:00:00:00:00:01|100|fe80::1|ff0e::1234|1|0|0x05,0x01|0|131|0|1|ff0e::1234|||",
      "33:33:00:00:00:02|02:00:00:00:00:01|100|fe80::1|ff02::2|1|0|0x05,0x01|0|132|0|1|ff0e::1234|||",
      "33:33:ff:00:00:01|02:00:00:00:00:01||::|ff02::1:ff00:1|1|0|0x05,0x01|0|131|0|1|ff02::1:ff00:1|||",
  };
  REQUIRE(lines.size() == expected.size());
  for (size_t i = 0; i < expected.size(); ++i) CHECK(lines[i].starts_with(expected[i]));
  CHECK_THAT(lines[0], Catch::Contains("Multicast Listener Report"));
  CHECK_THAT(lines[1], Catch::Contains("Multicast Listener Done"));
}
