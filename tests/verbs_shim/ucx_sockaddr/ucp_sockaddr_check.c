// UCP's client/server connection by socket address, the way UCX-based frameworks (UCX-Py, Dask, Spark's
// UCX shuffle, DAOS, ...) connect: the server calls ucp_listener_create on an IP address and port, the
// client ucp_ep_create with that address, and UCX's sockaddr connection manager sets the endpoints up.
// With UCX_SOCKADDR_TLS_PRIORITY=rdmacm that manager is UCX's rdmacm component, which uses librdmacm
// (rdma_create_id, rdma_resolve_addr/route, rdma_connect with private data, rdma_accept or rdma_reject)
// on the device that holds the address; ucx_perftest never goes this way, it exchanges addresses over its
// own TCP socket.
//
// Built like any application against the real <ucp/api/ucp.h>; run under uroce-run, UCX loads
// libuct_rdmacm.so, which loads uroce's librdmacm.
//
//   ucp_sockaddr_check server ADDRESS PORT [rounds]     serves clients until it has served `rounds` of them
//   ucp_sockaddr_check client ADDRESS PORT [size] [count]
//
// Per connection the client sends `count` tagged messages of `size` bytes (a pattern seeded by the message
// number), the server returns each one with every byte incremented, and the client checks every byte. Then
// the client puts a buffer into the server's memory with ucp_put_nbx (the server's rkey travels in a
// message), reads it back with ucp_get_nbx, and does a fetch-and-add, so that RMA and atomics run on the
// endpoints the connection manager made. The server checks the put and the atomic's result. Each side
// prints "ok: ..." and exits 0, or a reason and exits 1. A client whose server refuses it (UCX rejects a
// connection when the server's conn_handler calls ucp_listener_reject) gets UCS_ERR_REJECTED:
//
//   ucp_sockaddr_check server ADDRESS PORT 1 --reject   rejects its first client
//   ucp_sockaddr_check client ADDRESS PORT --expect-reject
#include <arpa/inet.h>
#include <netdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <ucp/api/ucp.h>

// The tags: a message to echo, and the end of them, differ in their lowest bit only, so that one receive
// (tag_data under echo_mask) takes either, in the order they were sent.
enum { tag_data = 0x10, tag_echo_end = 0x11, tag_reply = 2, tag_rkey = 3, tag_done = 4, tag_result = 5 };
static const ucp_tag_t tag_mask = UINT64_MAX;
static const ucp_tag_t echo_mask = ~(ucp_tag_t)1;
enum { max_message = 1 << 20 };  // the server's echo buffer
enum { window_size = 65536 };     // the server's RMA window, which the client puts into and gets back
static const double timeout_seconds = 30.0;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int fail(const char* what, ucs_status_t status) {
  fprintf(stderr, "FAIL: %s: %s\n", what, ucs_status_string(status));
  return 1;
}

// Drives the worker until `request` (a request handle from a *_nbx call) completes, or cancels it after
// timeout_seconds; returns its status. The request stays allocated.
static ucs_status_t progress_request(ucp_worker_h worker, void* request) {
  const double deadline = now() + timeout_seconds;
  ucs_status_t status;
  while ((status = ucp_request_check_status(request)) == UCS_INPROGRESS) {
    ucp_worker_progress(worker);
    if (now() > deadline) {
      ucp_request_cancel(worker, request);
      while (ucp_request_check_status(request) == UCS_INPROGRESS) ucp_worker_progress(worker);
      return UCS_ERR_TIMED_OUT;
    }
  }
  return status;
}

// The same for whatever a *_nbx call returned (NULL when it completed at once), then frees the request.
static ucs_status_t wait_request(ucp_worker_h worker, void* request) {
  if (request == NULL) return UCS_OK;
  if (UCS_PTR_IS_ERR(request)) return UCS_PTR_STATUS(request);
  ucs_status_t status = progress_request(worker, request);
  ucp_request_free(request);
  return status;
}

