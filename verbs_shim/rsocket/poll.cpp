// rpoll and rselect over any mix of rsockets and other descriptors. An rsocket is ready when its own
// state says so (data received, room to send, peer gone), which only processing its CQ reveals; so rpoll
// first checks every rsocket without blocking (spinning for the configured polling time), then arms each
// one's completion channel (its rdma_cm channel while it is not connected yet) and sleeps in poll(2) on
// those descriptors and the others together (and on each connected rsocket's rdma_cm channel, which says
// when the peer has gone). Wake-ups that turn out to be nothing the caller asked for
// (a credit grant, say) go back to sleep.
#include <poll.h>
#include <rdma/rsocket.h>
#include <sys/select.h>
#include <sys/time.h>

#include <vector>

#include "verbs_shim/rdmacm/cma.hpp"
#include "verbs_shim/rsocket/rsocket.hpp"

using namespace uroce::rsocket;

namespace {

bool poll_all(Rsocket*) { return true; }
bool is_cq_armed(Rsocket* rs) { return rs->cq_armed; }

short poll_rs(Rsocket* rs, short events, bool nonblock, bool (*test)(Rsocket*)) {
  if (rs->dgram != nullptr) return datagram_poll(rs, events);
  for (;;) {
    if ((rs->state & kConnected) || rs->state == kDisconnected || (rs->state & kError)) {
      process_cq(rs, nonblock, test);
      short revents = 0;
      if ((events & POLLIN) && conn_have_rdata(rs)) revents |= POLLIN;
      if ((events & POLLOUT) && can_send(rs)) revents |= POLLOUT;
      // A peer that has gone is POLLHUP only once what it sent has been read (before, POLLIN alone), as a
      // TCP socket reports a FIN. librdmacm says POLLHUP at once, and a program that takes POLLHUP for an
      // error (rstream's do_poll) then fails whenever the end overtakes its reading of the last data.
      if (rs->state == kDisconnected) {
        if (!have_rdata(rs)) revents |= POLLHUP;
      } else if (!(rs->state & kConnected)) {
        revents |= POLLERR;
      }
      return revents;
    }
    if (rs->state == kListening) {  // a connection request waits on the channel
      pollfd p{rs->cm_id->channel->fd, events, 0};
      poll(&p, 1, 0);
      return p.revents;
    }
    if (rs->state & kOpening) {
      if (do_connect(rs) != 0 && errno == EINPROGRESS) {
        errno = 0;
      } else {
        continue;  // connected (or failed): report that state
      }
    }
    if (rs->state == kConnectError) return short(POLLERR | (events & (POLLIN | POLLOUT)));
    return 0;
  }
}

int check_all(pollfd* fds, nfds_t n) {
  int ready = 0;
  for (nfds_t i = 0; i < n; ++i) {
    if (Rsocket* rs = lookup(fds[i].fd)) {
      fds[i].revents = poll_rs(rs, fds[i].events, true, poll_all);
    } else {
      poll(&fds[i], 1, 0);
    }
    if (fds[i].revents != 0) ++ready;
  }
  return ready;
}

// Prepares the descriptors to sleep on: rfds[i] stands for fds[i]; after them, the rdma_cm channel of each
// connected rsocket (extra[k] names its fds index), whose DISCONNECTED says the peer has gone. 1 if an
// rsocket turned out ready while arming.
int arm_all(std::vector<pollfd>& rfds, std::vector<nfds_t>& extra, pollfd* fds, nfds_t n) {
  rfds.resize(n);
  extra.clear();
  for (nfds_t i = 0; i < n; ++i) {
    if (Rsocket* rs = lookup(fds[i].fd); rs != nullptr && rs->dgram != nullptr) {
      int fd = -1;
      const int ready = datagram_arm(rs, fds[i].events, fd);
      if (ready != 0) {
        fds[i].revents = ready > 0 ? short(ready) : short(POLLERR);
        return 1;
      }
      rfds[i] = {fd, POLLIN, 0};
      continue;
    }
    if (Rsocket* rs = lookup(fds[i].fd)) {
      fds[i].revents = poll_rs(rs, fds[i].events, false, is_cq_armed);
      if (fds[i].revents != 0) return 1;
      const bool connected = rs->state >= kConnected;
      rfds[i].fd = connected ? rs->cm_id->recv_cq_channel->fd : rs->cm_id->channel->fd;
      rfds[i].events = POLLIN;
      if (connected && (rs->state & kConnected)) extra.push_back(i);
    } else {
      rfds[i].fd = fds[i].fd;
      rfds[i].events = fds[i].events;
    }
    rfds[i].revents = 0;
  }
  for (nfds_t i : extra) rfds.push_back({lookup(fds[i].fd)->cm_id->channel->fd, POLLIN, 0});
  return 0;
}

int take_events(const std::vector<pollfd>& rfds, const std::vector<nfds_t>& extra, pollfd* fds, nfds_t n) {
  std::vector<bool> woken(n, false);
  for (nfds_t i = 0; i < n; ++i) woken[i] = rfds[i].revents != 0;
  for (size_t k = 0; k < extra.size(); ++k) {
    if (rfds[n + k].revents == 0) continue;
    woken[extra[k]] = true;
    if (Rsocket* rs = lookup(fds[extra[k]].fd)) {
      std::lock_guard g(rs->cq_lock);
      take_cm_events(rs);
    }
  }
  int ready = 0;
  for (nfds_t i = 0; i < n; ++i) {
    if (!woken[i]) continue;
    if (Rsocket* rs = lookup(fds[i].fd)) {
      if (rfds[i].revents != 0 && rs->dgram != nullptr) {
        datagram_woken(rs);
      } else if (rfds[i].revents != 0) {
        std::lock_guard g(rs->cq_wait_lock);
        get_cq_event(rs);
      }
      fds[i].revents = poll_rs(rs, fds[i].events, true, poll_all);
    } else {
      fds[i].revents = rfds[i].revents;
    }
    if (fds[i].revents != 0) ++ready;
  }
  return ready;
}

}  // namespace

