/* fork() after registering memory. uroce moves the pages of a pinned region onto memory it shares with
 * uroced (MAP_SHARED), and a child made by fork() would share them with its parent: each would write into
 * the other's heap. The child must get private copies instead, as Linux gives a child copies of pinned
 * pages since 5.13. Checked: the child sees the bytes its parent had, its writes stay its own, and it can
 * use its parent's context (its calls join the parent's session in uroced); the parent's region still
 * carries RDMA afterwards, both ways. */
#include <errno.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ext_verbs.h"

enum { SPAN = 16 * 1024 };

/* The child's checks; its exit status says which failed (0: none). It uses its parent's context, as a
 * child may with Linux's uverbs: a PD, a buffer of its own registered there, two QPs of its own and a
 * WRITE between them, all through the session its parent opened. */
static int child(struct env *e, const uint8_t *expected) {
  if (memcmp(e->remote, expected, SPAN) != 0) return 2; /* not its parent's bytes */
  fill_pattern(e->remote, SPAN, 2);                    /* its own writes */
  struct ibv_pd *pd = ibv_alloc_pd(e->ctx);
  if (pd == NULL) return 3;
  uint8_t *mine = aligned_alloc(4096, 2 * SPAN);
  if (mine == NULL) return 4;
  fill_pattern(mine, SPAN, 5);
  memset(mine + SPAN, 0, SPAN);
  struct ibv_mr *mr = ibv_reg_mr(pd, mine, 2 * SPAN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (mr == NULL) return 5;
  struct env own = *e;
  own.pd = pd;
  struct rc_pair p = rc_pair_open(&own);
  rdma_and_wait(&p, IBV_WR_RDMA_WRITE, 7, mine, mr->lkey, mine + SPAN, mr->rkey, SPAN);
  if (memcmp(mine, mine + SPAN, SPAN) != 0) return 8; /* the WRITE did not land in the child's buffer */
  rc_pair_close(&p);
  if (ibv_dereg_mr(mr) || ibv_dealloc_pd(pd)) return 9;
  return 0;
}

void test_fork(struct env *e) {
  static uint8_t before[SPAN];
  fill_pattern(e->remote, SPAN, 1);
  memcpy(before, e->remote, SPAN);
  const pid_t pid = fork();
  CHECK(pid >= 0, "fork: %s", strerror(errno));
  if (pid == 0) _exit(child(e, before));
  int status = 0;
  CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child's check %d failed (status %#x)",
        WIFEXITED(status) ? WEXITSTATUS(status) : -1, status);
  CHECK(memcmp(e->remote, before, SPAN) == 0, "the child's writes landed in its parent's registered memory");

  /* The parent's region is still the one uroced reaches: a WRITE into it and a READ out of it. */
  struct rc_pair p = rc_pair_open(e);
  fill_pattern(e->local, SPAN, 3);
  rdma_and_wait(&p, IBV_WR_RDMA_WRITE, 1, e->local, e->local_mr->lkey, e->remote, e->remote_mr->rkey, SPAN);
  CHECK(memcmp(e->remote, e->local, SPAN) == 0, "the WRITE after fork did not land in the parent's region");
  fill_pattern(e->remote, SPAN, 4);
  rdma_and_wait(&p, IBV_WR_RDMA_READ, 2, e->local, e->local_mr->lkey, e->remote, e->remote_mr->rkey, SPAN);
  CHECK(memcmp(e->local, e->remote, SPAN) == 0, "the READ after fork did not return the parent's bytes");
  rc_pair_close(&p);
  printf("PASS fork: the child had private copies of the registered pages and used its parent's context; "
         "the parent's RDMA after fork, both ways\n");
}