// An endpoint's error callback: remembers the first error, which the waiting side reports.
static void on_ep_error(void* arg, ucp_ep_h ep, ucs_status_t status) {
  (void)ep;
  ucs_status_t* slot = arg;
  if (*slot == UCS_OK) *slot = status;
}

static ucs_status_t send_tagged(ucp_worker_h worker, ucp_ep_h ep, ucp_tag_t tag, const void* data,
                                size_t size) {
  ucp_request_param_t param = {0};
  return wait_request(worker, ucp_tag_send_nbx(ep, data, size, tag, &param));
}

// The received length and tag come from ucp_tag_recv_request_test on the finished request, so the receive
// may not complete at once (NO_IMM_CMPL). UCX 1.13 leaves recv_info unfilled on an immediate completion
// (openucx/ucx#9425, fixed in 1.16), which happens when the message is already waiting as unexpected: a
// server that took that path read tag 0 and length 0 for the end of the echoes, echoed an empty reply the
// client never asked for, and both sides waited until their timeouts.
static ucs_status_t receive_masked(ucp_worker_h worker, ucp_tag_t tag, ucp_tag_t mask, void* data, size_t size,
                                   size_t* received, ucp_tag_t* sender_tag) {
  ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL};
  void* request = ucp_tag_recv_nbx(worker, data, size, tag, mask, &param);
  if (UCS_PTR_IS_ERR(request)) return UCS_PTR_STATUS(request);
  ucs_status_t status = progress_request(worker, request);
  ucp_tag_recv_info_t info = {0};
  if (status == UCS_OK) status = ucp_tag_recv_request_test(request, &info);
  ucp_request_free(request);
  if (received) *received = info.length;
  if (sender_tag) *sender_tag = info.sender_tag;
  return status;
}

static ucs_status_t receive_tagged(ucp_worker_h worker, ucp_tag_t tag, void* data, size_t size,
                                   size_t* received) {
  return receive_masked(worker, tag, tag_mask, data, size, received, NULL);
}

// Closes after everything sent has arrived (flush mode): a forced close destroys the QPs at once, and a
// last message still waiting for its ACK (lost once, or on a slow path) would never arrive. A peer that is
// already gone makes it end with an error, which is ignored here: the outcome was decided before.
static void close_ep(ucp_worker_h worker, ucp_ep_h ep) {
  ucp_request_param_t param = {0};
  wait_request(worker, ucp_ep_close_nbx(ep, &param));
}

// The client closes first, and the server closes once the client's disconnect has reached it (its endpoint's
// error callback, UCS_ERR_CONNECTION_RESET), by force: nothing is left to deliver. Two flush-mode closes at
// once race in UCX: rc_verbs flushes unsignaled sends with a zero-length RDMA WRITE, and when that WRITE
// reaches a QP the other side has already torn down (counted there as qp_not_ready), nothing answers it, and
// the close ends only when the QP's retries run out (8 x 1.07 s with UCX's timeout and retry count), with
// UCS_ERR_ENDPOINT_TIMEOUT. Seen in 3 of 300 runs of 1 MiB messages over a veth pair.
static void close_after_peer(ucp_worker_h worker, ucp_ep_h ep, const ucs_status_t* ep_status) {
  const double deadline = now() + timeout_seconds;
  while (*ep_status == UCS_OK && now() < deadline) ucp_worker_progress(worker);
  ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS, .flags = UCP_EP_CLOSE_FLAG_FORCE};
  wait_request(worker, ucp_ep_close_nbx(ep, &param));
}

static int parse_address(const char* host, const char* port, struct sockaddr_storage* out, socklen_t* len) {
  struct addrinfo hints = {.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV, .ai_socktype = SOCK_STREAM};
  struct addrinfo* found = NULL;
  int rc = getaddrinfo(host, port, &hints, &found);
  if (rc != 0) {
    fprintf(stderr, "FAIL: address %s port %s: %s\n", host, port, gai_strerror(rc));
    return -1;
  }
  memcpy(out, found->ai_addr, found->ai_addrlen);
  *len = found->ai_addrlen;
  freeaddrinfo(found);
  return 0;
}

