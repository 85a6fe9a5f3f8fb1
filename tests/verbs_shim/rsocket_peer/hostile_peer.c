/* An rsocket peer that breaks the protocol on purpose, to check that an unmodified rsocket program (rstream)
 * through uroce's librdmacm ends with a clear error instead of crashing, hanging or reading past its
 * buffers. It speaks the wire format of verbs_shim/rsocket/protocol.hpp (librdmacm's) by hand, with plain
 * rdma_cm and verbs calls: built against the real <rdma/rdma_cma.h> and run under uroce-run like any
 * application.
 *
 *   hostile_peer MODE ADDRESS PORT
 *
 * As a server on ADDRESS:PORT (the victim is an rstream client):
 *   no-conn-data   accepts with no private data at all, as a plain rdma_cm server would
 *   bad-version    accepts with a ConnData of version 2
 *   oversized      accepts properly, then sends a data message longer than half the victim's ring (the
 *                  most it can ever have been granted)
 *   flood          accepts properly, then sends more data messages than the victim granted receives for
 * As a client to ADDRESS:PORT (the victim is an rstream server):
 *   bad-request    connects with a ConnData of version 2; the victim must reject it
 *
 * Prints what it did and what came back; exits 0 once its misbehaviour has been carried out and the
 * victim's answer (a REJ, or the victim leaving: DISCONNECTED) has arrived, 1 on anything else. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <rdma/rdma_cma.h>

#define CONN_DATA_SIZE 40
#define RING_SIZE (64 * 1024)
#define MY_CREDITS 1   /* the victim may send one message: its 16-byte sync; no grant ever follows */
#define SEND_DEPTH 64
#define WAIT_MS 20000

static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("hostile_peer: ", stdout);
  vprintf(fmt, ap);
  va_end(ap);
  putchar('\n');
  exit(1);
}

/* --- the ConnData of the connection's private data (protocol.hpp: 40 bytes, big-endian) -------------- */

struct sge {
  uint64_t addr;
  uint32_t key, length;
};

struct conn_data {
  uint8_t version, flags;
  uint16_t credits;
  uint8_t target_iomap_size;
  struct sge target_sgl, data_buf;
};

static void put_sge(uint8_t *p, const struct sge *s) {
  uint64_t a = htobe64(s->addr);
  uint32_t k = htobe32(s->key), l = htobe32(s->length);
  memcpy(p, &a, 8);
  memcpy(p + 8, &k, 4);
  memcpy(p + 12, &l, 4);
}

static struct sge get_sge(const uint8_t *p) {
  uint64_t a;
  uint32_t k, l;
  memcpy(&a, p, 8);
  memcpy(&k, p + 8, 4);
  memcpy(&l, p + 12, 4);
  return (struct sge){be64toh(a), be32toh(k), be32toh(l)};
}

static void encode(uint8_t out[CONN_DATA_SIZE], const struct conn_data *c) {
  memset(out, 0, CONN_DATA_SIZE);
  out[0] = c->version;
  out[1] = c->flags;
  out[2] = (uint8_t)(c->credits >> 8);
  out[3] = (uint8_t)c->credits;
  out[7] = c->target_iomap_size;
  put_sge(out + 8, &c->target_sgl);
  put_sge(out + 24, &c->data_buf);
}

static int decode(const void *data, size_t len, struct conn_data *c) {
  const uint8_t *p = data;
  if (p == NULL || len < CONN_DATA_SIZE) return -1;
  c->version = p[0];
  c->flags = p[1];
  c->credits = (uint16_t)(p[2] << 8 | p[3]);
  c->target_iomap_size = p[7];
  c->target_sgl = get_sge(p + 8);
  c->data_buf = get_sge(p + 24);
  return 0;
}

/* An rsocket immediate: op in the top three bits (0: data, bytes written), data below. */
static uint32_t data_message(uint32_t bytes) { return bytes & 0x1FFFFFFF; }

/* --- rdma_cm -------------------------------------------------------------------------------------------- */

static struct rdma_event_channel *channel;

