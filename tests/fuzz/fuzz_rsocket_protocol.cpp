// libFuzzer target: the rsocket wire formats a peer controls (verbs_shim/rsocket/protocol.hpp): the ConnData
// in a REQ or REP's private data, and the header at the front of every datagram a datagram rsocket
// receives. Any bytes: no crash, no read past the input, and what decodes encodes back to the same bytes.
#include <cstdint>
#include <cstring>
#include <vector>

#include "verbs_shim/rsocket/protocol.hpp"

using namespace uroce::rsocket;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A copy of exactly `size` bytes, so that ASan sees any read past the end.
  const std::vector<uint8_t> in(data, data + size);
  if (const auto c = decode(in.data(), in.size())) {
    const auto out = encode(*c);
    // Bytes 4-6 are reserved (sent as zero, ignored when read); every other byte must come back.
    for (size_t i = 0; i < out.size(); ++i) {
      if (i >= 4 && i < 7) continue;
      if (out[i] != in[i]) __builtin_trap();
    }
  }
  if (const auto h = decode_datagram_header(in.data(), in.size())) {
    if (h->size() > in.size()) __builtin_trap();
    uint8_t out[kDatagramHeaderV6];
    encode(*h, out);
    if (std::memcmp(out, in.data(), h->size()) != 0) __builtin_trap();
  }
  return 0;
}
