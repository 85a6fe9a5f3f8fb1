// Runs a function on EAL's interrupt thread: the workaround for a second race in DPDK 22.11's memif driver.
//
// memif handles its control channel on the interrupt thread. When the peer says goodbye (or its socket
// closes) the handler calls memif_disconnect, which unmaps and frees the shared regions outside any lock.
// Stopping the port calls memif_disconnect too, on whatever thread stops it. Nothing keeps the two from
// tearing one connection down at once, each unmapping, closing and freeing what the other may already have
// given back. The crash seen: SIGSEGV in rte_free (malloc_elem_free_list_insert) under memif_free_regions
// on the interrupt thread, after the last check of tests/emulator/port's "memif server and client in one
// process exchange frames", 1 run in 40 under ASan, once in CI; there closing the client makes the
// server's peer leave just as the test stops the server. Two daemons joined by memif and stopped together
// can meet the same race.
//
// The interrupt thread runs one callback at a time, and EAL's alarms run there too (a timerfd among its
// interrupt sources). So a stop and close made from an alarm cannot overlap a control-channel handler.
//
// The same thread outlives rte_eal_cleanup: DPDK 22.11 never stops it. Cleanup unmaps DPDK's memory, where
// the interrupt sources of memif's sockets keep their handles, and one memif never unregisters (its
// listening socket, which it never closes either) stays on the thread's list. Whenever the thread wakes
// after that (a late "rebuild the list" note from an unregister, any event), it walks the list and reads
// unmapped memory: SIGSEGV in rte_intr_fd_get, seen once in 200 runs at the exit of the same test when
// stops first ran on the interrupt thread (which moved the last unregister's note later).
#pragma once

#include <chrono>
#include <functional>

namespace uroce::emulator::port {

// Runs `work` on EAL's interrupt thread and returns when it has run. If no alarm can be set, or the
// interrupt thread has not run it within `patience` (a thread stuck elsewhere), `work` runs on the calling
// thread instead: a possible race is better than a shutdown that never ends. Returns true if it ran there.
bool run_on_interrupt_thread(const std::function<void()>& work,
                             std::chrono::milliseconds patience = std::chrono::seconds(5));

// Before rte_eal_cleanup: parks EAL's interrupt thread in an interrupt callback that never returns, once
// what was already queued for it has run, so that it touches nothing cleanup frees or unmaps. The process
// must not need interrupts or alarms afterwards (it is about to exit). Once per process; returns true if
// the thread was parked.
bool park_interrupt_thread(std::chrono::milliseconds patience = std::chrono::seconds(5));

}  // namespace uroce::emulator::port