static unsigned char pattern_byte(uint32_t message, size_t i) { return (unsigned char)(message * 131u + i * 7u); }

// --- the server ---------------------------------------------------------------------------------------

struct server_state {
  ucp_listener_h listener;
  ucp_conn_request_h pending;  // a connection request not yet taken
  int reject;                   // reject requests instead of accepting them
};

static void on_conn_request(ucp_conn_request_h request, void* arg) {
  struct server_state* state = arg;
  if (state->pending != NULL) {  // one client at a time
    ucp_listener_reject(state->listener, request);
    return;
  }
  state->pending = request;
}

// One client: echo its messages incremented, give it a buffer to put into and read, and an atomic counter.
static int serve_client(ucp_context_h context, ucp_worker_h worker, ucp_conn_request_h request) {
  ucs_status_t ep_status = UCS_OK;
  ucp_ep_params_t ep_params = {
      .field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLER |
                    UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
      .conn_request = request,
      .err_mode = UCP_ERR_HANDLING_MODE_PEER,
      .err_handler = {.cb = on_ep_error, .arg = &ep_status}};
  ucp_ep_h ep;
  ucs_status_t status = ucp_ep_create(worker, &ep_params, &ep);
  if (status != UCS_OK) return fail("ucp_ep_create from the connection request", status);

  // The RMA target: the window, then an 8-byte counter for the atomic.
  static unsigned char window[window_size + 8];
  memset(window, 0, sizeof window);
  uint64_t* counter = (uint64_t*)(window + window_size);
  *counter = 1000;
  ucp_mem_map_params_t map = {.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH,
                              .address = window,
                              .length = sizeof window};
  ucp_mem_h memh;
  if ((status = ucp_mem_map(context, &map, &memh)) != UCS_OK) return fail("ucp_mem_map", status);
  void* rkey_buffer;
  size_t rkey_size;
  if ((status = ucp_rkey_pack(context, memh, &rkey_buffer, &rkey_size)) != UCS_OK)
    return fail("ucp_rkey_pack", status);

  int rc = 0;
  unsigned char* buffer = malloc(max_message);
  uint32_t messages = 0;
  for (;;) {
    size_t length = 0;
    ucp_tag_t tag = 0;
    status = receive_masked(worker, tag_data, echo_mask, buffer, max_message, &length, &tag);
    if (status != UCS_OK) { rc = fail("receive a message", status); break; }
    if (tag == tag_echo_end) break;  // no more to echo: go on to RMA
    for (size_t i = 0; i < length; ++i) buffer[i] = (unsigned char)(buffer[i] + 1);
    if ((status = send_tagged(worker, ep, tag_reply, buffer, length)) != UCS_OK) {
      rc = fail("send the reply", status);
      break;
    }
    ++messages;
  }
  if (rc == 0) {
    // The window's address, then its packed rkey.
    size_t header = sizeof(uint64_t);
    unsigned char* message = malloc(header + rkey_size);
    uint64_t address = (uint64_t)(uintptr_t)window;
    memcpy(message, &address, header);
    memcpy(message + header, rkey_buffer, rkey_size);
    status = send_tagged(worker, ep, tag_rkey, message, header + rkey_size);
    free(message);
    if (status != UCS_OK) rc = fail("send the rkey", status);
  }
  if (rc == 0) {
    uint64_t done = 0;
    status = receive_tagged(worker, tag_done, &done, sizeof done, NULL);
    if (status != UCS_OK) rc = fail("receive the client's done", status);
    // The client put a pattern into the window and added 5 to the counter.
    for (size_t i = 0; rc == 0 && i < window_size; ++i) {
      if (window[i] != pattern_byte(0xfeed, i)) {
        fprintf(stderr, "FAIL: the put left byte %zu as %u, not %u\n", i, window[i], pattern_byte(0xfeed, i));
        rc = 1;
      }
    }
    if (rc == 0 && *counter != 1005) {
      fprintf(stderr, "FAIL: the counter is %llu after the client's fetch-and-add of 5, not 1005\n",
              (unsigned long long)*counter);
      rc = 1;
    }
    uint64_t verdict = rc == 0;
    status = send_tagged(worker, ep, tag_result, &verdict, sizeof verdict);
    if (rc == 0 && status != UCS_OK) rc = fail("send the verdict", status);
  }
  if (rc == 0) printf("ok: served a client: %u messages echoed, its put and fetch-and-add checked\n", messages);
  free(buffer);
  ucp_rkey_buffer_release(rkey_buffer);
  if (rc == 0) close_after_peer(worker, ep, &ep_status);
  else close_ep(worker, ep);  // the client may wait for something that will not come
  ucp_mem_unmap(context, memh);
  return rc;
}

