// rdma_cm IDs, channels, addresses and ports. The connection half (REQ/REP/..., events) is cm_connect.cpp.
#include "emulator/daemon/cm_service.hpp"

#include <fcntl.h>
#include <sys/eventfd.h>

#include <algorithm>
#include <time.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

#include "emulator/daemon/source_gid.hpp"
#include "transport/cm/rdma_cm_header.hpp"

namespace uroce::emulator {

using nlohmann::json;

namespace {

// Modified EUI-64 from the port's MAC, as RoCE NICs (and the verbs shim's node GUID) derive it.
uint64_t ca_guid_of(const wire::MacAddress& mac) {
  const auto& m = mac.bytes;
  return uint64_t(m[0] ^ 2) << 56 | uint64_t(m[1]) << 48 | uint64_t(m[2]) << 40 | 0xffull << 32 | 0xfeull << 24 |
         uint64_t(m[3]) << 16 | uint64_t(m[4]) << 8 | m[5];
}

cm::CmConfig cm_config(const PortDescription& port, uint32_t seed) {
  cm::CmConfig c;
  c.ca_guid = ca_guid_of(port.mac);
  c.first_comm_id = seed | 1;  // comm IDs of a restarted daemon do not repeat the last run's
  return c;
}

// Only an eventfd is counted on: a write to a pipe or a socket the client sent could block this thread.
bool is_eventfd(int fd) {
  char target[64] = {};
  const std::string link = "/proc/self/fd/" + std::to_string(fd);
  const ssize_t n = readlink(link.c_str(), target, sizeof target - 1);
  return n > 0 && std::string_view(target, size_t(n)) == "anon_inode:[eventfd]";
}

}  // namespace

wire::IpAddress need_ip(const json& r, const char* key) {
  const auto it = r.find(key);
  if (it == r.end() || !it->is_string()) throw ServiceError(EINVAL, std::string("missing address ") + key);
  const std::optional<wire::IpAddress> a = wire::parse_ip(it->get<std::string>());
  if (!a) throw ServiceError(EINVAL, "not an IP address: " + it->get<std::string>());
  return *a;
}

uint32_t need_field(const json& r, const char* key) {
  const auto it = r.find(key);
  if (it == r.end() || !it->is_number_unsigned() || it->get<uint64_t>() > UINT32_MAX) {
    throw ServiceError(EINVAL, std::string("missing or invalid field ") + key);
  }
  return it->get<uint32_t>();
}

CmService::CmService(EngineAccess& engine, boost::asio::io_context& io, PortDescription port,
                     std::string port_range_file)
    : engine_(engine),
      io_(io),
      port_(std::move(port)),
      gsi_(engine, io, port_.gids),
      cm_(gsi_, cm_config(port_, std::random_device{}())),
      timer_(io),
      address_timer_(io),
      rng_(std::random_device{}()),
      port_range_file_(std::move(port_range_file)) {
  handlers_ = {
      {"cm_create_channel", &CmService::create_channel}, {"cm_destroy_channel", &CmService::destroy_channel},
      {"cm_get_event", &CmService::get_event},           {"cm_create_id", &CmService::create_id},
      {"cm_destroy_id", &CmService::destroy_id},         {"cm_migrate_id", &CmService::migrate_id},
      {"cm_bind", &CmService::bind},                     {"cm_resolve_addr", &CmService::resolve_addr},
      {"cm_resolve_route", &CmService::resolve_route},   {"cm_listen", &CmService::listen},
      {"cm_set_option", &CmService::set_option},         {"cm_query", &CmService::query},
      {"cm_stats", &CmService::stats},                   {"cm_connect", &CmService::connect},
      {"cm_accept", &CmService::accept},                 {"cm_reject", &CmService::reject},
      {"cm_establish", &CmService::establish},           {"cm_notify", &CmService::notify},
      {"cm_disconnect", &CmService::disconnect},         {"cm_init_qp_attr", &CmService::init_qp_attr},
      {"cm_join_multicast", &CmService::join_multicast}, {"cm_leave_multicast", &CmService::leave_multicast},
      {"cm_route", &CmService::route},
  };
}

CmService::~CmService() {
  for (auto& [n, c] : channels_) close(c.fd);
}

void CmService::start() {
  gsi_.start([this](const cm::MadAddress& from, std::span<const uint8_t> mad) { on_mad(from, mad); });
}

cm::Nanos CmService::now() const {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return cm::Nanos(ts.tv_sec) * 1'000'000'000 + cm::Nanos(ts.tv_nsec);
}

json CmService::handle(uint64_t session, const json& request, std::vector<int>& fds, std::span<const int> received) {
  const auto it = handlers_.find(request.value("op", std::string()));
  if (it == handlers_.end()) throw ServiceError(EOPNOTSUPP, "unknown operation " + request.value("op", std::string()));
  received_ = received;
  json reply;
  try {
    reply = (this->*(it->second))(session, request, fds);
  } catch (const json::exception& e) {  // a field of the wrong type: the client's mistake, said as such
    received_ = {};
    throw ServiceError(EINVAL, std::string("bad request: ") + e.what());
  } catch (...) {
    received_ = {};
    throw;
  }
  received_ = {};
  after_cm();
  return reply;
}

void CmService::close_session(uint64_t session) {
  std::vector<uint32_t> mine;
  for (const auto& [n, id] : ids_) {
    if (id.session == session) mine.push_back(n);
  }
  for (uint32_t n : mine) destroy(n);
  for (auto it = channels_.begin(); it != channels_.end();) {
    if (it->second.session == session) {
      close(it->second.fd);
      it = channels_.erase(it);
    } else {
      ++it;
    }
  }
  after_cm();
}

void CmService::announce_removal() {
  for (const auto& [n, id] : ids_) {
    if (is_local(id.src)) queue_event(n, RdmaCmEvent::device_removal, 0);
  }
}

CmId& CmService::id_of(uint64_t session, const json& r) {
  const auto it = ids_.find(need_field(r, "cm_id"));
  if (it == ids_.end() || it->second.session != session) throw ServiceError(EINVAL, "no such rdma_cm id");
  return it->second;
}

void CmService::set_gids(std::vector<wire::IpAddress> gids) {
  gsi_.set_gids(gids);
  port_.gids = std::move(gids);
}

bool CmService::is_local(const wire::IpAddress& a) const {
  if (a.is_zero()) return false;  // a wildcard, never an empty GID entry
  for (const auto& g : port_.gids) {
    if (g == a) return true;
  }
  return false;
}

uint8_t CmService::sgid_index(const wire::IpAddress& a) const {
  for (size_t i = 0; i < port_.gids.size(); ++i) {
    if (port_.gids[i] == a && !a.is_zero()) return uint8_t(i);
  }
  return 0;
}

void CmService::queue_event(uint32_t id, RdmaCmEvent type, int status, json extra) {
  const auto it = ids_.find(id);
  if (it == ids_.end()) return;
  const auto ch = channels_.find(it->second.channel);
  if (ch == channels_.end()) return;
  extra["type"] = int(type);
  extra["cm_id"] = id;
  extra["status"] = status;
  ch->second.events.push_back(std::move(extra));
  const uint64_t one = 1;
  if (write(ch->second.fd, &one, sizeof one) != sizeof one) spdlog::warn("rdma_cm: event channel write failed");
}

// --- channels ----------------------------------------------------------------------------------------------

json CmService::create_channel(uint64_t s, const json&, std::vector<int>& fds) {
  // The client's own eventfd, when it sends one: a program using several devices (several daemons) has one
  // event channel, whose fd each daemon counts its events on.
  if (!received_.empty()) {
    if (!is_eventfd(received_[0])) throw ServiceError(EINVAL, "an event channel's descriptor must be an eventfd");
    const int fd = fcntl(received_[0], F_DUPFD_CLOEXEC, 0);
    if (fd < 0) throw ServiceError(errno, "dup failed");
    const uint32_t n = next_channel_++;
    channels_[n] = CmChannel{s, fd, {}};
    return {{"channel", n}};
  }
  // Else one of ours. A semaphore eventfd: each read takes one event's count, so the client reads once per
  // event and then fetches it; poll/epoll see it readable while any is queued. Blocking: the client may set
  // O_NONBLOCK.
  const int fd = eventfd(0, EFD_SEMAPHORE | EFD_CLOEXEC);
  if (fd < 0) throw ServiceError(errno, "eventfd for an rdma_cm event channel failed");
  const int client_fd = dup(fd);
  if (client_fd < 0) {
    close(fd);
    throw ServiceError(errno, "dup failed");
  }
  const uint32_t n = next_channel_++;
  channels_[n] = CmChannel{s, fd, {}};
  fds.push_back(client_fd);
  return {{"channel", n}};
}

json CmService::destroy_channel(uint64_t s, const json& r, std::vector<int>&) {
  const auto it = channels_.find(need_field(r, "channel"));
  if (it == channels_.end() || it->second.session != s) throw ServiceError(EINVAL, "no such event channel");
  for (const auto& [n, id] : ids_) {
    if (id.channel == it->first) throw ServiceError(EBUSY, "rdma_cm ids still use the channel");
  }
  close(it->second.fd);
  channels_.erase(it);
  return json::object();
}

json CmService::get_event(uint64_t s, const json& r, std::vector<int>&) {
  const auto it = channels_.find(need_field(r, "channel"));
  if (it == channels_.end() || it->second.session != s) throw ServiceError(EINVAL, "no such event channel");
  if (it->second.events.empty()) return {{"none", true}};
  json e = std::move(it->second.events.front());
  it->second.events.pop_front();
  return e;
}

// --- IDs ---------------------------------------------------------------------------------------------------

json CmService::create_id(uint64_t s, const json& r, std::vector<int>&) {
  const auto ch = channels_.find(need_field(r, "channel"));
  if (ch == channels_.end() || ch->second.session != s) throw ServiceError(EINVAL, "no such event channel");
  const uint32_t ps = need_field(r, "port_space");
  if (ps != wire::rdma_cm_ps_tcp && ps != wire::rdma_cm_ps_udp && ps != wire::rdma_cm_ps_ib) {
    throw ServiceError(EPROTONOSUPPORT, "only RDMA_PS_TCP, RDMA_PS_UDP and RDMA_PS_IB are supported");
  }
  const auto qp_type = uint8_t(r.value("qp_type", 2));  // (read before the ID exists: it may throw)
  const uint32_t n = next_id_++;
  CmId& id = ids_[n];
  id.session = s;
  id.channel = ch->first;
  id.port_space = uint16_t(ps);
  id.qp_type = qp_type;
  return {{"cm_id", n}};
}

json CmService::destroy_id(uint64_t s, const json& r, std::vector<int>&) {
  const uint32_t n = need_field(r, "cm_id");
  id_of(s, r);
  destroy(n);
  return json::object();
}

void CmService::destroy(uint32_t n) {
  auto it = ids_.find(n);
  if (it == ids_.end()) return;
  CmId& id = it->second;
  if (id.comm_id != 0) cm_.destroy(id.comm_id, now());
  address_queries_.erase(n);
  if (id.state == CmIdState::listening) {
    const uint64_t sid = cm::service_id_of(id.port_space, id.src_port);
    if (--listens_[sid] == 0) {
      cm_.unlisten(sid);
      listens_.erase(sid);
    }
  }
  if (id.bound) {
    auto& users = ports_[{id.port_space, id.src_port}];
    std::erase(users, n);
    if (users.empty()) ports_.erase({id.port_space, id.src_port});
  }
  // Events still queued for it are dropped; the channel's count stays (a read then finds nothing: the
  // client's cm_get_event loop takes that).
  const auto ch = channels_.find(id.channel);
  if (ch != channels_.end()) {
    std::erase_if(ch->second.events, [n](const json& e) { return e.value("cm_id", 0u) == n; });
  }
  ids_.erase(it);
}

json CmService::migrate_id(uint64_t s, const json& r, std::vector<int>&) {
  CmId& id = id_of(s, r);
  const auto to = channels_.find(need_field(r, "channel"));
  if (to == channels_.end() || to->second.session != s) throw ServiceError(EINVAL, "no such event channel");
  const uint32_t n = need_field(r, "cm_id");
  auto& from = channels_.at(id.channel).events;
  unsigned moved = 0;
  for (auto it = from.begin(); it != from.end();) {
    if (it->value("cm_id", 0u) == n) {
      to->second.events.push_back(std::move(*it));
      it = from.erase(it);
      ++moved;
    } else {
      ++it;
    }
  }
  id.channel = to->first;
  const uint64_t count = moved;
  if (moved != 0 && write(to->second.fd, &count, sizeof count) != sizeof count) spdlog::warn("rdma_cm: write failed");
  return {{"moved", moved}};
}

// Ephemeral ports come from the range of the namespace uroced runs in (local_port_range.hpp), searched
// from a random start and then on from the last port given. Linux's cma_alloc_any_port starts each search
// at a new random port; going on from the last one gives a freed port again only after the rest of the
// range, and a program that binds fixed ports inside the range right after ephemeral ones (DAPL's RSPs,
// each after its endpoint's ID) meets one of its own ephemeral ports there only if the search started
// among those fixed ports.
//
// A port some IDs hold is given to `id` too when it can tell their connections apart, as Linux's
// cma_port_is_unique: rdma_resolve_addr binds an unbound ID after it has its destination, so a client
// connecting to many servers is not limited to one connection per port of the range (28,232 by default).
uint16_t CmService::ephemeral_port(const CmId& id) {
  const PortRange range = read_port_range(port_range_file_);
  const uint32_t size = uint32_t(range.high) - range.low + 1;
  if (next_ephemeral_ < range.low || next_ephemeral_ > range.high) {
    next_ephemeral_ = uint16_t(range.low + rng_() % size);
  }
  for (uint32_t tries = 0; tries < size; ++tries) {
    const uint16_t p = next_ephemeral_;
    next_ephemeral_ = p >= range.high ? range.low : uint16_t(p + 1);
    const auto holders = ports_.find({id.port_space, p});
    if (holders == ports_.end() || can_share_port(id, holders->second)) return p;
  }
  throw ServiceError(EADDRNOTAVAIL, "no ephemeral port left");
}

// Two IDs on one port are told apart by a destination port, a source address or a destination address
// that both have (neither is "any") and that differ: "any" could be the other's, so it tells nothing
// apart. A listener (no destination) therefore shares its port only with IDs on another source address.
bool CmService::can_share_port(const CmId& id, const std::vector<uint32_t>& holders) const {
  const auto differ = [](const wire::IpAddress& a, const wire::IpAddress& b) {
    return !is_wildcard(a) && !is_wildcard(b) && a != b;
  };
  return std::ranges::all_of(holders, [&](uint32_t n) {
    const CmId& o = ids_.at(n);
    return (id.dst_port != 0 && o.dst_port != 0 && id.dst_port != o.dst_port) || differ(id.src, o.src) ||
           differ(id.dst, o.dst);
  });
}

void CmService::take_port(uint32_t n, uint16_t port) {
  CmId& id = ids_.at(n);
  if (port == 0) {
    port = ephemeral_port(id);
  } else {
    const auto it = ports_.find({id.port_space, port});
    if (it != ports_.end()) {
      // As Linux's cma_check_port: two IDs that each take one family only (RDMA_OPTION_ID_AFONLY; any IPv4
      // ID) share a port across families, as tgtd's iSER portals on 0.0.0.0 and on :: do; a wildcard then
      // clashes with anything (EADDRNOTAVAIL), and the same address with itself (EADDRINUSE).
      for (uint32_t other : it->second) {
        const CmId& o = ids_.at(other);
        if (o.reuseaddr && id.reuseaddr && o.state != CmIdState::listening) continue;
        if (o.afonly.value_or(false) && id.afonly.value_or(false) && o.src.is_v4() != id.src.is_v4()) continue;
        if (is_wildcard(o.src) || is_wildcard(id.src)) {
          throw ServiceError(EADDRNOTAVAIL, "port " + std::to_string(port) + " is in use by a wildcard's ID");
        }
        if (o.src == id.src) throw ServiceError(EADDRINUSE, "port " + std::to_string(port) + " is in use");
      }
    }
  }
  ports_[{id.port_space, port}].push_back(n);
  id.src_port = port;
  id.bound = true;
}

// Binding to one of the port's addresses ties the ID to the device ("on_port": the shim then sets the ID's
// verbs context); a wildcard does not. Nor does a loopback address (127.0.0.0/8, ::1), which Linux binds
// too, to no device: rdma_bind_addr and rdma_listen succeed (rxe, Linux 6.1), and nothing from the wire can
// reach such a listener. libfabric's verbs provider relies on it: fi_getinfo without an address binds
// "localhost" to ask which devices there are.
json CmService::bind(uint64_t s, const json& r, std::vector<int>&) {
  CmId& id = id_of(s, r);
  if (id.bound) throw ServiceError(EINVAL, "already bound");
  const wire::IpAddress a = need_ip(r, "addr");
  if (!is_wildcard(a) && !is_local(a) && !is_loopback(a)) {
    throw ServiceError(EADDRNOTAVAIL, wire::to_string(a) + " is not this port's");
  }
  id.src = a;  // a wildcard keeps its family (see CmId::afonly)
  if (!id.afonly) id.afonly = a.is_v4();
  take_port(need_field(r, "cm_id"), uint16_t(r.value("port", 0u)));
  return {{"addr", wire::to_string(id.src)}, {"port", id.src_port}, {"on_port", is_local(id.src)}};
}

// Address resolution: the source is the port's GID for the destination (source_gid.hpp: same family, and
// for IPv6 the same scope), so the port needs an address of the destination's family. A loopback
// destination (127.0.0.0/8, ::1) means this port itself, as rdma_cm resolves it to the local device. The
// peer's MAC is learnt by the engine's ARP or neighbour discovery when the REQ goes out; a peer that never
// answers makes the connection unreachable (the CM's REQ retries run out).
json CmService::resolve_addr(uint64_t s, const json& r, std::vector<int>&) {
  CmId& id = id_of(s, r);
  if (id.state != CmIdState::idle && id.state != CmIdState::addr_resolved) throw ServiceError(EINVAL, "wrong state");
  wire::IpAddress dst = need_ip(r, "dst");
  const auto source = source_gid_index(port_.gids, dst);
  if (!source) {
    throw ServiceError(EADDRNOTAVAIL, std::string("the port has no ") + (dst.is_v4() ? "IPv4" : "IPv6") + " address");
  }
  if (is_loopback(dst)) dst = port_.gids[*source];
  const auto check_family = [&](const wire::IpAddress& src) {
    if (!is_wildcard(src) && src.is_v4() != dst.is_v4()) {
      throw ServiceError(EINVAL, wire::to_string(src) + " and " + wire::to_string(dst) + " are of different families");
    }
  };
  if (!id.bound) {
    const wire::IpAddress src = r.contains("src") ? need_ip(r, "src") : wire::IpAddress{};
    if (!is_wildcard(src) && !is_local(src)) throw ServiceError(EADDRNOTAVAIL, wire::to_string(src) + " is not this port's");
    check_family(src);
    id.src = is_wildcard(src) ? port_.gids[*source] : src;
    id.dst = dst;  // before the port is taken: IDs with different destinations may share one
    id.dst_port = uint16_t(r.value("dst_port", 0u));
    // A source with a port binds to that port, as Linux's cma_bind_addr passes the whole source address to
    // rdma_bind_addr.
    take_port(need_field(r, "cm_id"), uint16_t(r.value("src_port", 0u)));
  } else if (is_wildcard(id.src)) {
    id.src = port_.gids[*source];
  } else if (is_loopback(id.src)) {
    // Linux resolves such an address and then fails the route with ENODEV (no RoCE device has it).
    throw ServiceError(ENODEV, "bound to " + wire::to_string(id.src) + ", which no RoCE port has");
  } else {
    check_family(id.src);
  }
  id.dst = dst;
  id.dst_port = uint16_t(r.value("dst_port", 0u));
  const int64_t timeout_ms = std::clamp<int64_t>(r.value("timeout_ms", int64_t(2000)), 1, 3'600'000);
  resolve_neighbour(need_field(r, "cm_id"), cm::Nanos(timeout_ms) * 1'000'000);
  return {{"src", wire::to_string(id.src)}, {"src_port", id.src_port}, {"dst", wire::to_string(id.dst)},
          {"sgid_index", sgid_index(id.src)}};
}

json CmService::resolve_route(uint64_t s, const json& r, std::vector<int>&) {
  CmId& id = id_of(s, r);
  if (id.state != CmIdState::addr_resolved) throw ServiceError(EINVAL, "the address is not resolved");
  id.state = CmIdState::route_resolved;
  id.path_mtu = uint8_t(port_.active_mtu);
  id.sl = service_level_of(id);  // Linux computes it here too (cma_resolve_iboe_route)
  queue_event(need_field(r, "cm_id"), RdmaCmEvent::route_resolved, 0);
  return {{"path_mtu", id.path_mtu}, {"hop_limit", 64}, {"traffic_class", id.tos}, {"sl", id.sl}};
}

json CmService::listen(uint64_t s, const json& r, std::vector<int>&) {
  CmId& id = id_of(s, r);
  const uint32_t n = need_field(r, "cm_id");
  if (id.state == CmIdState::listening) return json::object();  // backlog change
  if (id.state != CmIdState::idle) throw ServiceError(EINVAL, "wrong state");
  if (!id.bound) {
    id.src = wire::IpAddress::from_v4(0);
    if (!id.afonly) id.afonly = true;  // bound to 0.0.0.0, as Linux binds it, which makes an IPv4 ID afonly
    // (A program's listener on several devices asks each daemon for the port the first gave it.)
    take_port(n, uint16_t(r.value("port", 0u)));
  }
  const uint64_t sid = cm::service_id_of(id.port_space, id.src_port);
  if (listens_[sid]++ == 0) cm_.listen(sid);
  id.state = CmIdState::listening;
  return {{"port", id.src_port}};
}

json CmService::set_option(uint64_t s, const json& r, std::vector<int>&) {
  CmId& id = id_of(s, r);
  const std::string name = r.value("name", std::string());
  const uint32_t value = need_field(r, "value");
  if (name == "tos") {
    id.tos = uint8_t(value);
  } else if (name == "reuseaddr") {
    id.reuseaddr = value != 0;
  } else if (name == "afonly") {
    id.afonly = value != 0;
  } else if (name == "ack_timeout") {
    id.ack_timeout = uint8_t(std::min<uint32_t>(value, 31));
  } else {
    throw ServiceError(ENOSYS, "option " + name + " is not supported");
  }
  return json::object();
}

json CmService::query(uint64_t s, const json& r, std::vector<int>&) {
  const CmId& id = id_of(s, r);
  return {{"src", wire::to_string(id.src)}, {"dst", wire::to_string(id.dst)}, {"src_port", id.src_port},
          {"dst_port", id.dst_port}, {"sgid_index", sgid_index(id.src)}, {"state", int(id.state)}};
}

json CmService::stats(uint64_t, const json&, std::vector<int>&) {
  const cm::CmCounters& c = cm_.counters();
  return {{"rx_mads", c.rx_mads},           {"rx_malformed", c.rx_malformed},
          {"rx_unknown_connection", c.rx_unknown_connection}, {"rx_wrong_state", c.rx_wrong_state},
          {"rx_duplicates", c.rx_duplicates}, {"tx_mads", c.tx_mads},
          {"retransmissions", c.retransmissions}, {"timeouts", c.timeouts},
          {"rej_sent", c.rej_sent},         {"rej_received", c.rej_received},
          {"ids", ids_.size()},             {"connections", cm_.connection_count()}};
}

}  // namespace uroce::emulator
