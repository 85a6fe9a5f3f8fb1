/* Datagram rsockets (SOCK_DGRAM), call by call, against what a UDP socket does: built against the real
 * <rdma/rsocket.h> and run under uroce-run like any application, so it checks uroce's librdmacm through
 * the ABI programs use.
 *
 *   datagram_check ADDRESS
 *
 * ADDRESS is one of the daemon's (IPv4 or IPv6). Three sockets of this one process talk through the daemon:
 * two bound to ADDRESS, one never bound (it takes an address and port when it connects). Prints each check
 * and exits 0 if all passed, 1 at the first that did not. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>
#include <rdma/rsocket.h>
#include <stdint.h>

static int failures;

static void check(int ok, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("%s: ", ok ? "ok" : "FAILED");
  vprintf(fmt, ap);
  printf(ok ? "\n" : " (errno %d: %s)\n", errno, strerror(errno));
  va_end(ap);
  fflush(stdout);
  if (!ok) {
    ++failures;
    exit(1);
  }
}

static socklen_t addr_len(const struct sockaddr_storage *a) {
  return a->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

static unsigned port_of(const struct sockaddr_storage *a) {
  return a->ss_family == AF_INET6 ? ntohs(((const struct sockaddr_in6 *)a)->sin6_port)
                                  : ntohs(((const struct sockaddr_in *)a)->sin_port);
}

static int same_ip(const struct sockaddr_storage *a, const struct sockaddr_storage *b) {
  if (a->ss_family != b->ss_family) return 0;
  if (a->ss_family == AF_INET6)
    return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr, &((const struct sockaddr_in6 *)b)->sin6_addr, 16);
  return ((const struct sockaddr_in *)a)->sin_addr.s_addr == ((const struct sockaddr_in *)b)->sin_addr.s_addr;
}

static void set_port(struct sockaddr_storage *a, unsigned port) {
  if (a->ss_family == AF_INET6)
    ((struct sockaddr_in6 *)a)->sin6_port = htons(port);
  else
    ((struct sockaddr_in *)a)->sin_port = htons(port);
}

/* A peer that is no rsocket: a UD QP of its own finds the rsocket at `dest` (SIDR, as an rsocket does) and
 * sends it datagrams without a valid header: too short, an unknown version, an IPv6 header cut short. */
static int send_garbage(const struct sockaddr_storage *dest) {
  struct rdma_cm_id *id = NULL;
  if (rdma_create_id(NULL, &id, NULL, RDMA_PS_UDP) != 0) return -1;
  int ok = rdma_resolve_addr(id, NULL, (struct sockaddr *)dest, 2000) == 0 && rdma_resolve_route(id, 2000) == 0;
  struct ibv_qp_init_attr qa = {0};
  qa.cap.max_send_wr = qa.cap.max_recv_wr = 4;
  qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
  qa.qp_type = IBV_QPT_UD;
  qa.sq_sig_all = 1;
  ok = ok && rdma_create_qp(id, NULL, &qa) == 0 && rdma_connect(id, NULL) == 0;
  static uint8_t bytes[3][64];
  memset(bytes, 0, sizeof bytes);
  bytes[1][0] = 9, bytes[1][1] = 8;   /* version 9 */
  bytes[2][0] = 6, bytes[2][1] = 24;  /* IPv6, in 16 bytes */
  const size_t lengths[3] = {3, 64, 16};
  struct ibv_mr *mr = ok ? ibv_reg_mr(id->pd, bytes, sizeof bytes, IBV_ACCESS_LOCAL_WRITE) : NULL;
  struct ibv_ah *ah = NULL;
  if (mr != NULL) {
    struct ibv_ah_attr attr = id->event->param.ud.ah_attr;
    ah = ibv_create_ah(id->pd, &attr);
  }
  for (int i = 0; ah != NULL && i < 3; ++i) {
    struct ibv_sge sge = {(uintptr_t)bytes[i], (uint32_t)lengths[i], mr->lkey};
    struct ibv_send_wr wr = {0}, *bad = NULL;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.wr.ud.ah = ah;
    wr.wr.ud.remote_qpn = id->event->param.ud.qp_num;
    wr.wr.ud.remote_qkey = id->event->param.ud.qkey;
    struct ibv_wc wc;
    int n = 0;
    if (ibv_post_send(id->qp, &wr, &bad) != 0) break;
    for (int spins = 0; n == 0 && spins < 100000000; ++spins) n = ibv_poll_cq(id->send_cq, 1, &wc);
    ok = ok && n == 1 && wc.status == IBV_WC_SUCCESS;
  }
  ok = ok && ah != NULL;
  if (ah != NULL) ibv_destroy_ah(ah);
  if (mr != NULL) ibv_dereg_mr(mr);
  rdma_destroy_qp(id);
  rdma_destroy_id(id);
  return ok ? 0 : -1;
}

