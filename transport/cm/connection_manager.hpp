// The IB communication manager of one port (IBTA vol. 1 chapter 12; Linux: drivers/infiniband/core/cm.c),
// as a library with no I/O: MADs in through receive(), out through a MadSender, time injected, timers
// fired by run(). It keeps the state of every connection this port takes part in, retransmits REQ, REP
// and DREQ until they are answered (max CM retries, the peers' advertised response timeouts, MRAs that
// ask for more time), answers what must be answered on its own (REJ for an unknown service, MRA for a
// duplicate REQ the application has not answered yet, RTU again for a duplicate REP, DREP for a DREQ,
// even for a connection it no longer knows, a SIDR_REP for a SIDR_REQ nobody listens for), and tells its
// owner what happened through events. Service ID Resolution (SIDR, for UD) runs beside the connections.
//
// What it does not decide: whether to accept a connection, and what the QPs and private data are. The
// owner (uroced's rdma_cm service) makes those choices and fills REQ/REP; rdma_cm's IP header inside the
// private data is its business too (rdma_cm_header.hpp).
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <span>
#include <vector>

#include "transport/cm/cm_messages.hpp"
#include "transport/wire/address.hpp"

namespace uroce::cm {

using Nanos = uint64_t;
inline constexpr Nanos never = ~Nanos(0);

// Where a MAD goes or came from: a port's GID and its GSI QP (always QP1 for CM, but a reply goes to the
// QP the request came from, as the specification says).
struct MadAddress {
  wire::IpAddress gid;
  uint32_t qpn = wire::gsi_qpn;
  // The SL (on a VLAN, the priority) MADs to it go with: a connection's own, as Linux's CM sends on the
  // path's SL; answers go at the SL their request came with (an address handle made from its completion).
  uint8_t sl = 0;
  friend bool operator==(const MadAddress&, const MadAddress&) = default;
};

class MadSender {
 public:
  virtual ~MadSender() = default;
  virtual void send(const MadAddress& to, const Mad& mad) = 0;
};

struct CmConfig {
  uint64_t ca_guid = 0;             // this port's node GUID (REQ/REP local CA GUID, REJ ARI for timeouts)
  uint8_t packet_lifetime = 18;     // 4.096 us * 2^x one way (Linux's CMA_IBOE_PACKET_LIFETIME)
  uint8_t mra_service_timeout = 24; // what an MRA asks for (about 69 s: the application is slow to accept)
  Nanos timewait = 1'000'000'000;   // how long a closed connection is remembered (to answer stale DREQs)
  uint32_t first_comm_id = 0x1000;  // comm IDs are never 0; the daemon starts them at a random value
  uint32_t tid_high = 1;            // upper 32 bits of our transaction IDs (Linux: the MAD agent's number)
};

enum class CmState : uint8_t {
  req_sent,     // active: REQ sent, waiting for REP (or MRA, REJ)
  req_received, // passive: REQ received, the owner has not accepted or rejected yet
  rep_sent,     // passive: REP sent, waiting for RTU
  rep_received, // active: REP received, the owner has not sent RTU (establish) yet
  established,
  dreq_sent,
  timewait,
};

enum class CmEventType : uint8_t {
  req_received,   // passive: a new connection (event.req); accept() or reject() it
  rep_received,   // active: event.rep; move the QP to RTR/RTS, then establish() (sends RTU) or reject()
  established,    // passive: RTU received (or notify_established())
  rejected,       // REJ received (event.rej); the connection is gone
  unreachable,    // REQ or REP retransmitted max CM retries times without an answer; the connection is gone
  dreq_received,  // the peer disconnected (DREP already sent); the connection is in timewait
  disconnected,   // our DREQ was answered, crossed the peer's, or timed out (timed_out); timewait
  sidr_req_received,  // passive: a SIDR_REQ for a listened service (event.sidr_req); sidr_reply() to it
  sidr_rep_received,  // active: the SIDR_REP to our request (event.sidr_rep, any status); the request is done
  // (a SIDR request that is never answered ends with `unreachable`, as a REQ does)
};

struct CmEvent {
  CmEventType type = CmEventType::req_received;
  uint32_t comm_id = 0;
  MadAddress peer;
  bool timed_out = false;
  Req req;  // req_received
  Rep rep;  // rep_received
  Rej rej;  // rejected
  SidrReq sidr_req;  // sidr_req_received
  SidrRep sidr_rep;  // sidr_rep_received
};

// Counters (uroce stats): every MAD dropped is counted with its reason, never acted on.
struct CmCounters {
  uint64_t rx_mads = 0;
  uint64_t rx_malformed = 0;         // truncated, another class or version, unknown attribute
  uint64_t rx_unknown_connection = 0;
  uint64_t rx_wrong_state = 0;       // a message that makes no sense in the connection's state
  uint64_t rx_duplicates = 0;        // a REQ, REP or DREQ seen before (answered again as needed)
  uint64_t tx_mads = 0;
  uint64_t retransmissions = 0;
  uint64_t timeouts = 0;             // connections given up after max CM retries
  uint64_t rej_sent = 0;
  uint64_t rej_received = 0;
};

class ConnectionManager {
 public:
  ConnectionManager(MadSender& sender, CmConfig config = {});

