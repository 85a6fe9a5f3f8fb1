// Keeps munmap from running under a memif burst: the workaround for a race in DPDK 22.11's memif driver.
//
// The memif PMD tears a connection down on EAL's interrupt thread when its peer goes away
// (memif_disconnect: it clears the "connected" flag, then memif_free_regions munmaps the shared regions
// and frees their descriptors), with nothing to stop the data-path thread from being inside
// rte_eth_rx_burst or rte_eth_tx_burst at that moment. A burst that had already checked the flag then
// reads rings and buffers that are no longer mapped, and the process dies (SIGSEGV): a memif peer that
// crashed took uroced down with it, about 1 time in 3 while traffic flowed (tests/emulator/port,
// "[memif-race]").
//
// uroced is linked with `--wrap=munmap` (emulator/port/CMakeLists.txt): every call to munmap in its
// statically linked code, DPDK's drivers included, goes to unmap_guard.cpp's __wrap_munmap, which waits
// until no guarded burst is running and keeps new ones out until the unmapping is done. A burst that is
// kept out does nothing (0 frames), as the PMD itself would once the flag is clear. After the first munmap
// the flag is seen clear, so the frees that follow are safe too. Only memif ports are guarded (DpdkPort);
// an uncontended burst costs two atomic operations. Code in shared libraries (glibc's own munmap calls,
// uroced-all-pmds' plugin drivers) is not wrapped: the all-PMD build does not drive memif.
#pragma once

namespace uroce::emulator::port {

// Around one rx or tx burst on a port whose driver unmaps under bursts. Admitted unless an unmapping is
// under way; a burst that is not admitted must not run.
class UnmapGuard {
 public:
  UnmapGuard() noexcept;
  ~UnmapGuard();
  UnmapGuard(const UnmapGuard&) = delete;
  UnmapGuard& operator=(const UnmapGuard&) = delete;
  bool admitted() const { return admitted_; }

 private:
  bool admitted_;
};

}  // namespace uroce::emulator::port
