// How registered memory is mapped on both sides of the control socket: the client's move of a region onto
// a memfd (client/shared_pages.cpp) and uroced's mapping of it (daemon/shared_memory.cpp).
#pragma once

#include <cstdint>

namespace uroce::emulator::protocol {

// Regions of this size or more are populated at registration in both processes (MADV_POPULATE_WRITE), as a
// NIC pins a region's pages then, so that neither the application's next touch of a page nor the engine's
// first RDMA access to it takes a page fault (~11 us each on this project's VMs). Smaller regions fault
// their few pages in faster than the populating calls cost: bench_control's 8-KiB registrations were
// 15-25% slower populated.
inline constexpr uint64_t populate_from_bytes = 64 * 1024;

}  // namespace uroce::emulator::protocol
