// The entries of the shared work and completion queues, and the records sent through event pipes.
//
// Plain fixed-layout structs (the same on both sides of the socket, checked by static_asserts): a work
// request is written once by the client and read once by the daemon, which copies and validates it before
// the transport sees it. Values are rdma-core's (transport/verbs/types.hpp uses rdma-core's numbering), so
// the verbs shim converts field by field without tables.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace uroce::emulator::protocol {

// ibv_sge's layout.
struct WireSge {
  uint64_t addr;
  uint32_t length;
  uint32_t lkey;
};
static_assert(sizeof(WireSge) == 16);

// A send work request; followed in its slot by num_sge WireSge or, with IBV_SEND_INLINE, inline_length
// bytes of data (copied at post time: the application may reuse its buffer as soon as the post returns).
//
// A BIND_MW request (ibv_bind_mw, IBV_WR_BIND_MW, ibv_wr_bind_mw) carries its window, region and range in
// fields no bind uses, under names of their own (the unions), so that the slot keeps its 80 bytes and no
// other request's layout moves: the window's number (its rkey >> 8) where an invalidation names its rkey,
// the range where an RDMA request has its remote address and an atomic its operand, the region's lkey and
// the window's rights where a UD send names its destination QP and Q_Key; `rkey` is the window's new rkey
// (ibv_inc_rkey of the current one). Not `ah`: the engine judges that field on every QP type.
struct SendEntry {
  uint64_t wr_id;
  uint32_t opcode;           // verbs::WrOpcode
  uint32_t send_flags;       // verbs::SendFlags
  uint32_t imm_data;         // the immediate as the 32-bit value on the wire
  union {
    uint32_t invalidate_rkey;
    uint32_t bind_mw;        // BIND_MW: the window's number
  };
  union {
    uint64_t remote_addr;
    uint64_t bind_addr;      // BIND_MW: where the window starts, as the region's addresses count
  };
  union {
    uint64_t compare_add;    // ATOMIC_WRITE: the 8 bytes it places, as memory holds them
    uint64_t bind_length;    // BIND_MW: 0 unbinds (type 1)
  };
  uint64_t swap;
  uint32_t rkey;             // RDMA and atomics; BIND_MW: the window's new rkey
  uint32_t ah;               // UD: the daemon's address handle number
  union {
    uint32_t remote_qpn;     // UD
    uint32_t bind_mr_lkey;   // BIND_MW: the region
  };
  union {
    uint32_t remote_qkey;    // UD
    uint32_t bind_access;    // BIND_MW: verbs::AccessFlags (remote rights, zero_based)
  };
  uint16_t num_sge;
  uint16_t reserved;
  uint32_t inline_length;
  uint32_t remote_srqn;      // XRC: the SRQ at the target
  uint32_t reserved2;
};
static_assert(sizeof(SendEntry) == 80);
static_assert(offsetof(SendEntry, bind_mw) == 20 && offsetof(SendEntry, bind_addr) == 24 &&
              offsetof(SendEntry, bind_length) == 32 && offsetof(SendEntry, rkey) == 48 &&
              offsetof(SendEntry, bind_mr_lkey) == 56 && offsetof(SendEntry, bind_access) == 60);

// A receive work request (QP receive queue or SRQ); followed by num_sge WireSge.
struct RecvEntry {
  uint64_t wr_id;
  uint32_t num_sge;
  uint32_t reserved;
};
static_assert(sizeof(RecvEntry) == 16);

// A work completion: ibv_wc's fields, with the immediate as the value on the wire, and what only the
// ibv_cq_ex API reads (the timestamp, a tag matching receive's ibv_wc_tm_info). 64 bytes: one cache line
// per slot (the ring's entries start on a 64-byte boundary).
struct CompletionEntry {
  uint64_t wr_id;
  uint32_t status;      // verbs::WcStatus
  uint32_t opcode;      // verbs::WcOpcode
  uint32_t vendor_err;
  uint32_t byte_len;
  uint32_t imm_data;    // immediate, or the invalidated rkey
  uint32_t qp_num;
  uint32_t src_qp;
  uint32_t wc_flags;    // verbs::WcFlags
  uint16_t pkey_index;
  uint8_t sl;
  uint8_t reserved;
  uint32_t tm_priv;     // tag matching: the TMH's app_ctx (ibv_wc_tm_info.priv)
  uint64_t timestamp;   // the engine's clock when the completion was made: CLOCK_MONOTONIC nanoseconds
  uint64_t tm_tag;      // tag matching: the TMH's tag (ibv_wc_tm_info.tag)
};
static_assert(sizeof(CompletionEntry) == 64);
static_assert(offsetof(CompletionEntry, tm_priv) == 44 && offsetof(CompletionEntry, timestamp) == 48 &&
              offsetof(CompletionEntry, tm_tag) == 56);

inline constexpr uint32_t round_up8(size_t n) { return uint32_t((n + 7) & ~size_t(7)); }

inline constexpr uint32_t send_entry_size(uint32_t max_sge, uint32_t max_inline) {
  return round_up8(sizeof(SendEntry) + std::max<size_t>(size_t(max_sge) * sizeof(WireSge), max_inline));
}
inline constexpr uint32_t recv_entry_size(uint32_t max_sge) {
  return round_up8(sizeof(RecvEntry) + size_t(std::max<uint32_t>(max_sge, 1)) * sizeof(WireSge));
}
inline constexpr uint32_t completion_entry_size() { return sizeof(CompletionEntry); }

// Written to a completion channel's pipe when an armed CQ gets a completion (ibv_get_cq_event reads it).
struct CompletionEventRecord {
  uint32_t cq;
  uint32_t reserved;
};

// Written to the device's async event pipe (ibv_get_async_event reads it); `object` is the QP, CQ or SRQ
// number for the event's type, the port number for port events.
struct AsyncEventRecord {
  uint32_t type;  // verbs::EventType
  uint32_t object;
};

// The daemon's status, shared read-only with every client: whether the engine sleeps (a client that posts
// then rings the wake eventfd, the only system call on the data path, and only when the NIC was idle), and
// whether the daemon is going away.
struct alignas(64) EngineStatus {
  uint32_t magic;
  uint32_t version;
  uint32_t daemon_pid;
  uint32_t reserved;
  alignas(64) uint32_t sleeping;
  alignas(64) uint32_t shutting_down;
  // Moves each time the port's GID table changes (an address added or removed while the daemon runs):
  // a client that cached the table reads it again when this differs from what it saw.
  alignas(64) uint32_t gid_generation;
};
inline constexpr uint32_t engine_status_magic = 0x55524f53;  // "UROS"

}  // namespace uroce::emulator::protocol
