// The CM state machine. Which message is accepted in which state, and what a duplicate gets, follows
// IBTA chapter 12.9 and what Linux's ib_cm does (a peer running Linux is the one to interoperate with).
#include "transport/cm/connection_manager.hpp"

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

}  // namespace

ConnectionManager::ConnectionManager(MadSender& sender, CmConfig config)
    : sender_(sender), config_(config), next_comm_id_(config.first_comm_id) {}

int ConnectionManager::listen(uint64_t service_id) { return listening_.insert(service_id).second ? 0 : EADDRINUSE; }

void ConnectionManager::unlisten(uint64_t service_id) { listening_.erase(service_id); }

ConnectionManager::Connection* ConnectionManager::find(uint32_t comm_id) {
  const auto it = connections_.find(comm_id);
  return it == connections_.end() ? nullptr : &it->second;
}

const CmState* ConnectionManager::state(uint32_t comm_id) const {
  const auto it = connections_.find(comm_id);
  return it == connections_.end() ? nullptr : &it->second.state;
}

uint32_t ConnectionManager::new_comm_id() {
  while (next_comm_id_ == 0 || connections_.contains(next_comm_id_)) ++next_comm_id_;
  return next_comm_id_++;
}

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

void ConnectionManager::send_with_retries(Connection& c, const CmMessage& message, Nanos now) {
  c.last_sent = encode(message, c.tid);
  c.retries_left = c.max_retries;
  c.retry_interval = response_interval(c.peer_response_timeout);
  c.deadline = now + c.retry_interval;
  ++counters_.tx_mads;
  sender_.send(c.peer, c.last_sent);
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
  c.tid = uint64_t(config_.tid_high) << 32 | id;
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
  c->tid = uint64_t(config_.tid_high) << 32 | c->local_id;
  Dreq dreq;
  dreq.local_comm_id = c->local_id;
  dreq.remote_comm_id = c->remote_id;
  dreq.remote_qpn = c->remote_qpn;
  send_with_retries(*c, dreq, now);
  return 0;
}

void ConnectionManager::destroy(uint32_t comm_id, Nanos now) {
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
      send(c->peer, dreq, uint64_t(config_.tid_high) << 32 | c->local_id);
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
      (m.service_type != ServiceType::rc && m.service_type != ServiceType::uc)) {
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
    c->remote_qpn = m.local_qpn;
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
  if (c->state != CmState::dreq_sent || m.local_comm_id != c->remote_id) {
    ++counters_.rx_wrong_state;
    return;
  }
  enter_timewait(*c, now);
  emit(make_event(CmEventType::disconnected, c->local_id, c->peer));
}

// --- timers ----------------------------------------------------------------------------------------------

void ConnectionManager::on_timer(Connection& c, Nanos now) {
  if (c.state == CmState::timewait) {
    erase(c.local_id);
    return;
  }
  if (c.retries_left > 0) {
    --c.retries_left;
    ++counters_.retransmissions;
    ++counters_.tx_mads;
    c.deadline = now + c.retry_interval;
    sender_.send(c.peer, c.last_sent);
    return;
  }
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

void ConnectionManager::run(Nanos now) {
  std::vector<uint32_t> due;
  for (const auto& [id, c] : connections_) {
    if (c.deadline <= now) due.push_back(id);
  }
  for (uint32_t id : due) {
    if (Connection* c = find(id)) on_timer(*c, now);
  }
}

Nanos ConnectionManager::next_deadline() const {
  Nanos t = never;
  for (const auto& [id, c] : connections_) t = std::min(t, c.deadline);
  return t;
}

}  // namespace uroce::cm