/* The next event, or die after WAIT_MS; the caller acks it. */
static struct rdma_cm_event *next_event(void) {
  struct pollfd p = {channel->fd, POLLIN, 0};
  if (poll(&p, 1, WAIT_MS) != 1) die("no rdma_cm event within %d ms", WAIT_MS);
  struct rdma_cm_event *e = NULL;
  if (rdma_get_cm_event(channel, &e) != 0) die("rdma_get_cm_event: %s", strerror(errno));
  return e;
}

static struct rdma_cm_event *expect_event(enum rdma_cm_event_type type) {
  struct rdma_cm_event *e = next_event();
  if (e->event != type)
    die("expected %s, got %s (status %d)", rdma_event_str(type), rdma_event_str(e->event), e->status);
  return e;
}

static struct rdma_addrinfo *resolve(const char *address, const char *port, int passive) {
  struct rdma_addrinfo hints = {0}, *res = NULL;
  hints.ai_port_space = RDMA_PS_TCP;
  hints.ai_flags = passive ? RAI_PASSIVE : 0;
  int rc = rdma_getaddrinfo(address, port, &hints, &res);
  if (rc != 0) die("rdma_getaddrinfo %s %s: %s", address, port, gai_strerror(rc));
  return res;
}

/* --- the connection's resources ---------------------------------------------------------------------- */

struct conn {
  struct rdma_cm_id *id;
  struct ibv_pd *pd;
  struct ibv_cq *cq;
  struct ibv_mr *mr;
  uint8_t *mem; /* [0, 64): our target SGL array; [RING_SIZE, 2 * RING_SIZE): our receive ring */
};

