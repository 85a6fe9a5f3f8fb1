#!/usr/bin/env bash
# Installs every Debian 12 package uroce needs to build, test and benchmark.
# Safe to run any number of times: it asks apt only for packages that are missing.
set -euo pipefail

packages=(
  # toolchain
  build-essential cmake ninja-build pkg-config git
  clang libclang-rt-14-dev            # libFuzzer + sanitizer runtimes
  # libraries (see DEVELOPERS.md: Debian packages only, nothing vendored)
  libdpdk-dev dpdk                    # DPDK 22.11: the daemon's ports
  libboost-dev                        # Boost.Asio: the daemon's control socket
  libspdlog-dev libfmt-dev            # logging
  libpcap-dev                         # reading/writing captures (pcap and pcapng)
  libisal-dev                         # CRC-32 for the ICRC (chosen by measurement: docs/icrc.md)
  libibverbs-dev                      # the real verbs.h: used by the ABI test and later by the verbs shim
  librdmacm-dev                       # the real rdma_cma.h: the librdmacm shim is built against it
  zlib1g-dev                          # CRC-32 candidate measured against ISA-L in the benchmark
  libcli11-dev                        # command-line parsing
  nlohmann-json3-dev                  # JSON output of `uroce dissect --json`
  catch2                              # Catch2 v2 unit tests
  # test tools
  tshark                              # reference dissector the tests compare against
  iproute2                            # veth pairs and network namespaces in integration tests
  python3                             # test glue (tshark comparison)
  ibverbs-utils perftest              # unmodified verbs programs run through the verbs shim
  qperf rdmacm-utils python3-pyverbs  # more unmodified verbs programs (qperf, rping) and pyverbs
  ucx-utils libfabric-bin             # UCX (ucx_perftest) and libfabric (fi_pingpong) on their verbs transports
  libucx-dev                          # a UCP client/server test program (UCX's rdmacm connection manager)
  netpipe-openmpi                     # an MPI program (NetPIPE) under Open MPI and its UCX PML
  mpich netpipe-mpich2                #   and under MPICH 4.0 (ch4 on UCX)
  fio                                 # fio's rdma I/O engine (RDMA WRITE, READ and SEND over rdma_cm)
  dapl2-utils                         # DAPL 2.1's dtest, dtestx and dtestcm on its three verbs providers
  tgt libiscsi-bin                    # iSCSI over RDMA: tgt's target daemon (iser driver), libiscsi's initiator
  iperf3                              # the kernel's TCP beside uroce in the benchmark table
  strace                              # counts the verbs shim's system calls (tests/verbs_shim/test_syscalls.py)
  iputils-ping                        # the kernel's ping -6 against the daemon (tests/integration/test_ipv6.py)
  radvd                               # a real IPv6 router advertising itself (tests/integration/test_routing.py)
  qemu-system-x86 linux-image-amd64   # QEMU's RDMA live migration; scripts/interop.sh: Linux rxe in a VM as uroce's peer
  busybox-static nftables tcpdump     #   its initramfs, loss injection on the bridge, captures
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "deps: installing ${missing[*]}"
sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
