// A session's doorbell: one word in shared memory per open device, which the client bumps after it
// publishes a producer index on any of its send, receive or SRQ rings. The engine reads one word per
// session per turn instead of every ring's producer index, and looks at a session's rings only when the
// word moved (or when a ring still held work it could not take at once).
//
// Memory order: the client publishes the producer index (release store), then bumps the word with an
// atomic read-modify-write (release). Because every client write of the word is a read-modify-write, the
// value the engine loads (acquire) heads a release sequence containing every earlier bump, so the engine
// that sees the word move also sees every producer index published before it, from any client thread.
// A plain store would not do: a store by a second thread would cut the first thread's release sequence.
//
// The word is only a hint the client controls: a hostile client that scribbles on it makes the engine
// look at that client's own rings (whose contents are validated as always), nothing else.
#pragma once

#include <atomic>
#include <cstdint>

#include "emulator/protocol/shared_region.hpp"

namespace uroce::emulator::protocol {

struct alignas(64) SessionDoorbell {
  uint32_t magic;
  uint32_t version;
  alignas(64) uint32_t rung;  // bumped by the client (fetch_add, release), read by the engine (acquire)
};
inline constexpr uint32_t session_doorbell_magic = 0x55524442;  // "URDB"
inline constexpr uint32_t session_doorbell_version = 1;

inline std::atomic_ref<uint32_t> doorbell_word(SessionDoorbell& d) { return std::atomic_ref<uint32_t>(d.rung); }

// A fresh doorbell page, formatted (the daemon makes one per session that asks for it).
inline SharedRegion make_session_doorbell() {
  SharedRegion page = SharedRegion::create("uroce-doorbell", sizeof(SessionDoorbell));
  auto* d = reinterpret_cast<SessionDoorbell*>(page.data());
  d->magic = session_doorbell_magic;
  d->version = session_doorbell_version;
  return page;
}

}  // namespace uroce::emulator::protocol