static int run_server(ucp_context_h context, ucp_worker_h worker, const struct sockaddr_storage* address,
                      socklen_t address_length, int rounds, int reject) {
  struct server_state state = {.listener = NULL, .pending = NULL, .reject = reject};
  ucp_listener_params_t params = {
      .field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER,
      .sockaddr = {.addr = (const struct sockaddr*)address, .addrlen = address_length},
      .conn_handler = {.cb = on_conn_request, .arg = &state}};
  ucp_listener_h listener;
  ucs_status_t status = ucp_listener_create(worker, &params, &listener);
  if (status != UCS_OK) return fail("ucp_listener_create", status);
  state.listener = listener;
  printf("listening\n");
  fflush(stdout);
  int rc = 0;
  for (int served = 0; rc == 0 && served < rounds;) {
    const double deadline = now() + 60.0;
    while (state.pending == NULL && now() < deadline) ucp_worker_progress(worker);
    if (state.pending == NULL) {
      fprintf(stderr, "FAIL: no client came within 60 s\n");
      rc = 1;
      break;
    }
    ucp_conn_request_h request = state.pending;
    if (state.reject) {
      status = ucp_listener_reject(listener, request);
      state.pending = NULL;
      if (status != UCS_OK) { rc = fail("ucp_listener_reject", status); break; }
      printf("ok: rejected a client\n");
      fflush(stdout);
      // Let the reject go out before the listener goes away.
      const double until = now() + 1.0;
      while (now() < until) ucp_worker_progress(worker);
      ++served;
      continue;
    }
    rc = serve_client(context, worker, request);
    fflush(stdout);
    state.pending = NULL;
    ++served;
  }
  ucp_listener_destroy(listener);
  return rc;
}

// --- the client ---------------------------------------------------------------------------------------

