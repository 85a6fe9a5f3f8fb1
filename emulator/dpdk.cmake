# How the daemon links DPDK. Two flavours, chosen per executable:
#
#   uroce_dpdk_static  the EAL and a chosen set of drivers linked in (librte_*.a). Nothing is loaded at
#                      start-up: no plugin scan, so no mlx4/mlx5 driver and no libibverbs in the process,
#                      and a faster start. This is `uroced`.
#   uroce_dpdk_shared  Debian's shared DPDK: its EAL loads every driver in its plugin directory
#                      (RTE_EAL_PMD_PATH, compiled in; no option turns it off), mlx4/mlx5 and with them the
#                      real libibverbs included. This is `uroced-all-pmds`, which uroced runs in its place
#                      when a port needs one of those drivers (emulator/daemon/pmd_choice.hpp).
#
# Code that calls DPDK links uroce_dpdk_headers only (include paths and Debian's compile flags), so that
# the choice stays with the executable.

# Every driver that reaches its device without libibverbs and is useful to a NIC daemon: the virtual ports
# (af_packet, af_xdp, memif, tap, pcap, ring, null, virtio-user), the common PCI NICs of servers, clouds
# and VMs, and what they need (buses, the ring mempool). Each registers itself from a constructor, so each
# is linked whole.
set(UROCE_DPDK_STATIC_DRIVERS
  bus_pci bus_vdev bus_vmbus mempool_ring mempool_stack
  net_af_packet net_af_xdp net_memif net_tap net_pcap net_ring net_null net_virtio
  net_e1000 net_igc net_ixgbe net_i40e net_iavf net_ice common_iavf net_vmxnet3 net_ena net_gve net_bnxt
  net_enic net_netvsc net_vdev_netvsc net_txgbe net_ngbe net_atlantic net_qede net_sfc common_sfc_efx)

add_library(uroce_dpdk_headers INTERFACE)
target_compile_options(uroce_dpdk_headers INTERFACE ${DPDK_CFLAGS})

add_library(uroce_dpdk_shared INTERFACE)
# rte_eth_from_rings lives in the ring PMD, which libdpdk.pc does not list (PMDs are plugins). Its .so in
# the library directory is a symlink to the plugin in pmds-23.0, so linking it and EAL's plugin scan load
# the same file once.
find_library(DPDK_NET_RING rte_net_ring REQUIRED)
target_link_libraries(uroce_dpdk_shared INTERFACE PkgConfig::DPDK ${DPDK_NET_RING})

# Static: Debian ships every librte_*.a. The drivers above are linked whole; the libraries (EAL, ethdev,
# mbuf, ...) as a group from which the linker takes what is used; then the system libraries they need,
# (listed below).
set(_dpdk_libdir "${DPDK_LIBDIR}")
set(_drivers "")
foreach(driver IN LISTS UROCE_DPDK_STATIC_DRIVERS)
  set(_archive "${_dpdk_libdir}/librte_${driver}.a")
  if(NOT EXISTS "${_archive}")
    message(FATAL_ERROR "DPDK static driver ${_archive} not found (apt-get install libdpdk-dev)")
  endif()
  list(APPEND _drivers "${_archive}")
endforeach()
set(_libraries "")
foreach(item IN LISTS DPDK_STATIC_LDFLAGS)
  if(item MATCHES "^-l:librte_([a-z0-9_]+)\\.a$")
    set(_name "${CMAKE_MATCH_1}")
    # The non-driver libraries: drivers are named class_name (net_, bus_, common_, crypto_, ...).
    if(NOT _name MATCHES "^(bus|common|mempool|dma|net|raw|crypto|compress|regex|vdpa|event|baseband)_")
      list(APPEND _libraries "${_dpdk_libdir}/librte_${_name}.a")
    endif()
  endif()
endforeach()
# What those drivers and libraries call outside DPDK: libbsd (strlcpy), libnuma (EAL), libpcap (pcap PMD),
# libxdp/libbpf/libelf/zlib (af_xdp PMD). Not rdma-core: only the mlx drivers use it, and they are not here.
set(_system bsd numa pcap xdp bpf elf z m dl rt atomic)
list(JOIN _drivers "," _drivers_csv)
list(JOIN _libraries "," _libraries_csv)
add_library(uroce_dpdk_static INTERFACE)
target_link_libraries(uroce_dpdk_static INTERFACE
  "$<LINK_LIBRARY:WHOLE_ARCHIVE,${_drivers_csv}>"
  "$<LINK_GROUP:RESCAN,${_libraries_csv}>"
  ${_system})
# Only the system libraries something really uses end up as dependencies (libbpf, libxdp, ... are needed
# by af_xdp alone, but the loader would map every listed one).
target_link_options(uroce_dpdk_static INTERFACE "LINKER:--as-needed")
