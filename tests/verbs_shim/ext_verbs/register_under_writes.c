/* Registering memory that other threads are writing. uroce moves a registered region's pages onto memory
 * it shares with uroced, by copying them and mapping the copy in their place; a NIC pins them where they
 * are. Either way no write may be lost: QEMU registers its running guest's RAM for live migration while
 * the guest's vCPU threads write to it. Two threads write throughout each registration: one increments a
 * counter (a store lost between the copy and the mapping would leave the counter behind its own count),
 * the other writes a mark into page after page never touched before, as a guest touching fresh RAM does.
 * Checked after each round: the counter equals its count, every page marked holds its mark, the region
 * lies on uroce's shared memory (it moved: the fast path), and an RDMA WRITE into it lands. */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>

#include "ext_verbs.h"

enum { REGION = 64 << 20, PAGE = 4096, ROUNDS = 16, SPAN = 64 * 1024 };

struct writers {
  volatile uint64_t *counter;
  volatile uint8_t *fresh; /* pages no one touched before the registration, each marked once */
  atomic_int stop;
  uint64_t counted, marked;
};

static void *count(void *arg) {
  struct writers *w = arg;
  uint64_t n = 0;
  while (!atomic_load_explicit(&w->stop, memory_order_relaxed)) {
    *w->counter = *w->counter + 1;
    ++n;
  }
  w->counted = n;
  return NULL;
}

static void *mark(void *arg) {
  struct writers *w = arg;
  uint64_t n = 0;
  while (!atomic_load_explicit(&w->stop, memory_order_relaxed) && n < REGION / 2 / PAGE) {
    w->fresh[n * PAGE] = (uint8_t)(n % 251 + 1);
    ++n;
  }
  w->marked = n;
  return NULL;
}

/* Whether [p, p + n) lies in a shared mapping of uroce's memfd (/proc/self/maps: "... rw-s ... /memfd:uroce-mr"). */
static int on_uroce_memory(const void *p, size_t n) {
  FILE *maps = fopen("/proc/self/maps", "r");
  CHECK(maps != NULL, "/proc/self/maps");
  char line[512];
  int found = 0;
  while (!found && fgets(line, sizeof line, maps)) {
    unsigned long lo, hi;
    char perms[8];
    if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) == 3 && lo <= (unsigned long)p &&
        (unsigned long)p + n <= hi) {
      found = perms[3] == 's' && strstr(line, "uroce-mr") != NULL;
    }
  }
  fclose(maps);
  return found;
}

void test_register_under_writes(struct env *e) {
  struct rc_pair p = rc_pair_open(e);
  for (int round = 0; round < ROUNDS; ++round) {
    uint8_t *region = mmap(NULL, REGION, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(region != MAP_FAILED, "mmap");
    struct writers w = {.counter = (volatile uint64_t *)(region + PAGE), .fresh = region + REGION / 2};
    pthread_t counter, marker;
    CHECK(pthread_create(&counter, NULL, count, &w) == 0 && pthread_create(&marker, NULL, mark, &w) == 0,
          "pthread_create");
    while (*w.counter < 1000) {
    }
    struct ibv_mr *mr = ibv_reg_mr(e->pd, region, REGION, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    CHECK(mr != NULL, "ibv_reg_mr of %d MiB", REGION >> 20);
    atomic_store(&w.stop, 1);
    CHECK(pthread_join(counter, NULL) == 0 && pthread_join(marker, NULL) == 0, "pthread_join");
    CHECK(*w.counter == w.counted, "round %d: the counter holds %llu after %llu increments: writes were lost",
          round, (unsigned long long)*w.counter, (unsigned long long)w.counted);
    for (uint64_t i = 0; i < w.marked; ++i) {
      CHECK(w.fresh[i * PAGE] == (uint8_t)(i % 251 + 1), "round %d: page %llu of %llu lost its mark", round,
            (unsigned long long)i, (unsigned long long)w.marked);
    }
    CHECK(on_uroce_memory(region, REGION), "round %d: the region was not moved onto uroce's shared memory",
          round);
    fill_pattern(e->local, SPAN, (unsigned)round);
    rdma_and_wait(&p, IBV_WR_RDMA_WRITE, (uint64_t)round, e->local, e->local_mr->lkey, region + 2 * PAGE,
                  mr->rkey, SPAN);
    CHECK(memcmp(region + 2 * PAGE, e->local, SPAN) == 0, "round %d: the WRITE did not land", round);
    CHECK(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr");
    CHECK(munmap(region, REGION) == 0, "munmap");
  }
  rc_pair_close(&p);
  printf("PASS register under writes: %d regions of %d MiB registered while two threads wrote to them; "
         "no write lost, each moved onto shared memory and carried a WRITE\n", ROUNDS, REGION >> 20);
}