static int run_client(ucp_worker_h worker, const struct sockaddr_storage* address,
                      socklen_t address_length, size_t size, uint32_t count, int expect_reject) {
  ucs_status_t ep_status = UCS_OK;
  ucp_ep_params_t ep_params = {
      .field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR | UCP_EP_PARAM_FIELD_ERR_HANDLER |
                    UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
      .flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER,
      .sockaddr = {.addr = (const struct sockaddr*)address, .addrlen = address_length},
      .err_mode = UCP_ERR_HANDLING_MODE_PEER,
      .err_handler = {.cb = on_ep_error, .arg = &ep_status}};
  ucp_ep_h ep;
  ucs_status_t status = ucp_ep_create(worker, &ep_params, &ep);
  if (status != UCS_OK) return fail("ucp_ep_create to the server's address", status);

  if (expect_reject) {
    // Sending makes the connection go through; a reject comes back as the endpoint's error.
    uint32_t probe = 0;
    ucp_request_param_t param = {0};
    void* request = ucp_tag_send_nbx(ep, &probe, sizeof probe, tag_data, &param);
    const double deadline = now() + timeout_seconds;
    while (ep_status == UCS_OK && now() < deadline) ucp_worker_progress(worker);
    if (request != NULL && !UCS_PTR_IS_ERR(request)) {
      while (ucp_request_check_status(request) == UCS_INPROGRESS && ep_status != UCS_OK) {
        ucp_request_cancel(worker, request);
        ucp_worker_progress(worker);
      }
      ucp_request_free(request);
    }
    close_ep(worker, ep);
    if (ep_status != UCS_ERR_REJECTED) {
      fprintf(stderr, "FAIL: the endpoint's status is %s, not %s\n", ucs_status_string(ep_status),
              ucs_status_string(UCS_ERR_REJECTED));
      return 1;
    }
    printf("ok: the server rejected the connection (%s)\n", ucs_status_string(ep_status));
    return 0;
  }

  int rc = 0;
  unsigned char* out = malloc(size ? size : 1);
  unsigned char* in = malloc(size ? size : 1);
  for (uint32_t m = 0; rc == 0 && m < count; ++m) {
    for (size_t i = 0; i < size; ++i) out[i] = pattern_byte(m, i);
    if ((status = send_tagged(worker, ep, tag_data, out, size)) != UCS_OK) {
      // The first send is what makes the connection: a REJ from a CM where nothing listens on the port
      // (IB CM reason "invalid service ID") comes back as UCS_ERR_CONNECTION_RESET.
      rc = fail(m == 0 ? "connect (the first message)" : "send a message", status);
      break;
    }
    size_t length = 0;
    if ((status = receive_tagged(worker, tag_reply, in, size, &length)) != UCS_OK) {
      rc = fail("receive the reply", status);
      break;
    }
    if (length != size) {
      fprintf(stderr, "FAIL: reply %u is %zu bytes, not %zu\n", m, length, size);
      rc = 1;
    }
    for (size_t i = 0; rc == 0 && i < size; ++i) {
      if (in[i] != (unsigned char)(out[i] + 1)) {
        fprintf(stderr, "FAIL: reply %u byte %zu is %u, not %u\n", m, i, in[i], (unsigned char)(out[i] + 1));
        rc = 1;
      }
    }
  }
  if (rc == 0 && (status = send_tagged(worker, ep, tag_echo_end, out, 0)) != UCS_OK)
    rc = fail("send the end of the messages", status);

  // RMA on the same endpoint: put 64 KiB, get it back, fetch-and-add 5.
  unsigned char rkey_message[4096];
  size_t rkey_length = 0;
  if (rc == 0 && (status = receive_tagged(worker, tag_rkey, rkey_message, sizeof rkey_message, &rkey_length)) !=
                     UCS_OK)
    rc = fail("receive the server's rkey", status);
  ucp_rkey_h rkey = NULL;
  uint64_t remote = 0;
  if (rc == 0) {
    memcpy(&remote, rkey_message, sizeof remote);
    if ((status = ucp_ep_rkey_unpack(ep, rkey_message + sizeof remote, &rkey)) != UCS_OK)
      rc = fail("ucp_ep_rkey_unpack", status);
  }
  static unsigned char put_data[window_size], got[window_size];
  if (rc == 0) {
    for (size_t i = 0; i < window_size; ++i) put_data[i] = pattern_byte(0xfeed, i);
    ucp_request_param_t param = {0};
    status = wait_request(worker, ucp_put_nbx(ep, put_data, window_size, remote, rkey, &param));
    if (status == UCS_OK) status = wait_request(worker, ucp_ep_flush_nbx(ep, &param));
    if (status != UCS_OK) rc = fail("ucp_put_nbx", status);
  }
  if (rc == 0) {
    ucp_request_param_t param = {0};
    status = wait_request(worker, ucp_get_nbx(ep, got, window_size, remote, rkey, &param));
    if (status != UCS_OK) rc = fail("ucp_get_nbx", status);
    else if (memcmp(got, put_data, window_size) != 0) {
      fprintf(stderr, "FAIL: ucp_get_nbx read back other bytes than were put\n");
      rc = 1;
    }
  }
  if (rc == 0) {
    uint64_t add = 5, before = 0;
    ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_REPLY_BUFFER,
                                 .datatype = ucp_dt_make_contig(sizeof add),
                                 .reply_buffer = &before};
    status = wait_request(worker, ucp_atomic_op_nbx(ep, UCP_ATOMIC_OP_ADD, &add, 1, remote + window_size, rkey,
                                                    &param));
    if (status != UCS_OK) rc = fail("ucp_atomic_op_nbx (fetch-and-add)", status);
    else if (before != 1000) {
      fprintf(stderr, "FAIL: the fetch-and-add returned %llu, not 1000\n", (unsigned long long)before);
      rc = 1;
    }
  }
  if (rc == 0) {
    uint64_t done = 1, verdict = 0;
    status = send_tagged(worker, ep, tag_done, &done, sizeof done);
    if (status == UCS_OK) status = receive_tagged(worker, tag_result, &verdict, sizeof verdict, NULL);
    if (status != UCS_OK) rc = fail("exchange the verdict", status);
    else if (verdict != 1) {
      fprintf(stderr, "FAIL: the server found the put or the atomic wrong\n");
      rc = 1;
    }
  }
  if (rc == 0) printf("ok: %u messages of %zu bytes echoed; put, get and fetch-and-add of 64 KiB checked\n", count, size);
  if (rkey) ucp_rkey_destroy(rkey);
  free(out);
  free(in);
  close_ep(worker, ep);
  return rc;
}

