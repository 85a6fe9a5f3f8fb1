/* rdma_cm events taken on another thread than the one that made the call, as libiscsi's iSER initiator
 * takes them: the ID must be filled in by the time the event is seen. librdmacm fills it in while it
 * processes the event (ADDR_RESOLVED: the device, verbs and pd; ROUTE_RESOLVED: the path), so a program
 * may use the ID at once; libiscsi calls ibv_alloc_pd(id->verbs) on ADDR_RESOLVED. uroce's shim filled
 * the ID in when the daemon answered the call, and another thread could take the event first: libiscsi
 * crashed in 3 of 200 runs of iscsi-test-cu. Many rounds, each resolving an address and a route with a
 * thread waiting for the events, which checks what the event's ID holds and uses its verbs. */
#include <rdma/rdma_cma.h>

#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "ext_verbs.h"

enum { ROUNDS = 1000 };

struct taker {
  struct rdma_event_channel *channel;
  pthread_mutex_t lock;
  pthread_cond_t seen;
  int addr_resolved, route_resolved; /* events of each kind taken and found filled in */
};

static void *take_events(void *arg) {
  struct taker *t = arg;
  for (int n = 0; n < 2 * ROUNDS; ++n) {
    struct rdma_cm_event *ev;
    CHECK(rdma_get_cm_event(t->channel, &ev) == 0, "rdma_get_cm_event: %s", strerror(errno));
    struct rdma_cm_id *id = ev->id;
    if (ev->event == RDMA_CM_EVENT_ADDR_RESOLVED) {
      CHECK(id->verbs != NULL, "ADDR_RESOLVED (round %d) with the ID's verbs not set", n / 2);
      CHECK(id->route.addr.dst_addr.sa_family == AF_INET, "ADDR_RESOLVED with no destination address");
      struct ibv_pd *pd = ibv_alloc_pd(id->verbs); /* as libiscsi does there */
      CHECK(pd != NULL && ibv_dealloc_pd(pd) == 0, "a PD on the ADDR_RESOLVED ID's verbs");
    } else {
      CHECK(ev->event == RDMA_CM_EVENT_ROUTE_RESOLVED, "event %s, expected ROUTE_RESOLVED",
            rdma_event_str(ev->event));
      CHECK(id->route.num_paths == 1 && id->route.path_rec != NULL, "ROUTE_RESOLVED with no path");
    }
    const enum rdma_cm_event_type type = ev->event;
    CHECK(rdma_ack_cm_event(ev) == 0, "rdma_ack_cm_event");
    pthread_mutex_lock(&t->lock);
    if (type == RDMA_CM_EVENT_ADDR_RESOLVED) ++t->addr_resolved;
    else ++t->route_resolved;
    pthread_cond_signal(&t->seen);
    pthread_mutex_unlock(&t->lock);
  }
  return NULL;
}

static void wait_for(struct taker *t, const int *count, int want) {
  pthread_mutex_lock(&t->lock);
  while (*count < want) pthread_cond_wait(&t->seen, &t->lock);
  pthread_mutex_unlock(&t->lock);
}

void test_cm_event_thread(struct env *e) {
  struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons(7471)};
  memcpy(&dst.sin_addr, &e->gid[0].raw[12], 4); /* GID 0: ::ffff:a.b.c.d */
  struct taker t = {.lock = PTHREAD_MUTEX_INITIALIZER, .seen = PTHREAD_COND_INITIALIZER};
  t.channel = rdma_create_event_channel();
  CHECK(t.channel != NULL, "rdma_create_event_channel: %s", strerror(errno));
  pthread_t thread;
  CHECK(pthread_create(&thread, NULL, take_events, &t) == 0, "pthread_create");
  for (int round = 1; round <= ROUNDS; ++round) {
    struct rdma_cm_id *id;
    CHECK(rdma_create_id(t.channel, &id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id: %s", strerror(errno));
    CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) == 0, "rdma_resolve_addr: %s", strerror(errno));
    wait_for(&t, &t.addr_resolved, round);
    CHECK(rdma_resolve_route(id, 2000) == 0, "rdma_resolve_route: %s", strerror(errno));
    wait_for(&t, &t.route_resolved, round);
    CHECK(rdma_destroy_id(id) == 0, "rdma_destroy_id: %s", strerror(errno));
  }
  CHECK(pthread_join(thread, NULL) == 0, "pthread_join");
  rdma_destroy_event_channel(t.channel);
  printf("PASS rdma_cm events on another thread: %d addresses and routes resolved, each event's ID filled in\n",
         ROUNDS);
}
