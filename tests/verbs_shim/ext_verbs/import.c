/* ibv_import_device, ibv_import_pd, ibv_import_mr and ibv_import_dm across processes, the way programs
 * share a PD between processes: the exporter passes its context's command descriptor (cmd_fd) over a Unix
 * socket (SCM_RIGHTS) with the objects' handles, and the importer builds a context on the same objects.
 * Checked: the importer registers a buffer of its own on the imported PD and RDMA WRITEs it, through QPs
 * it creates on that PD, into the exporter's region named by the imported MR's keys; it reads the
 * exporter's device memory and writes into it; a handle the exporter does not hold and a descriptor that
 * is no uroce context's are refused. The importer is a child made by fork() that never touches the
 * context it inherited: the descriptor it imports is the one received, as an unrelated process gets it. */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ext_verbs.h"

enum { SPAN = 16 * 1024, DM_SIZE = 4096 };

struct handles {
  uint32_t pd, mr, dm;
  uint64_t addr;
};

static int send_fd(int sock, int fd, const struct handles *h) {
  char control[CMSG_SPACE(sizeof(int))] = {0};
  struct iovec iov = {.iov_base = (void *)h, .iov_len = sizeof *h};
  struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control, .msg_controllen = sizeof control};
  struct cmsghdr *c = CMSG_FIRSTHDR(&m);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &fd, sizeof fd);
  return sendmsg(sock, &m, 0) == (ssize_t)sizeof *h ? 0 : -1;
}

static int recv_fd(int sock, struct handles *h) {
  char control[CMSG_SPACE(sizeof(int))] = {0};
  struct iovec iov = {.iov_base = h, .iov_len = sizeof *h};
  struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control, .msg_controllen = sizeof control};
  if (recvmsg(sock, &m, 0) != (ssize_t)sizeof *h) return -1;
  struct cmsghdr *c = CMSG_FIRSTHDR(&m);
  if (c == NULL || c->cmsg_type != SCM_RIGHTS) return -1;
  int fd;
  memcpy(&fd, CMSG_DATA(c), sizeof fd);
  return fd;
}

/* The importer's checks; its exit status says which failed (0: none). */
static int importer(struct env *inherited, int sock) {
  struct handles h;
  const int fd = recv_fd(sock, &h);
  if (fd < 0) return 2;
  struct ibv_context *ctx = ibv_import_device(fd);
  if (ctx == NULL) return 3;
  struct ibv_pd *pd = ibv_import_pd(ctx, h.pd);
  if (pd == NULL || pd->handle != h.pd) return 4;
  errno = 0;
  if (ibv_import_pd(ctx, h.pd + 1000) != NULL || errno != EINVAL) return 5; /* not the exporter's */
  struct ibv_mr *theirs = ibv_import_mr(pd, h.mr);
  if (theirs == NULL || theirs->lkey != h.mr || theirs->length != BUF_SIZE || (uintptr_t)theirs->addr != h.addr) {
    return 6;
  }
  /* A buffer of its own on the imported PD, and QPs of its own on it: a WRITE into the exporter's region. */
  uint8_t *mine = aligned_alloc(4096, SPAN);
  if (mine == NULL) return 7;
  fill_pattern(mine, SPAN, 9);
  struct ibv_mr *own = ibv_reg_mr(pd, mine, SPAN, IBV_ACCESS_LOCAL_WRITE);
  if (own == NULL) return 8;
  struct env e = *inherited;
  e.ctx = ctx;
  e.pd = pd;
  struct rc_pair p = rc_pair_open(&e);
  rdma_and_wait(&p, IBV_WR_RDMA_WRITE, 5, mine, own->lkey, theirs->addr, theirs->rkey, SPAN);
  /* The exporter's device memory: its bytes read here, and bytes written here for it to read. */
  struct ibv_dm *dm = ibv_import_dm(ctx, h.dm);
  if (dm == NULL) return 11;
  uint8_t bytes[DM_SIZE], expected[DM_SIZE];
  fill_pattern(expected, DM_SIZE, 11);
  if (ibv_memcpy_from_dm(bytes, dm, 0, DM_SIZE) != 0 || memcmp(bytes, expected, DM_SIZE) != 0) return 12;
  fill_pattern(bytes, DM_SIZE, 12);
  if (ibv_memcpy_to_dm(dm, 0, bytes, DM_SIZE) != 0) return 13;
  ibv_unimport_dm(dm);
  rc_pair_close(&p);
  if (ibv_dereg_mr(own)) return 14;
  /* Unimporting drops only this handle: the exporter's region and PD stay (checked by the exporter). */
  ibv_unimport_mr(theirs);
  ibv_unimport_pd(pd);
  if (ibv_close_device(ctx) != 0) return 15;
  return 0;
}