/* Waits (rpoll, up to 5 s) until `fd` has a datagram. */
static int readable(int fd) {
  struct pollfd p = {fd, POLLIN, 0};
  return rpoll(&p, 1, 5000) == 1 && (p.revents & POLLIN);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: datagram_check ADDRESS\n");
    return 2;
  }
  struct addrinfo hints = {0}, *ai = NULL;
  hints.ai_flags = AI_NUMERICHOST;
  hints.ai_socktype = SOCK_DGRAM;
  if (getaddrinfo(argv[1], NULL, &hints, &ai) != 0) {
    fprintf(stderr, "datagram_check: %s is no address\n", argv[1]);
    return 2;
  }
  struct sockaddr_storage here;
  memcpy(&here, ai->ai_addr, ai->ai_addrlen);
  const int family = ai->ai_family;
  freeaddrinfo(ai);

  /* Two sockets bound to the address, on ports of the daemon's choosing (0). */
  int a = rsocket(family, SOCK_DGRAM, 0), b = rsocket(family, SOCK_DGRAM, 0);
  check(a >= 0 && b >= 0, "rsocket(SOCK_DGRAM) twice");
  int type = 0;
  socklen_t len = sizeof type;
  check(rgetsockopt(a, SOL_SOCKET, SO_TYPE, &type, &len) == 0 && type == SOCK_DGRAM, "SO_TYPE is SOCK_DGRAM");
  struct sockaddr_storage any = here;
  set_port(&any, 0);
  check(rbind(a, (struct sockaddr *)&any, addr_len(&any)) == 0, "rbind to %s, port 0", argv[1]);
  check(rbind(b, (struct sockaddr *)&any, addr_len(&any)) == 0, "rbind a second socket");
  struct sockaddr_storage name_a, name_b;
  /* (Each call is made before check(): its arguments may be evaluated in any order.) */
  len = sizeof name_a;
  int rc = rgetsockname(a, (struct sockaddr *)&name_a, &len);
  check(rc == 0 && same_ip(&name_a, &here) && port_of(&name_a) != 0, "rgetsockname: the address, and a port was chosen (%u)",
        port_of(&name_a));
  len = sizeof name_b;
  rc = rgetsockname(b, (struct sockaddr *)&name_b, &len);
  check(rc == 0 && port_of(&name_b) != port_of(&name_a), "the second socket has a port of its own (%u)",
        port_of(&name_b));
  check(rbind(a, (struct sockaddr *)&any, addr_len(&any)) == -1 && errno == EINVAL, "a second rbind: EINVAL");
  struct sockaddr_storage taken = name_a;
  int c = rsocket(family, SOCK_DGRAM, 0);
  check(c >= 0 && rbind(c, (struct sockaddr *)&taken, addr_len(&taken)) == -1 && errno == EADDRINUSE,
        "rbind to a port in use: EADDRINUSE");
  rclose(c);
  check(rlisten(a, 1) == -1 && errno == EOPNOTSUPP, "rlisten: EOPNOTSUPP");

  /* Nothing yet: a nonblocking receive says so, rpoll with no time says nothing is ready. */
  char buf[4096];
  check(rrecv(a, buf, sizeof buf, MSG_DONTWAIT) == -1 && (errno == EAGAIN || errno == EWOULDBLOCK),
        "rrecv with nothing received, MSG_DONTWAIT: EAGAIN");
  struct pollfd p = {a, POLLIN | POLLOUT, 0};
  check(rpoll(&p, 1, 0) == 1 && p.revents == POLLOUT, "rpoll: writable, not readable");

  /* a -> b, and b answers where it came from. */
  const char hello[] = "hello, datagram";
  check(rsendto(a, hello, sizeof hello, 0, (struct sockaddr *)&name_b, addr_len(&name_b)) == (ssize_t)sizeof hello,
        "rsendto b: the whole datagram");
  check(readable(b), "rpoll: b becomes readable");
  struct sockaddr_storage from;
  len = sizeof from;
  memset(buf, 0, sizeof buf);
  ssize_t n = rrecvfrom(b, buf, sizeof buf, 0, (struct sockaddr *)&from, &len);
  check(n == (ssize_t)sizeof hello && !memcmp(buf, hello, sizeof hello), "rrecvfrom: the same bytes");
  check(len == addr_len(&name_a) && same_ip(&from, &name_a) && port_of(&from) == port_of(&name_a),
        "rrecvfrom: the sender's address and port (%u)", port_of(&from));
  const char reply[] = "and back";
  check(rsendto(b, reply, sizeof reply, 0, (struct sockaddr *)&from, len) == (ssize_t)sizeof reply,
        "rsendto the sender");
  len = sizeof from;
  check(readable(a) && rrecvfrom(a, buf, sizeof buf, 0, (struct sockaddr *)&from, &len) == (ssize_t)sizeof reply &&
            !memcmp(buf, reply, sizeof reply) && port_of(&from) == port_of(&name_b),
        "the answer arrives, from b");

  /* Datagram boundaries: a short buffer takes the start and the rest is gone; MSG_PEEK leaves it;
   * MSG_TRUNC says the real length. */
  char big[1000];
  for (size_t i = 0; i < sizeof big; ++i) big[i] = (char)(i * 7);
  for (int k = 0; k < 3; ++k)
    check(rsendto(a, big, sizeof big - (size_t)k, 0, (struct sockaddr *)&name_b, addr_len(&name_b)) ==
              (ssize_t)(sizeof big - (size_t)k),
          "rsendto %zu bytes", sizeof big - (size_t)k);
  check(readable(b), "they arrive");
  n = rrecv(b, buf, 10, MSG_PEEK);
  check(n == 10 && !memcmp(buf, big, 10), "MSG_PEEK: the first 10 bytes");
  n = rrecv(b, buf, 10, 0);
  check(n == 10 && !memcmp(buf, big, 10), "a 10-byte buffer: the first 10 bytes, the rest discarded");
  check(readable(b), "the next datagram is there");
  n = rrecv(b, buf, 10, MSG_TRUNC);
  check(n == (ssize_t)sizeof big - 1, "MSG_TRUNC: its whole length (%zd)", n);
  check(readable(b), "and the third");
  n = rrecv(b, buf, sizeof buf, 0);
  check(n == (ssize_t)sizeof big - 2 && !memcmp(buf, big, sizeof big - 2), "whole, in order: %zd bytes", n);

  /* Too long for one packet: EMSGSIZE. */
  static char huge[65536];
  check(rsendto(a, huge, sizeof huge, 0, (struct sockaddr *)&name_b, addr_len(&name_b)) == -1 && errno == EMSGSIZE,
        "a datagram longer than the path MTU allows: EMSGSIZE");

  /* A socket never bound: rconnect gives it the address and a port; rsend goes to its peer, which sees
   * that address and port. rgetpeername names the peer. */
  c = rsocket(family, SOCK_DGRAM, 0);
  check(c >= 0, "a third socket, not bound");
  check(rsend(c, hello, sizeof hello, 0) == -1 && errno == EDESTADDRREQ, "rsend before rconnect: EDESTADDRREQ");
  check(rconnect(c, (struct sockaddr *)&name_b, addr_len(&name_b)) == 0, "rconnect to b");
  struct sockaddr_storage name_c, peer;
  len = sizeof name_c;
  rc = rgetsockname(c, (struct sockaddr *)&name_c, &len);
  check(rc == 0 && same_ip(&name_c, &here) && port_of(&name_c) != 0, "rgetsockname: bound by rconnect, port %u",
        port_of(&name_c));
  len = sizeof peer;
  check(rgetpeername(c, (struct sockaddr *)&peer, &len) == 0 && port_of(&peer) == port_of(&name_b),
        "rgetpeername: b");
  check(rsend(c, hello, 5, 0) == 5, "rsend to the connected peer");
  len = sizeof from;
  check(readable(b) && rrecvfrom(b, buf, sizeof buf, 0, (struct sockaddr *)&from, &len) == 5 &&
            port_of(&from) == port_of(&name_c),
        "b receives it from c's port");

  /* Connected, c takes datagrams from b only, as a connected UDP socket does; rconnect with AF_UNSPEC
   * dissolves the association and c keeps its port. (Whichever of the two datagrams arrives first, a's
   * must never be read.) */
  check(rsendto(a, hello, 3, 0, (struct sockaddr *)&name_c, addr_len(&name_c)) == 3, "a sends c a datagram");
  check(rsendto(b, hello, 4, 0, (struct sockaddr *)&name_c, addr_len(&name_c)) == 4, "b sends c one");
  len = sizeof from;
  check(readable(c) && rrecvfrom(c, buf, sizeof buf, 0, (struct sockaddr *)&from, &len) == 4 &&
            port_of(&from) == port_of(&name_b),
        "c, connected to b, receives b's");
  p = (struct pollfd){c, POLLIN, 0};
  check(rpoll(&p, 1, 300) == 0, "and not a's");
  struct sockaddr unspec = {.sa_family = AF_UNSPEC};
  check(rconnect(c, &unspec, sizeof unspec) == 0, "rconnect(AF_UNSPEC)");
  check(rsend(c, hello, 5, 0) == -1 && errno == EDESTADDRREQ, "rsend after it: EDESTADDRREQ");
  len = sizeof peer;
  check(rgetpeername(c, (struct sockaddr *)&peer, &len) == -1 && errno == ENOTCONN, "rgetpeername: ENOTCONN");
  struct sockaddr_storage name_c2;
  len = sizeof name_c2;
  rc = rgetsockname(c, (struct sockaddr *)&name_c2, &len);
  check(rc == 0 && port_of(&name_c2) == port_of(&name_c), "c keeps its port");
  check(rsendto(a, hello, 3, 0, (struct sockaddr *)&name_c, addr_len(&name_c)) == 3, "a sends c another");
  len = sizeof from;
  check(readable(c) && rrecvfrom(c, buf, sizeof buf, 0, (struct sockaddr *)&from, &len) == 3 &&
            port_of(&from) == port_of(&name_a),
        "c, no longer connected, receives a's");

  /* Nothing bound at a port: the datagram is lost, as over UDP, and SO_ERROR says why. */
  struct sockaddr_storage nobody = here;
  set_port(&nobody, port_of(&name_a) == 9 ? 10 : 9);
  check(rsendto(a, hello, sizeof hello, 0, (struct sockaddr *)&nobody, addr_len(&nobody)) == (ssize_t)sizeof hello,
        "rsendto a port nobody is bound to: sent (and lost)");
  int err = 0;
  len = sizeof err;
  rc = rgetsockopt(a, SOL_SOCKET, SO_ERROR, &err, &len);
  check(rc == 0 && err != 0, "SO_ERROR: %s", strerror(err));
  len = sizeof err;
  check(rgetsockopt(a, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0, "SO_ERROR is cleared once read");

  /* Nonblocking, a first datagram to a peer does not wait for it to be found (as a UDP sendto does not wait
   * for ARP): rsendto returns at once, and what it sent meanwhile goes, in order, once the peer is found; to
   * a port nobody is bound to it is lost, and SO_ERROR says so once the peer's daemon has answered. */
  int e = rsocket(family, SOCK_DGRAM, 0);
  check(e >= 0 && rbind(e, (struct sockaddr *)&any, addr_len(&any)) == 0 &&
            rfcntl(e, F_SETFL, rfcntl(e, F_GETFL, 0) | O_NONBLOCK) == 0,
        "a nonblocking socket, bound");
  struct sockaddr_storage name_e;
  len = sizeof name_e;
  rc = rgetsockname(e, (struct sockaddr *)&name_e, &len);
  check(rc == 0, "rgetsockname");
  int sent_at_once = 1;
  for (int i = 0; i < 3; ++i) sent_at_once &= rsendto(e, &i, sizeof i, 0, (struct sockaddr *)&name_b, addr_len(&name_b)) == (ssize_t)sizeof i;
  check(sent_at_once, "three rsendto to b, a peer it never reached: sent");
  int firsts = 0, firsts_in_order = 1;
  while (firsts < 3 && readable(b)) {
    int v;
    len = sizeof from;
    while (rrecvfrom(b, &v, sizeof v, MSG_DONTWAIT, (struct sockaddr *)&from, &len) == (ssize_t)sizeof v) {
      firsts_in_order &= v == firsts++ && port_of(&from) == port_of(&name_e);
      len = sizeof from;
    }
  }
  check(firsts == 3 && firsts_in_order, "b receives all three, in order, from e (%d)", firsts);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  rc = (int)rsendto(e, hello, sizeof hello, 0, (struct sockaddr *)&nobody, addr_len(&nobody));
  clock_gettime(CLOCK_MONOTONIC, &t1);
  check(rc == (int)sizeof hello, "rsendto a port nobody is bound to: sent (and lost)");
  err = 0;
  for (int tries = 0; err == 0 && tries < 500; ++tries) {
    len = sizeof err;
    if (rgetsockopt(e, SOL_SOCKET, SO_ERROR, &err, &len) != 0) break;
    if (err == 0) usleep(10000);
  }
  check(err == ECONNREFUSED, "and SO_ERROR says so later: %s", strerror(err));
  /* An address on no host: the blocking rsendto above would wait for its address resolution to give up. */
  struct sockaddr_storage nowhere = here;
  if (family == AF_INET6) {
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&nowhere;
    s6->sin6_addr.s6_addr[15] = s6->sin6_addr.s6_addr[15] == 0xfa ? 0xfb : 0xfa;
    s6->sin6_port = htons(9);
  } else {
    struct sockaddr_in *s4 = (struct sockaddr_in *)&nowhere;
    ((uint8_t *)&s4->sin_addr)[3] = ((uint8_t *)&s4->sin_addr)[3] == 250 ? 251 : 250;
    s4->sin_port = htons(9);
  }
  clock_gettime(CLOCK_MONOTONIC, &t0);
  rc = (int)rsendto(e, hello, sizeof hello, 0, (struct sockaddr *)&nowhere, addr_len(&nowhere));
  clock_gettime(CLOCK_MONOTONIC, &t1);
  const double waited = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  check(rc == (int)sizeof hello && waited < 0.2, "rsendto an address on no host: sent at once (%.3f s)", waited);
  check(rclose(e) == 0, "rclose it while that peer is still looked for");

  /* A peer that is no rsocket sends b datagrams it cannot read: dropped (counted), never delivered, and b
   * goes on receiving. */
  check(send_garbage(&name_b) == 0, "a plain UD QP sends b three datagrams without a valid header");
  p.fd = b;
  p.events = POLLIN;
  check(rpoll(&p, 1, 200) == 0, "b has nothing to read");
  check(rsendto(a, hello, sizeof hello, 0, (struct sockaddr *)&name_b, addr_len(&name_b)) == (ssize_t)sizeof hello &&
            readable(b) && rrecv(b, buf, sizeof buf, 0) == (ssize_t)sizeof hello && !memcmp(buf, hello, sizeof hello),
        "the next rsocket datagram arrives as before");

  /* Many in a row, more than the send queue holds at once, all received in order. Never more than 256
   * unread: a UD datagram that finds no receive posted is lost (as a UDP one that finds the socket's buffer
   * full), and the receive ring holds 384. */
  const int count = 2000, window = 256;
  int received = 0, in_order = 1;
  for (int i = 0; i < count; ++i) {
    while (i - received >= window && readable(b)) {
      int v;
      while (rrecv(b, &v, sizeof v, MSG_DONTWAIT) == (ssize_t)sizeof v) in_order &= v == received++;
    }
    while (rsendto(a, &i, sizeof i, 0, (struct sockaddr *)&name_b, addr_len(&name_b)) != (ssize_t)sizeof i) {
      if (errno != EAGAIN) check(0, "rsendto in a row");
    }
    int v;
    while (rrecv(b, &v, sizeof v, MSG_DONTWAIT) == (ssize_t)sizeof v) in_order &= v == received++;
  }
  while (received < count && readable(b)) {
    int v;
    while (rrecv(b, &v, sizeof v, MSG_DONTWAIT) == (ssize_t)sizeof v) in_order &= v == received++;
  }
  check(received == count && in_order, "%d datagrams sent in a row, %d received, in order", count, received);

  check(rclose(a) == 0 && rclose(b) == 0 && rclose(c) == 0, "rclose");
  check(rclose(a) == -1 && errno == EBADF, "rclose again: EBADF");
  printf("all %s datagram checks passed\n", family == AF_INET6 ? "IPv6" : "IPv4");
  return failures != 0;
}
