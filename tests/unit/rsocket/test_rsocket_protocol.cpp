// The rsocket wire format against bytes laid out by hand from librdmacm's struct rs_conn_data (htons,
// htonl and htonll fields in declaration order) and its immediate-data encoding: what uroce's rsockets
// must put in a REQ/REP and in each WRITE WITH IMMEDIATE for the real library to understand them.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <utility>
#include <vector>

#include "verbs_shim/rsocket/protocol.hpp"

using namespace uroce::rsocket;

TEST_CASE("rsocket ConnData: 40 big-endian bytes in librdmacm's field order", "[rsocket]") {
  ConnData c;
  c.flags = kConnFlagIoMap;
  c.credits = 384;
  c.target_iomap_size = 0x81;
  c.target_sgl = {0x00007f1122334450ULL, 0x00001234, 2};
  c.data_buf = {0x00007f5566778800ULL, 0xabcdef01, 65536};
  const auto bytes = encode(c);
  const std::vector<uint8_t> expected = {
      0x01, 0x02, 0x01, 0x80, 0x00, 0x00, 0x00, 0x81,                  // version, flags, credits, reserved, iomap
      0x00, 0x00, 0x7f, 0x11, 0x22, 0x33, 0x44, 0x50,                  // target_sgl.addr
      0x00, 0x00, 0x12, 0x34, 0x00, 0x00, 0x00, 0x02,                  // .key, .length
      0x00, 0x00, 0x7f, 0x55, 0x66, 0x77, 0x88, 0x00,                  // data_buf.addr
      0xab, 0xcd, 0xef, 0x01, 0x00, 0x01, 0x00, 0x00};                 // .key, .length
  CHECK(std::vector<uint8_t>(bytes.begin(), bytes.end()) == expected);

  const auto back = decode(bytes.data(), bytes.size());
  REQUIRE(back);
  CHECK(back->version == 1);
  CHECK(back->flags == kConnFlagIoMap);
  CHECK(back->credits == 384);
  CHECK(back->target_iomap_size == 0x81);
  CHECK(back->target_sgl.addr == c.target_sgl.addr);
  CHECK(back->target_sgl.key == c.target_sgl.key);
  CHECK(back->target_sgl.length == 2);
  CHECK(back->data_buf.addr == c.data_buf.addr);
  CHECK(back->data_buf.key == c.data_buf.key);
  CHECK(back->data_buf.length == 65536);
}

TEST_CASE("rsocket ConnData: short private data is refused, a REQ's 56 bytes are read", "[rsocket]") {
  std::vector<uint8_t> req(56, 0);
  req[0] = 1;
  CHECK_FALSE(decode(req.data(), 39));
  CHECK_FALSE(decode(nullptr, 56));
  const auto c = decode(req.data(), req.size());
  REQUIRE(c);
  CHECK(c->version == 1);
  req[0] = 2;  // another version is reported as found; the caller refuses it
  CHECK(decode(req.data(), req.size())->version == 2);
}

TEST_CASE("rsocket immediate data: op in the top three bits, 29 bits of data", "[rsocket]") {
  CHECK(message(Op::data, 4096) == 0x00001000u);
  CHECK(message(Op::sgl, 0x1234) == 0x80001234u);
  CHECK(message(Op::iomap_sgl, 3) == 0xC0000003u);
  CHECK(message(Op::ctrl, uint32_t(Ctrl::disconnect)) == 0xE0000000u);
  CHECK(message(Op::ctrl, uint32_t(Ctrl::shutdown)) == 0xE0000002u);
  CHECK(op_of(0xE0000001u) == Op::ctrl);
  CHECK(Ctrl(data_of(0xE0000001u)) == Ctrl::keepalive);
  CHECK(op_of(0x1FFFFFFFu) == Op::data);
  CHECK(data_of(0x1FFFFFFFu) == 0x1FFFFFFFu);
  CHECK(message(Op::data, 0x20000000u) == 0u);  // data beyond 29 bits cannot leak into the op
}

TEST_CASE("rsocket iomap size scale: exact up to 128, then 256-entry steps", "[rsocket]") {
  CHECK(to_scale(0, 8) == 0);
  CHECK(to_scale(1, 8) == 1);
  CHECK(to_scale(128, 8) == 128);
  CHECK(to_scale(512, 8) == (0x80 | 2));
  CHECK(from_scale(0x82, 8) == 512);
  CHECK(from_scale(to_scale(128, 8), 8) == 128);
  CHECK(from_scale(to_scale(300, 8), 8) == 256);  // rounded down to what the byte can say
}

TEST_CASE("rsocket datagram header: librdmacm's ds_header, 8 bytes for IPv4 and 24 for IPv6", "[rsocket]") {
  DatagramHeader h4;
  h4.version = 4;
  h4.port = 7174;
  h4.address = {192, 0, 2, 1};
  std::array<uint8_t, kDatagramHeaderV4> b4{};
  encode(h4, b4.data());
  // version, length, port (big-endian: 7174 = 0x1C06), the address in network order.
  CHECK(b4 == std::array<uint8_t, 8>{4, 8, 0x1C, 0x06, 192, 0, 2, 1});
  const auto d4 = decode_datagram_header(b4.data(), b4.size());
  REQUIRE(d4);
  CHECK(d4->version == 4);
  CHECK(d4->port == 7174);
  CHECK(std::equal(b4.begin() + 4, b4.end(), d4->address.begin()));

  DatagramHeader h6;
  h6.version = 6;
  h6.port = 0xBEEF;
  h6.flowinfo = 0x000ABCDE;
  for (size_t i = 0; i < 16; ++i) h6.address[i] = uint8_t(0xF0 + i);
  std::array<uint8_t, kDatagramHeaderV6> b6{};
  encode(h6, b6.data());
  CHECK(b6[0] == 6);
  CHECK(b6[1] == 24);
  CHECK(b6[2] == 0xBE);
  CHECK(b6[3] == 0xEF);
  CHECK(std::array<uint8_t, 4>{b6[4], b6[5], b6[6], b6[7]} == std::array<uint8_t, 4>{0x00, 0x0A, 0xBC, 0xDE});
  CHECK(b6[8] == 0xF0);
  CHECK(b6[23] == 0xFF);
  const auto d6 = decode_datagram_header(b6.data(), b6.size());
  REQUIRE(d6);
  CHECK(d6->port == 0xBEEF);
  CHECK(d6->flowinfo == 0x000ABCDE);
  CHECK(d6->address == h6.address);
}

TEST_CASE("rsocket datagram header: a wrong version, length or size is refused", "[rsocket]") {
  const std::array<uint8_t, 24> v6{6, 24};
  CHECK(decode_datagram_header(v6.data(), 24));
  CHECK_FALSE(decode_datagram_header(v6.data(), 23));  // IPv6 needs all 24 bytes
  CHECK_FALSE(decode_datagram_header(v6.data(), 7));
  CHECK_FALSE(decode_datagram_header(nullptr, 24));
  for (const auto& [version, length] : {std::pair{4, 24}, std::pair{6, 8}, std::pair{5, 8}, std::pair{0, 0}}) {
    const std::array<uint8_t, 24> b{uint8_t(version), uint8_t(length)};
    INFO("version " << version << " length " << length);
    CHECK_FALSE(decode_datagram_header(b.data(), b.size()));
  }
}