void test_import(struct env *e) {
  /* Descriptors that are no uroce context's command descriptor. */
  int pipe_fds[2];
  CHECK(pipe(pipe_fds) == 0, "pipe");
  errno = 0;
  CHECK(ibv_import_device(pipe_fds[0]) == NULL && errno != 0, "a pipe imported (errno %d)", errno);
  close(pipe_fds[0]);
  close(pipe_fds[1]);
  int pair[2];
  CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, pair) == 0, "socketpair");
  errno = 0;
  CHECK(ibv_import_device(pair[0]) == NULL && errno != 0, "an unrelated socket imported (errno %d)", errno);
  close(pair[0]);
  close(pair[1]);

  struct ibv_alloc_dm_attr dm_attr = {.length = DM_SIZE};
  struct ibv_dm *dm = ibv_alloc_dm(e->ctx, &dm_attr);
  CHECK(dm != NULL, "ibv_alloc_dm: %s", strerror(errno));
  uint8_t bytes[DM_SIZE];
  fill_pattern(bytes, DM_SIZE, 11);
  CHECK(ibv_memcpy_to_dm(dm, 0, bytes, DM_SIZE) == 0, "ibv_memcpy_to_dm");
  memset(e->remote, 0, SPAN);

  CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, pair) == 0, "socketpair");
  const pid_t pid = fork();
  CHECK(pid >= 0, "fork: %s", strerror(errno));
  if (pid == 0) {
    close(pair[0]);
    _exit(importer(e, pair[1]));
  }
  close(pair[1]);
  const struct handles h = {e->pd->handle, e->remote_mr->handle, dm->handle, (uintptr_t)e->remote};
  CHECK(send_fd(pair[0], e->ctx->cmd_fd, &h) == 0, "send the command descriptor: %s", strerror(errno));
  int status = 0;
  CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
  close(pair[0]);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the importer's check %d failed (status %#x)",
        WIFEXITED(status) ? WEXITSTATUS(status) : -1, status);

  uint8_t expected[SPAN];
  fill_pattern(expected, SPAN, 9);
  CHECK(memcmp(e->remote, expected, SPAN) == 0, "the importer's WRITE did not land in the exported region");
  uint8_t got[DM_SIZE];
  fill_pattern(bytes, DM_SIZE, 12);
  CHECK(ibv_memcpy_from_dm(got, dm, 0, DM_SIZE) == 0 && memcmp(got, bytes, DM_SIZE) == 0,
        "the importer's bytes are not in the device memory");
  CHECK(ibv_free_dm(dm) == 0, "ibv_free_dm");

  /* The exporter's PD and region outlived the importer's unimport and close: a WRITE through them. */
  struct rc_pair p = rc_pair_open(e);
  fill_pattern(e->local, SPAN, 13);
  rdma_and_wait(&p, IBV_WR_RDMA_WRITE, 1, e->local, e->local_mr->lkey, e->remote, e->remote_mr->rkey, SPAN);
  CHECK(memcmp(e->remote, e->local, SPAN) == 0, "the exporter's region after the import");
  rc_pair_close(&p);
  printf("PASS import: a context, PD, region and device memory imported by another process from the passed "
         "command descriptor; RDMA into the exporter's region through them; bad handles and descriptors refused\n");
}