  // Passive side: REQs for `service_id` become req_received events; others are rejected (invalid service ID).
  int listen(uint64_t service_id);  // EADDRINUSE if already listened on
  void unlisten(uint64_t service_id);

  // Active side: sends `req` (its local_comm_id and local CA GUID are filled in here) to `peer`; returns
  // the connection's comm ID. The REQ goes again every 2 x packet lifetime + the REQ's remote CM response
  // timeout until answered, max_cm_retries times.
  uint32_t connect(Req req, const MadAddress& peer, Nanos now);

  // Passive: answers the REQ of connection `comm_id` with `rep` (IDs and CA GUID filled in here).
  int accept(uint32_t comm_id, Rep rep, Nanos now);
  // Refuses a connection that is not established yet: a received REQ (passive) or REP (active).
  int reject(uint32_t comm_id, uint16_t reason, std::span<const uint8_t> private_data, Nanos now);
  // Active: sends RTU after a REP; the connection is established.
  int establish(uint32_t comm_id, Nanos now);
  // Passive: data arrived before the RTU (the QP saw it): the connection is established, as if the RTU came.
  int notify_established(uint32_t comm_id);
  // Sends DREQ (an established connection), retransmitted until DREP; EINVAL in any other state.
  int disconnect(uint32_t comm_id, Nanos now);
  // Active SIDR: sends `req` (its request_id is filled in here: a comm ID) to `peer`, again every
  // `retry_interval` until a SIDR_REP, `max_retries` times, then `unreachable` (Linux's rdma_cm: 4096 ms, 15).
  // Returns the request's comm ID.
  uint32_t sidr_request(SidrReq req, const MadAddress& peer, Nanos retry_interval, uint8_t max_retries, Nanos now);
  // Passive SIDR: answers the SIDR_REQ of `comm_id` (a sidr_req_received event) with `rep` (request_id and
  // service_id filled in here), whatever its status; the request is then forgotten. ENOENT if unknown,
  // EINVAL if rep.additional_info_length is more than the room for it (Linux's ib_send_cm_sidr_rep).
  int sidr_reply(uint32_t comm_id, SidrRep rep, Nanos now);
  // The owner forgets the connection: what is still open is closed on the wire the way Linux does
  // (REJ before establishment, one DREQ after; a SIDR_REQ not answered yet gets a SIDR_REP "rejected"),
  // then nothing more is said about it.
  void destroy(uint32_t comm_id, Nanos now);

  void receive(const MadAddress& from, std::span<const uint8_t> mad, Nanos now);
  void run(Nanos now);
  Nanos next_deadline() const;
  std::vector<CmEvent> take_events();

  const CmCounters& counters() const { return counters_; }
  // The state of a connection (for tests and `uroce stats`); nullptr if unknown. A SIDR request is not a
  // connection: it has no state here and is not counted.
  const CmState* state(uint32_t comm_id) const;
  size_t connection_count() const { return connections_.size(); }