int main(int argc, char** argv) {
  if (argc < 4 || (strcmp(argv[1], "server") != 0 && strcmp(argv[1], "client") != 0)) {
    fprintf(stderr, "usage: %s server ADDRESS PORT [rounds] [--reject]\n"
                    "       %s client ADDRESS PORT [size] [count] [--expect-reject]\n", argv[0], argv[0]);
    return 2;
  }
  const int server = strcmp(argv[1], "server") == 0;
  int flag = 0;  // --reject or --expect-reject
  long numbers[2] = {-1, -1};
  for (int i = 4, n = 0; i < argc; ++i) {
    if (strcmp(argv[i], server ? "--reject" : "--expect-reject") == 0) flag = 1;
    else if (n < 2) numbers[n++] = strtol(argv[i], NULL, 0);
  }
  if (!server && numbers[0] > max_message) {
    fprintf(stderr, "a message is at most %d bytes (the server's buffer)\n", max_message);
    return 2;
  }
  struct sockaddr_storage address;
  socklen_t address_length;
  if (parse_address(argv[2], argv[3], &address, &address_length) != 0) return 2;

  ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES,
                         .features = UCP_FEATURE_TAG | UCP_FEATURE_RMA | UCP_FEATURE_AMO64};
  ucp_config_t* config;
  ucs_status_t status = ucp_config_read(NULL, NULL, &config);
  if (status != UCS_OK) return fail("ucp_config_read", status);
  ucp_context_h context;
  status = ucp_init(&params, config, &context);
  ucp_config_release(config);
  if (status != UCS_OK) return fail("ucp_init", status);
  ucp_worker_params_t worker_params = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                                       .thread_mode = UCS_THREAD_MODE_SINGLE};
  ucp_worker_h worker;
  if ((status = ucp_worker_create(context, &worker_params, &worker)) != UCS_OK) return fail("ucp_worker_create", status);

  int rc = server ? run_server(context, worker, &address, address_length, numbers[0] > 0 ? (int)numbers[0] : 1, flag)
                  : run_client(worker, &address, address_length, numbers[0] >= 0 ? (size_t)numbers[0] : 4096,
                               numbers[1] > 0 ? (uint32_t)numbers[1] : 100, flag);
  ucp_worker_destroy(worker);
  ucp_cleanup(context);
  return rc;
}
