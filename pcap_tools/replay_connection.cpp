#include "pcap_tools/replay_connection.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "transport/wire/build.hpp"
#include "transport/wire/opcode.hpp"

namespace uroce::pcap_tools {

namespace {

bool is_first_or_middle(const wire::OpcodeInfo& info) {
  return info.position == wire::Position::first || info.position == wire::Position::middle;
}

void widen_region(ReplayConnection& k, uint32_t rkey, uint64_t va, uint64_t len) {
  if (len == 0 || va > ~uint64_t(0) - len) return;  // nothing to reach, or a range past the address space
  auto [r, fresh] = k.regions.try_emplace(rkey, va, va + len);
  if (!fresh) {
    r->second.first = std::min(r->second.first, va);
    r->second.second = std::max(r->second.second, va + len);
  }
}

void note_request(ReplayConnection& k, const wire::Frame& f, uint64_t& send_bytes) {
  const wire::OpcodeInfo& info = *f.roce.info;
  const auto& h = f.roce.headers;
  if (info.has(wire::hdr_reth)) widen_region(k, h.reth.rkey, h.reth.va, h.reth.dma_length);
  if (info.has(wire::hdr_atomic_eth)) widen_region(k, h.atomic_eth.rkey, h.atomic_eth.va, 8);
  if (is_first_or_middle(info)) k.path_mtu = std::max<uint32_t>(k.path_mtu, uint32_t(f.roce.payload.size()));
  if (info.operation == wire::Operation::send) {
    if (info.position == wire::Position::first || info.position == wire::Position::only) send_bytes = 0;
    send_bytes += f.roce.payload.size();
    k.largest_send = std::max(k.largest_send, send_bytes);
  }
}

// The requester's QPN is the destination of the responder's answers: the first answer, between the same
// hosts, whose PSN is one of this connection's requests (two connections may join the same hosts).
void learn_requester_qpn(ReplayConnection& k, const FrameBytes& frames) {
  std::set<uint32_t> psns;
  for (const auto& bytes : frames) {
    wire::Frame f;
    if (!parse_rc(bytes, f)) continue;
    const auto& bth = f.roce.bth();
    if (f.roce.info->is_request && f.src_ip() == k.requester && bth.dest_qp == k.responder_qpn) {
      psns.insert(bth.psn);
    } else if (!f.roce.info->is_request && f.src_ip() == k.responder && f.dst_ip() == k.requester &&
               psns.contains(bth.psn)) {
      k.requester_qpn = bth.dest_qp;
      return;
    }
  }
}

// READ responses show the path MTU too, in their FIRST and MIDDLE packets.
void learn_mtu_from_answers(ReplayConnection& k, const FrameBytes& frames) {
  for (const auto& bytes : frames) {
    wire::Frame f;
    if (!parse_rc(bytes, f) || f.roce.info->is_request || !is_first_or_middle(*f.roce.info)) continue;
    if (is_answer_to(f, k)) k.path_mtu = std::max<uint32_t>(k.path_mtu, uint32_t(f.roce.payload.size()));
  }
}

std::optional<verbs::Mtu> mtu_of(uint32_t bytes) {
  for (verbs::Mtu m : {verbs::Mtu::mtu_256, verbs::Mtu::mtu_512, verbs::Mtu::mtu_1024, verbs::Mtu::mtu_2048,
                       verbs::Mtu::mtu_4096}) {
    if (verbs::mtu_bytes(m) == bytes) return m;
  }
  return std::nullopt;
}

}  // namespace

bool parse_rc(const std::vector<uint8_t>& bytes, wire::Frame& f) {
  return wire::parse_frame(bytes, f) == wire::ParseError::none && f.is_roce() &&
         f.roce.info->transport == wire::Transport::rc;
}

bool is_request_of(const wire::Frame& f, const ReplayConnection& k) {
  return f.roce.info->is_request && f.src_ip() == k.requester && f.dst_ip() == k.responder &&
         f.roce.bth().dest_qp == k.responder_qpn;
}

bool is_answer_to(const wire::Frame& f, const ReplayConnection& k) {
  return !f.roce.info->is_request && f.src_ip() == k.responder && f.dst_ip() == k.requester &&
         f.roce.bth().dest_qp == k.requester_qpn;
}

bool add_rebuilt(FrameBytes& frames, const wire::Frame& f) {
  const wire::FrameSpec spec = wire::spec_from_frame(f);
  std::vector<uint8_t> out(wire::frame_size(spec));
  const wire::BuildResult b = wire::build_frame(spec, out);
  if (!b.ok()) return false;
  out.resize(b.size);
  frames.push_back(std::move(out));
  return true;
}

std::vector<ReplayConnection> rc_connections(const FrameBytes& frames) {
  std::vector<ReplayConnection> out;
  std::vector<uint64_t> send_bytes;  // per connection: the SEND message in progress
  for (const auto& bytes : frames) {
    wire::Frame f;
    if (!parse_rc(bytes, f) || !f.roce.info->is_request) continue;
    const uint32_t qpn = f.roce.bth().dest_qp;
    auto it = std::find_if(out.begin(), out.end(), [&](const ReplayConnection& k) {
      return k.requester == f.src_ip() && k.responder == f.dst_ip() && k.responder_qpn == qpn;
    });
    if (it == out.end()) {
      ReplayConnection k;
      k.requester = f.src_ip();
      k.responder = f.dst_ip();
      k.responder_qpn = qpn;
      k.first_psn = f.roce.bth().psn;
      out.push_back(k);
      send_bytes.push_back(0);
      it = out.end() - 1;
    }
    note_request(*it, f, send_bytes[size_t(it - out.begin())]);
  }
  for (ReplayConnection& k : out) {
    learn_requester_qpn(k, frames);
    learn_mtu_from_answers(k, frames);
  }
  return out;
}

std::optional<verbs::Mtu> replay_mtu(const ReplayConnection& k, uint32_t default_mtu, std::string& error) {
  const uint32_t bytes = k.path_mtu != 0 ? k.path_mtu : default_mtu;
  const auto mtu = mtu_of(bytes);
  if (!mtu) error = fmt::format("packets of {} bytes in the middle of messages: not a path MTU (256 to 4096)", bytes);
  return mtu;
}

}  // namespace uroce::pcap_tools