CMA_EXPORT int rpoll(pollfd* fds, nfds_t nfds, int timeout) {
  if (nfds > 0 && fds == nullptr) return fail(EFAULT);
  SpinBudget spin;
  do {
    const int ready = check_all(fds, nfds);
    if (ready != 0 || timeout == 0) return ready;
  } while (spin.left());
  thread_local std::vector<pollfd> rfds;
  thread_local std::vector<nfds_t> extra;
  int rc;
  do {
    if ((rc = arm_all(rfds, extra, fds, nfds)) != 0) break;
    rc = poll(rfds.data(), rfds.size(), timeout);
    if (rc <= 0) break;
    rc = take_events(rfds, extra, fds, nfds);
  } while (rc == 0);
  return rc;
}

CMA_EXPORT int rselect(int nfds, fd_set* readfds, fd_set* writefds, fd_set* exceptfds, timeval* timeout) {
  if (nfds < 0 || nfds > FD_SETSIZE) return fail(EINVAL);
  std::vector<pollfd> fds;
  for (int fd = 0; fd < nfds; ++fd) {
    short events = 0;
    const bool r = readfds != nullptr && FD_ISSET(fd, readfds);
    const bool w = writefds != nullptr && FD_ISSET(fd, writefds);
    const bool e = exceptfds != nullptr && FD_ISSET(fd, exceptfds);
    if (r) events |= POLLIN;
    if (w) events |= POLLOUT;
    if (r || w || e) fds.push_back({fd, events, 0});
  }
  const int ms = timeout == nullptr ? -1 : int(timeout->tv_sec * 1000 + timeout->tv_usec / 1000);
  const int rc = rpoll(fds.data(), fds.size(), ms);
  if (readfds != nullptr) FD_ZERO(readfds);
  if (writefds != nullptr) FD_ZERO(writefds);
  if (exceptfds != nullptr) FD_ZERO(exceptfds);
  if (rc <= 0) return rc;
  int count = 0;
  for (const pollfd& p : fds) {
    if (readfds != nullptr && (p.revents & (POLLIN | POLLHUP))) {
      FD_SET(p.fd, readfds);
      ++count;
    }
    if (writefds != nullptr && (p.revents & POLLOUT)) {
      FD_SET(p.fd, writefds);
      ++count;
    }
    if (exceptfds != nullptr && (p.revents & ~(POLLIN | POLLOUT))) {
      FD_SET(p.fd, exceptfds);
      ++count;
    }
  }
  return count;
}