 private:
  // A message a timer resends until it is answered (REQ, REP, DREQ of a connection; a SIDR_REQ).
  struct Retries {
    Mad last_sent{};
    unsigned retries_left = 0;
    Nanos retry_interval = 0;
    Nanos deadline = never;
  };

  struct Connection : Retries {
    uint32_t local_id = 0;
    uint32_t remote_id = 0;
    CmState state = CmState::req_sent;
    MadAddress peer;
    uint64_t tid = 0;
    uint32_t local_qpn = 0;
    uint32_t remote_qpn = 0;
    uint8_t peer_response_timeout = 20;  // how long the peer may take to answer us (code)
    uint8_t max_retries = 15;
    bool owner_gone = false;  // destroyed: no more events
  };

  // One Service ID Resolution (IBTA 12.11): one SIDR_REQ, one SIDR_REP, no connection and no state machine,
  // so it is kept apart from the connections (Linux keeps it in the same cm_id, in states of its own).
  // Active: our SIDR_REQ, resent until answered. Passive: a peer's SIDR_REQ the owner has not answered yet.
  struct SidrRequest : Retries {
    bool active = false;
    MadAddress peer;
    uint32_t remote_id = 0;   // passive: the peer's request ID, echoed in the SIDR_REP
    uint64_t service_id = 0;  // the service asked about (passive: echoed in the SIDR_REP)
    uint64_t tid = 0;         // active: ours; passive: the SIDR_REQ's, which the SIDR_REP carries back
  };

  Connection* find(uint32_t comm_id);
  SidrRequest* find_sidr(uint32_t comm_id, bool active);
  uint32_t new_comm_id();
  uint64_t our_tid(uint32_t comm_id) const;
  void send(const MadAddress& to, const CmMessage& message, uint64_t tid);
  // Sends a message that a timer resends every `interval` until answered, `max_retries` times.
  void send_with_retries(Retries& r, const MadAddress& to, const CmMessage& message, uint64_t tid,
                         unsigned max_retries, Nanos interval, Nanos now);
  void send_with_retries(Connection& c, const CmMessage& message, Nanos now);
  // Resends what `r` last sent if it has retries left; false when it has none (the caller gives up).
  bool resend(Retries& r, const MadAddress& to, Nanos now);
  void enter_timewait(Connection& c, Nanos now);
  void erase(uint32_t comm_id);
  void erase_sidr(uint32_t comm_id);
  void reply_sidr(uint32_t comm_id, SidrRep rep);
  void emit(CmEvent event);
  Nanos response_interval(uint8_t peer_response_timeout) const;

  void on_req(const MadAddress& from, const wire::MadHeader& h, const Req& m, Nanos now);
  void on_mra(const Mra& m, Nanos now);
  void on_rej(const Rej& m);
  void on_rep(const MadAddress& from, const Rep& m, Nanos now);
  void on_rtu(const Rtu& m);
  void on_dreq(const MadAddress& from, const wire::MadHeader& h, const Dreq& m, Nanos now);
  void on_drep(const Drep& m, Nanos now);
  void on_sidr_req(const MadAddress& from, const wire::MadHeader& h, const SidrReq& m);
  void on_sidr_rep(const MadAddress& from, const SidrRep& m);
  void on_timer(Connection& c, Nanos now);
  void on_sidr_timer(uint32_t comm_id, SidrRequest& s, Nanos now);

  MadSender& sender_;
  CmConfig config_;
  uint32_t next_comm_id_;
  std::set<uint64_t> listening_;
  std::map<uint32_t, Connection> connections_;
  // Who asked (peer GID, the peer's comm or request ID): how a duplicate REQ or SIDR_REQ is known.
  using RemoteKey = std::pair<std::array<uint8_t, 16>, uint32_t>;
  // A passive connection by who asked for it.
  std::map<RemoteKey, uint32_t> by_remote_;
  std::map<uint32_t, SidrRequest> sidr_;  // by our comm ID (the same ID space as connections)
  // A passive SIDR request by who asked for it.
  std::map<RemoteKey, uint32_t> sidr_by_remote_;
  std::vector<CmEvent> events_;
  CmCounters counters_;
};

}  // namespace uroce::cm