static void make_qp(struct conn *c) {
  c->pd = ibv_alloc_pd(c->id->verbs);
  if (c->pd == NULL) die("ibv_alloc_pd: %s", strerror(errno));
  c->cq = ibv_create_cq(c->id->verbs, 2 * SEND_DEPTH + 2 * MY_CREDITS, NULL, NULL, 0);
  if (c->cq == NULL) die("ibv_create_cq: %s", strerror(errno));
  struct ibv_qp_init_attr a = {0};
  a.send_cq = a.recv_cq = c->cq;
  a.qp_type = IBV_QPT_RC;
  a.cap.max_send_wr = SEND_DEPTH;
  a.cap.max_recv_wr = MY_CREDITS;
  a.cap.max_send_sge = a.cap.max_recv_sge = 1;
  if (rdma_create_qp(c->id, c->pd, &a) != 0) die("rdma_create_qp: %s", strerror(errno));
  c->mem = calloc(1, 2 * RING_SIZE);
  if (c->mem == NULL) die("out of memory");
  c->mr = ibv_reg_mr(c->pd, c->mem, 2 * RING_SIZE, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (c->mr == NULL) die("ibv_reg_mr: %s", strerror(errno));
  for (int i = 0; i < MY_CREDITS; ++i) { /* data comes by WRITE WITH IMMEDIATE: receives take no buffer */
    struct ibv_recv_wr wr = {0}, *bad = NULL;
    if (ibv_post_recv(c->id->qp, &wr, &bad) != 0) die("ibv_post_recv failed");
  }
}

/* What a well-behaved rsocket would put in its private data; VERSION 1 is the only one there is. */
static struct conn_data my_conn_data(const struct conn *c, uint8_t version) {
  struct conn_data d = {0};
  d.version = version;
  d.flags = __BYTE_ORDER == __BIG_ENDIAN ? 1 : 0; /* kConnFlagNetworkOrder; no iomap */
  d.credits = MY_CREDITS;
  d.target_sgl = (struct sge){(uintptr_t)c->mem, c->mr->rkey, 2};
  d.data_buf = (struct sge){(uintptr_t)c->mem + RING_SIZE, c->mr->rkey, RING_SIZE / 2};
  return d;
}

static long long now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static struct ibv_wc poll_one(struct conn *c) {
  struct ibv_wc wc;
  const long long deadline = now_ms() + WAIT_MS;
  for (;;) {
    int n = ibv_poll_cq(c->cq, 1, &wc);
    if (n < 0) die("ibv_poll_cq failed");
    if (n == 1) return wc;
    if (now_ms() > deadline) die("no completion within %d ms", WAIT_MS);
  }
}

/* RDMA WRITE WITH IMMEDIATE of LENGTH bytes of our memory to ADDR, signalled, at most SEND_DEPTH of them
 * outstanding. Returns -1 once one has failed: a victim that stopped taking them (it gave up on us, and
 * its QP no longer posts receives or is gone) is the expected end of a flood, not an error of ours. */
static int outstanding;

static int write_imm(struct conn *c, uint64_t addr, uint32_t rkey, uint32_t length, uint32_t imm) {
  if (outstanding == SEND_DEPTH) {
    struct ibv_wc wc = poll_one(c);
    --outstanding;
    if (wc.status != IBV_WC_SUCCESS) {
      printf("a write with immediate ended with %s\n", ibv_wc_status_str(wc.status));
      return -1;
    }
  }
  struct ibv_sge sge = {(uintptr_t)c->mem, length, c->mr->lkey};
  struct ibv_send_wr wr = {0}, *bad = NULL;
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = length ? 1 : 0;
  wr.imm_data = htonl(imm);
  wr.wr.rdma.remote_addr = addr;
  wr.wr.rdma.rkey = rkey;
  if (ibv_post_send(c->id->qp, &wr, &bad) != 0) die("ibv_post_send failed");
  ++outstanding;
  return 0;
}

/* The victim's first message (rstream's 16-byte sync): it shows the connection works both ways. */
static void await_victim_message(struct conn *c) {
  for (;;) {
    struct ibv_wc wc = poll_one(c);
    if (wc.status != IBV_WC_SUCCESS) die("completion with %s", ibv_wc_status_str(wc.status));
    if (wc.opcode & IBV_WC_RECV) {
      printf("victim's first message: %u bytes\n", wc.byte_len);
      return;
    }
  }
}

/* Waits for the victim to go (its daemon's DREQ ends our connection): the end of every server mode. */
static void await_disconnect(struct conn *c) {
  for (;;) {
    struct rdma_cm_event *e = next_event();
    enum rdma_cm_event_type type = e->event;
    rdma_ack_cm_event(e);
    if (type == RDMA_CM_EVENT_DISCONNECTED) break;
  }
  printf("victim disconnected\n");
  rdma_disconnect(c->id);
}

static int serve(const char *mode, const char *address, const char *port) {
  struct rdma_addrinfo *ai = resolve(address, port, 1);
  struct rdma_cm_id *listener = NULL;
  if (rdma_create_id(channel, &listener, NULL, RDMA_PS_TCP) != 0) die("rdma_create_id: %s", strerror(errno));
  if (rdma_bind_addr(listener, ai->ai_src_addr) != 0) die("rdma_bind_addr: %s", strerror(errno));
  if (rdma_listen(listener, 1) != 0) die("rdma_listen: %s", strerror(errno));
  printf("listening on %s:%s\n", address, port);
  fflush(stdout);

  struct rdma_cm_event *e = expect_event(RDMA_CM_EVENT_CONNECT_REQUEST);
  struct conn c = {.id = e->id};
  struct conn_data victim;
  if (decode(e->param.conn.private_data, e->param.conn.private_data_len, &victim) != 0 || victim.version != 1)
    die("the client is not an rsocket (private data of %u bytes)", e->param.conn.private_data_len);
  printf("victim: %u credits, receive ring half of %u bytes\n", victim.credits, victim.data_buf.length);
  make_qp(&c);

  uint8_t mine[CONN_DATA_SIZE];
  struct conn_data d = my_conn_data(&c, strcmp(mode, "bad-version") == 0 ? 2 : 1);
  encode(mine, &d);
  struct rdma_conn_param param = {0};
  param.responder_resources = param.initiator_depth = 1;
  param.rnr_retry_count = 7;
  if (strcmp(mode, "no-conn-data") != 0) {
    param.private_data = mine;
    param.private_data_len = CONN_DATA_SIZE;
  }
  if (rdma_accept(c.id, &param) != 0) die("rdma_accept: %s", strerror(errno));
  rdma_ack_cm_event(e);
  rdma_ack_cm_event(expect_event(RDMA_CM_EVENT_ESTABLISHED));
  printf("accepted (%s)\n", mode);
  fflush(stdout);

  /* Writes go to the start of the victim's first ring half, which the ConnData granted: the memory is
   * the victim's to give, and every write lands inside it; only the immediates lie. */
  const uint64_t ring = victim.data_buf.addr;
  const uint32_t rkey = victim.data_buf.key;
  if (strcmp(mode, "oversized") == 0) {
    await_victim_message(&c);
    const uint32_t claimed = victim.data_buf.length + 1; /* the ring is two halves of data_buf.length */
    write_imm(&c, ring, rkey, 16, data_message(claimed));
    printf("sent a data message of 16 bytes claiming %u\n", claimed);
  } else if (strcmp(mode, "flood") == 0) {
    await_victim_message(&c);
    const unsigned n = victim.credits + 64u;
    unsigned sent = 0;
    while (sent < n && write_imm(&c, ring + sent % victim.data_buf.length, rkey, 1, data_message(1)) == 0) ++sent;
    printf("posted %u of %u one-byte data messages against %u credits\n", sent, n, victim.credits);
  }
  fflush(stdout);
  await_disconnect(&c);
  rdma_freeaddrinfo(ai);
  return 0;
}

static int bad_request(const char *address, const char *port) {
  struct rdma_addrinfo *ai = resolve(address, port, 0);
  struct conn c = {0};
  if (rdma_create_id(channel, &c.id, NULL, RDMA_PS_TCP) != 0) die("rdma_create_id: %s", strerror(errno));
  if (rdma_resolve_addr(c.id, NULL, ai->ai_dst_addr, 2000) != 0) die("rdma_resolve_addr: %s", strerror(errno));
  rdma_ack_cm_event(expect_event(RDMA_CM_EVENT_ADDR_RESOLVED));
  if (rdma_resolve_route(c.id, 2000) != 0) die("rdma_resolve_route: %s", strerror(errno));
  rdma_ack_cm_event(expect_event(RDMA_CM_EVENT_ROUTE_RESOLVED));
  make_qp(&c);
  uint8_t mine[CONN_DATA_SIZE];
  struct conn_data d = my_conn_data(&c, 2);
  encode(mine, &d);
  struct rdma_conn_param param = {0};
  param.responder_resources = param.initiator_depth = 1;
  param.retry_count = param.rnr_retry_count = 7;
  param.private_data = mine;
  param.private_data_len = CONN_DATA_SIZE;
  if (rdma_connect(c.id, &param) != 0) die("rdma_connect: %s", strerror(errno));
  struct rdma_cm_event *e = next_event();
  const enum rdma_cm_event_type type = e->event;
  rdma_ack_cm_event(e);
  if (type != RDMA_CM_EVENT_REJECTED) die("a version 2 request was answered with %s", rdma_event_str(type));
  printf("version 2 request rejected\n");
  rdma_freeaddrinfo(ai);
  return 0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc != 4) die("usage: hostile_peer no-conn-data|bad-version|oversized|flood|bad-request ADDRESS PORT");
  const char *mode = argv[1];
  channel = rdma_create_event_channel();
  if (channel == NULL) die("rdma_create_event_channel: %s", strerror(errno));
  if (strcmp(mode, "bad-request") == 0) return bad_request(argv[2], argv[3]);
  const char *server_modes[] = {"no-conn-data", "bad-version", "oversized", "flood"};
  for (size_t i = 0; i < sizeof server_modes / sizeof *server_modes; ++i) {
    if (strcmp(mode, server_modes[i]) == 0) return serve(mode, argv[2], argv[3]);
  }
  die("unknown mode %s", mode);
}
