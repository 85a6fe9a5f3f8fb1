// The CM state machine. Which message is accepted in which state, and what a duplicate gets, follows
// IBTA chapter 12.9 and what Linux's ib_cm does (a peer running Linux is the one to interoperate with).
#include "transport/cm/connection_manager.hpp"

#include <algorithm>
#include <cerrno>

namespace uroce::cm {

namespace {

template <class... F>
struct Overload : F... {
  using F::operator()...;
};
template <class... F>
Overload(F...) -> Overload<F...>;

CmEvent make_event(CmEventType type, uint32_t comm_id, const MadAddress& peer) {
  CmEvent e;
  e.type = type;
  e.comm_id = comm_id;
  e.peer = peer;
  return e;
}

// The IDs whose timer is due at `now` (connections or SIDR requests), collected before any fires: a timer
// may erase its entry.
template <class Map>
std::vector<uint32_t> due_at(const Map& entries, Nanos now) {
  std::vector<uint32_t> due;
  for (const auto& [id, e] : entries) {
    if (e.deadline <= now) due.push_back(id);
  }
  return due;
}

template <class Map>
Nanos earliest_deadline(const Map& entries) {
  Nanos t = never;
  for (const auto& [id, e] : entries) t = std::min(t, e.deadline);
  return t;
}

}  // namespace

ConnectionManager::ConnectionManager(MadSender& sender, CmConfig config)
    : sender_(sender), config_(config), next_comm_id_(config.first_comm_id) {}

int ConnectionManager::listen(uint64_t service_id) { return listening_.insert(service_id).second ? 0 : EADDRINUSE; }

void ConnectionManager::unlisten(uint64_t service_id) { listening_.erase(service_id); }

ConnectionManager::Connection* ConnectionManager::find(uint32_t comm_id) {
  const auto it = connections_.find(comm_id);
  return it == connections_.end() ? nullptr : &it->second;
}

// The SIDR request `comm_id` if it is one and on that side (active: ours; passive: a peer's), else nullptr.
ConnectionManager::SidrRequest* ConnectionManager::find_sidr(uint32_t comm_id, bool active) {
  const auto it = sidr_.find(comm_id);
  return it == sidr_.end() || it->second.active != active ? nullptr : &it->second;
}

const CmState* ConnectionManager::state(uint32_t comm_id) const {
  const auto it = connections_.find(comm_id);
  return it == connections_.end() ? nullptr : &it->second.state;
}

// SIDR requests take their IDs from the same space as connections (Linux: one cm_id table), so that a
// message naming an ID can never be about both.
uint32_t ConnectionManager::new_comm_id() {
  while (next_comm_id_ == 0 || connections_.contains(next_comm_id_) || sidr_.contains(next_comm_id_)) ++next_comm_id_;
  return next_comm_id_++;
}

// The transaction ID of a message we start (not an answer, which carries the asker's): the MAD agent's
// number above our comm ID, as Linux's cm_form_tid.
uint64_t ConnectionManager::our_tid(uint32_t comm_id) const { return uint64_t(config_.tid_high) << 32 | comm_id; }

// One response timeout of the peer plus a round trip: how long to wait for an answer before resending
// (Linux: 2 x packet lifetime + the peer's CM response timeout).
Nanos ConnectionManager::response_interval(uint8_t peer_response_timeout) const {
  return 2 * timeout_code_ns(config_.packet_lifetime) + timeout_code_ns(peer_response_timeout);
}

void ConnectionManager::send(const MadAddress& to, const CmMessage& message, uint64_t tid) {
  ++counters_.tx_mads;
  if (std::holds_alternative<Rej>(message)) ++counters_.rej_sent;
  sender_.send(to, encode(message, tid));
}

void ConnectionManager::send_with_retries(Retries& r, const MadAddress& to, const CmMessage& message, uint64_t tid,
                                          unsigned max_retries, Nanos interval, Nanos now) {
  r.last_sent = encode(message, tid);
  r.retries_left = max_retries;
  r.retry_interval = interval;
  r.deadline = now + interval;
  ++counters_.tx_mads;
  sender_.send(to, r.last_sent);
}

// A connection's messages wait for the peer's advertised response timeout, as many times as the REQ said.
void ConnectionManager::send_with_retries(Connection& c, const CmMessage& message, Nanos now) {
  send_with_retries(c, c.peer, message, c.tid, c.max_retries, response_interval(c.peer_response_timeout), now);
}

bool ConnectionManager::resend(Retries& r, const MadAddress& to, Nanos now) {
  if (r.retries_left == 0) return false;
  --r.retries_left;
  ++counters_.retransmissions;
  ++counters_.tx_mads;
  r.deadline = now + r.retry_interval;
  sender_.send(to, r.last_sent);
  return true;
}

void ConnectionManager::enter_timewait(Connection& c, Nanos now) {
  c.state = CmState::timewait;
  c.deadline = now + config_.timewait;
}

void ConnectionManager::erase(uint32_t comm_id) {
  const auto it = connections_.find(comm_id);
  if (it == connections_.end()) return;
  by_remote_.erase({it->second.peer.gid.bytes, it->second.remote_id});
  connections_.erase(it);
}

void ConnectionManager::erase_sidr(uint32_t comm_id) {
  const auto it = sidr_.find(comm_id);
  if (it == sidr_.end()) return;
  if (!it->second.active) sidr_by_remote_.erase({it->second.peer.gid.bytes, it->second.remote_id});
  sidr_.erase(it);
}

// Answers the passive SIDR request `comm_id` with `rep` and forgets it. The SIDR_REP names the request
// and service the peer asked about and goes back, with the SIDR_REQ's transaction ID, to where that came
// from (Linux's cm_format_sidr_rep); from then on a SIDR_REQ with the same ID is a new one.
void ConnectionManager::reply_sidr(uint32_t comm_id, SidrRep rep) {
  const SidrRequest& s = sidr_.at(comm_id);
  rep.request_id = s.remote_id;
  rep.service_id = s.service_id;
  send(s.peer, rep, s.tid);
  erase_sidr(comm_id);
}

void ConnectionManager::emit(CmEvent event) {
  const Connection* c = find(event.comm_id);
  if (c != nullptr && c->owner_gone) return;
  events_.push_back(std::move(event));
}

std::vector<CmEvent> ConnectionManager::take_events() {
  std::vector<CmEvent> e;
  e.swap(events_);
  return e;
}

// --- the owner's calls ---------------------------------------------------------------------------------

uint32_t ConnectionManager::connect(Req req, const MadAddress& peer, Nanos now) {
  const uint32_t id = new_comm_id();
  req.local_comm_id = id;
  req.local_ca_guid = config_.ca_guid;
  Connection& c = connections_[id];
  c.local_id = id;
  c.state = CmState::req_sent;
  c.peer = peer;
  c.tid = our_tid(id);
  c.local_qpn = req.local_qpn;
  c.peer_response_timeout = req.remote_cm_response_timeout;
  c.max_retries = req.max_cm_retries;
  send_with_retries(c, req, now);
  return id;
}

int ConnectionManager::accept(uint32_t comm_id, Rep rep, Nanos now) {
  Connection* c = find(comm_id);
  if (c == nullptr) return ENOENT;
  if (c->state != CmState::req_received) return EINVAL;
  rep.local_comm_id = c->local_id;
  rep.remote_comm_id = c->remote_id;
  rep.local_ca_guid = config_.ca_guid;
  c->local_qpn = rep.local_qpn;
  c->state = CmState::rep_sent;
  send_with_retries(*c, rep, now);
  return 0;
}

int ConnectionManager::reject(uint32_t comm_id, uint16_t reason, std::span<const uint8_t> private_data, Nanos) {
  Connection* c = find(comm_id);
  if (c == nullptr) return ENOENT;
  if (c->state != CmState::req_received && c->state != CmState::rep_received) return EINVAL;
  Rej rej;
  rej.local_comm_id = c->local_id;
  rej.remote_comm_id = c->remote_id;
  rej.message_rejected = c->state == CmState::req_received ? MessageRef::req : MessageRef::rep;
  rej.reason = reason;
  if (!set_private_data(rej.private_data, private_data)) return EINVAL;
  send(c->peer, rej, c->tid);
  erase(comm_id);
  return 0;
}

int ConnectionManager::establish(uint32_t comm_id, Nanos) {
  Connection* c = find(comm_id);
  if (c == nullptr) return ENOENT;
  if (c->state != CmState::rep_received) return EINVAL;
  send(c->peer, Rtu{c->local_id, c->remote_id, {}}, c->tid);
  c->state = CmState::established;
  c->deadline = never;
  return 0;
}

int ConnectionManager::notify_established(uint32_t comm_id) {
  Connection* c = find(comm_id);
  if (c == nullptr) return ENOENT;
  if (c->state == CmState::established) return 0;
  if (c->state != CmState::rep_sent) return EINVAL;
  c->state = CmState::established;
  c->deadline = never;
  emit(make_event(CmEventType::established, comm_id, c->peer));
  return 0;
}

int ConnectionManager::disconnect(uint32_t comm_id, Nanos now) {
  Connection* c = find(comm_id);
  if (c == nullptr) return ENOENT;
  if (c->state == CmState::dreq_sent || c->state == CmState::timewait) return 0;  // already closing
  if (c->state != CmState::established) return EINVAL;
  c->state = CmState::dreq_sent;
  c->tid = our_tid(c->local_id);
  Dreq dreq;
  dreq.local_comm_id = c->local_id;
  dreq.remote_comm_id = c->remote_id;
  dreq.remote_qpn = c->remote_qpn;
  send_with_retries(*c, dreq, now);
  return 0;
}

uint32_t ConnectionManager::sidr_request(SidrReq req, const MadAddress& peer, Nanos retry_interval, uint8_t max_retries,
                                         Nanos now) {
  const uint32_t id = new_comm_id();
  req.request_id = id;
  SidrRequest& s = sidr_[id];
  s.active = true;
  s.peer = peer;
  s.service_id = req.service_id;
  s.tid = our_tid(id);
  // The owner chooses the retry interval (unlike a REQ's, no peer has advertised a response timeout yet).
  send_with_retries(s, peer, req, s.tid, max_retries, retry_interval, now);
  return id;
}

int ConnectionManager::sidr_reply(uint32_t comm_id, SidrRep rep, Nanos) {
  if (find_sidr(comm_id, false) == nullptr) return ENOENT;
  if (rep.additional_info_length > sidr_rep_info_size) return EINVAL;
  reply_sidr(comm_id, rep);
  return 0;
}

void ConnectionManager::destroy(uint32_t comm_id, Nanos now) {
  if (const auto it = sidr_.find(comm_id); it != sidr_.end()) {
    // Linux's cm_destroy_id: our own request is just dropped (a late SIDR_REP then finds nothing); a peer's
    // that nobody will answer now gets "rejected" rather than making the peer wait for all its retries.
    if (it->second.active) {
      erase_sidr(comm_id);
    } else {
      SidrRep rep;
      rep.status = SidrStatus::rejected;
      reply_sidr(comm_id, rep);
    }
    return;
  }
  Connection* c = find(comm_id);
  if (c == nullptr) return;
  c->owner_gone = true;
  switch (c->state) {
    case CmState::req_sent: {
      // Linux: REJ "timeout" with our CA GUID as additional information.
      Rej rej;
      rej.local_comm_id = c->local_id;
      rej.message_rejected = MessageRef::other;
      rej.reason = uint16_t(RejectReason::timeout);
      rej.reject_info_length = 8;
      for (int i = 0; i < 8; ++i) rej.ari[size_t(i)] = uint8_t(config_.ca_guid >> (56 - 8 * i));
      send(c->peer, rej, c->tid);
      erase(comm_id);
      return;
    }
    case CmState::req_received:
    case CmState::rep_received:
    case CmState::rep_sent: {
      Rej rej;
      rej.local_comm_id = c->local_id;
      rej.remote_comm_id = c->remote_id;
      rej.message_rejected = c->state == CmState::rep_received ? MessageRef::rep : MessageRef::req;
      rej.reason = uint16_t(RejectReason::consumer_defined);
      send(c->peer, rej, c->tid);
      erase(comm_id);
      return;
    }
    case CmState::established: {
      Dreq dreq;
      dreq.local_comm_id = c->local_id;
      dreq.remote_comm_id = c->remote_id;
      dreq.remote_qpn = c->remote_qpn;
      send(c->peer, dreq, our_tid(c->local_id));
      enter_timewait(*c, now);
      return;
    }
    case CmState::dreq_sent:
      enter_timewait(*c, now);
      return;
    case CmState::timewait:
      return;
  }
}

// --- the network's messages ------------------------------------------------------------------------------

void ConnectionManager::receive(const MadAddress& from, std::span<const uint8_t> mad, Nanos now) {
  ++counters_.rx_mads;
  auto decoded = decode(mad);
  if (std::holds_alternative<DecodeError>(decoded)) {
    ++counters_.rx_malformed;
    return;
  }
  const Decoded& d = std::get<Decoded>(decoded);
  std::visit(Overload{
                 [&](const Req& m) { on_req(from, d.header, m, now); },
                 [&](const Mra& m) { on_mra(m, now); },
                 [&](const Rej& m) { on_rej(m); },
                 [&](const Rep& m) { on_rep(from, m, now); },
                 [&](const Rtu& m) { on_rtu(m); },
                 [&](const Dreq& m) { on_dreq(from, d.header, m, now); },
                 [&](const Drep& m) { on_drep(m, now); },
                 [&](const SidrReq& m) { on_sidr_req(from, d.header, m); },
                 [&](const SidrRep& m) { on_sidr_rep(from, m); },
             },
             d.message);
}

void ConnectionManager::on_req(const MadAddress& from, const wire::MadHeader& h, const Req& m, Nanos now) {
  const auto known = by_remote_.find({from.gid.bytes, m.local_comm_id});
  if (known != by_remote_.end()) {
    // The peer did not hear from us in time. A REQ the owner has not answered gets an MRA (more time);
    // one whose REP was lost gets the REP again; later ones are stale and dropped.
    ++counters_.rx_duplicates;
    Connection& c = connections_.at(known->second);
    if (c.state == CmState::req_received) {
      Mra mra;
      mra.local_comm_id = c.local_id;
      mra.remote_comm_id = c.remote_id;
      mra.message_mraed = MessageRef::req;
      mra.service_timeout = config_.mra_service_timeout;
      send(c.peer, mra, c.tid);
    } else if (c.state == CmState::rep_sent) {
      ++counters_.tx_mads;
      sender_.send(c.peer, c.last_sent);
    }
    return;
  }
  if (!listening_.contains(m.service_id) ||
      (m.service_type != ServiceType::rc && m.service_type != ServiceType::uc &&
       !is_xrc(m.service_type, m.extended_transport))) {
    Rej rej;
    rej.remote_comm_id = m.local_comm_id;
    rej.message_rejected = MessageRef::req;
    rej.reason = uint16_t(listening_.contains(m.service_id) ? RejectReason::invalid_transport_type
                                                            : RejectReason::invalid_service_id);
    send(from, rej, h.transaction_id);
    return;
  }
  const uint32_t id = new_comm_id();
  Connection& c = connections_[id];
  c.local_id = id;
  c.remote_id = m.local_comm_id;
  c.state = CmState::req_received;
  c.peer = from;
  c.tid = h.transaction_id;
  c.remote_qpn = m.local_qpn;
  c.peer_response_timeout = m.local_cm_response_timeout;
  c.max_retries = m.max_cm_retries;
  c.deadline = never;
  by_remote_[{from.gid.bytes, m.local_comm_id}] = id;
  CmEvent e = make_event(CmEventType::req_received, id, from);
  e.req = m;
  emit(std::move(e));
  (void)now;
}

void ConnectionManager::on_mra(const Mra& m, Nanos now) {
  Connection* c = find(m.remote_comm_id);
  if (c == nullptr) {
    ++counters_.rx_unknown_connection;
    return;
  }
  const bool fits = (c->state == CmState::req_sent && m.message_mraed == MessageRef::req) ||
                    (c->state == CmState::rep_sent && m.message_mraed == MessageRef::rep) ||
                    (c->state == CmState::dreq_sent && m.message_mraed == MessageRef::other);
  if (!fits) {
    ++counters_.rx_wrong_state;
    return;
  }
  // The peer received our message and needs longer to answer: wait that long before resending.
  c->deadline = now + 2 * timeout_code_ns(config_.packet_lifetime) + timeout_code_ns(m.service_timeout);
  c->retries_left = c->max_retries;
}

void ConnectionManager::on_rej(const Rej& m) {
  ++counters_.rej_received;
  Connection* c = find(m.remote_comm_id);
  if (c == nullptr) {
    ++counters_.rx_unknown_connection;
    return;
  }
  const bool fits = c->state == CmState::req_sent || c->state == CmState::rep_sent ||
                    c->state == CmState::rep_received ||
                    (c->state == CmState::established && m.message_rejected == MessageRef::rep);
  if (!fits || (c->state != CmState::req_sent && m.local_comm_id != c->remote_id)) {
    ++counters_.rx_wrong_state;
    return;
  }
  CmEvent e = make_event(CmEventType::rejected, c->local_id, c->peer);
  e.rej = m;
  emit(std::move(e));
  erase(c->local_id);
}

void ConnectionManager::on_rep(const MadAddress& from, const Rep& m, Nanos now) {
  Connection* c = find(m.remote_comm_id);
  if (c == nullptr) {
    ++counters_.rx_unknown_connection;
    return;
  }
  if (c->state == CmState::req_sent) {
    c->remote_id = m.local_comm_id;
    c->remote_qpn = m.local_qpn != 0 ? m.local_qpn : m.local_eecn;  // an XRC target's is its EECN
    c->peer = from;  // later messages go where the REP came from (IBTA: the REP's sender)
    c->state = CmState::rep_received;
    c->deadline = never;
    by_remote_[{from.gid.bytes, m.local_comm_id}] = c->local_id;
    CmEvent e = make_event(CmEventType::rep_received, c->local_id, c->peer);
    e.rep = m;
    emit(std::move(e));
    return;
  }
  if (m.local_comm_id != c->remote_id) {
    ++counters_.rx_wrong_state;
    return;
  }
  ++counters_.rx_duplicates;
  // Our RTU was lost: the passive side resent its REP. Say RTU again.
  if (c->state == CmState::established) send(c->peer, Rtu{c->local_id, c->remote_id, {}}, c->tid);
  (void)now;
}

void ConnectionManager::on_rtu(const Rtu& m) {
  Connection* c = find(m.remote_comm_id);
  if (c == nullptr) {
    ++counters_.rx_unknown_connection;
    return;
  }
  if (c->state != CmState::rep_sent || m.local_comm_id != c->remote_id) {
    ++counters_.rx_wrong_state;
    return;
  }
  c->state = CmState::established;
  c->deadline = never;
  emit(make_event(CmEventType::established, c->local_id, c->peer));
}

void ConnectionManager::on_dreq(const MadAddress& from, const wire::MadHeader& h, const Dreq& m, Nanos now) {
  Connection* c = find(m.remote_comm_id);
  if (c == nullptr || m.local_comm_id != c->remote_id) {
    // A connection we no longer know (destroyed, timewait over): the peer still wants its DREP.
    ++counters_.rx_unknown_connection;
    send(from, Drep{m.remote_comm_id, m.local_comm_id, {}}, h.transaction_id);
    return;
  }
  switch (c->state) {
    case CmState::established:
    case CmState::rep_sent:  // our REP's RTU was lost, but the peer is established: same thing
    case CmState::dreq_sent: {
      const bool crossed = c->state == CmState::dreq_sent;
      send(c->peer, Drep{c->local_id, c->remote_id, {}}, h.transaction_id);
      enter_timewait(*c, now);
      CmEvent e = make_event(crossed ? CmEventType::disconnected : CmEventType::dreq_received, c->local_id, c->peer);
      emit(std::move(e));
      return;
    }
    case CmState::timewait:
      ++counters_.rx_duplicates;
      send(c->peer, Drep{c->local_id, c->remote_id, {}}, h.transaction_id);
      return;
    default:
      ++counters_.rx_wrong_state;
      return;
  }
}

void ConnectionManager::on_drep(const Drep& m, Nanos now) {
  Connection* c = find(m.remote_comm_id);
  if (c == nullptr) {
    ++counters_.rx_unknown_connection;
    return;
  }
  if (m.local_comm_id != c->remote_id) {
    ++counters_.rx_wrong_state;
    return;
  }
  // Both sides disconnected at once (rsockets' close does): each answered the other's DREQ and is in
  // timewait when the DREP for its own arrives. That DREP is expected, not a protocol error (Linux's
  // cm_drep_handler drops it without a count).
  if (c->state == CmState::timewait) return;
  if (c->state != CmState::dreq_sent) {
    ++counters_.rx_wrong_state;
    return;
  }
  enter_timewait(*c, now);
  emit(make_event(CmEventType::disconnected, c->local_id, c->peer));
}

// A peer asks which QP serves a service. Linux's cm_sidr_req_handler: a duplicate of a request still
// unanswered is dropped (the answer will come); a service nobody listens on is answered at once; else the
// owner decides (sidr_reply) and the request waits with no timer, as a REQ in req_received does.
void ConnectionManager::on_sidr_req(const MadAddress& from, const wire::MadHeader& h, const SidrReq& m) {
  const RemoteKey key{from.gid.bytes, m.request_id};
  if (sidr_by_remote_.contains(key)) {
    ++counters_.rx_duplicates;
    return;
  }
  if (!listening_.contains(m.service_id)) {
    SidrRep rep;
    rep.request_id = m.request_id;
    rep.status = SidrStatus::service_id_not_supported;
    rep.service_id = m.service_id;
    send(from, rep, h.transaction_id);
    return;
  }
  const uint32_t id = new_comm_id();
  SidrRequest& s = sidr_[id];
  s.active = false;
  s.peer = from;
  s.remote_id = m.request_id;
  s.service_id = m.service_id;
  s.tid = h.transaction_id;
  sidr_by_remote_[key] = id;
  CmEvent e = make_event(CmEventType::sidr_req_received, id, from);
  e.sidr_req = m;
  emit(std::move(e));
}

// The answer to one of our SIDR_REQs, whatever its status, ends the request. One that answers nothing we
// are waiting for (never asked, already answered, timed out, destroyed) is dropped.
void ConnectionManager::on_sidr_rep(const MadAddress& from, const SidrRep& m) {
  if (find_sidr(m.request_id, true) == nullptr) {
    ++counters_.rx_unknown_connection;
    return;
  }
  CmEvent e = make_event(CmEventType::sidr_rep_received, m.request_id, from);
  e.sidr_rep = m;
  emit(std::move(e));
  erase_sidr(m.request_id);
}

// --- timers ----------------------------------------------------------------------------------------------

void ConnectionManager::on_timer(Connection& c, Nanos now) {
  if (c.state == CmState::timewait) {
    erase(c.local_id);
    return;
  }
  if (resend(c, c.peer, now)) return;
  ++counters_.timeouts;
  c.deadline = never;
  if (c.state == CmState::dreq_sent) {
    enter_timewait(c, now);
    CmEvent e = make_event(CmEventType::disconnected, c.local_id, c.peer);
    e.timed_out = true;
    emit(std::move(e));
    return;
  }
  // REQ or REP never answered.
  CmEvent e = make_event(CmEventType::unreachable, c.local_id, c.peer);
  e.timed_out = true;
  emit(std::move(e));
  erase(c.local_id);
}

// Our SIDR_REQ went unanswered: again, or after the last retry `unreachable` (Linux: IB_CM_SIDR_REQ_ERROR,
// which rdma_cm reports as RDMA_CM_EVENT_UNREACHABLE). Only active requests have a deadline.
void ConnectionManager::on_sidr_timer(uint32_t comm_id, SidrRequest& s, Nanos now) {
  if (resend(s, s.peer, now)) return;
  ++counters_.timeouts;
  CmEvent e = make_event(CmEventType::unreachable, comm_id, s.peer);
  e.timed_out = true;
  emit(std::move(e));
  erase_sidr(comm_id);
}

void ConnectionManager::run(Nanos now) {
  for (uint32_t id : due_at(connections_, now)) {
    if (Connection* c = find(id)) on_timer(*c, now);
  }
  for (uint32_t id : due_at(sidr_, now)) {
    if (const auto it = sidr_.find(id); it != sidr_.end()) on_sidr_timer(id, it->second, now);
  }
}

Nanos ConnectionManager::next_deadline() const {
  return std::min(earliest_deadline(connections_), earliest_deadline(sidr_));
}

}  // namespace uroce::cm
