#!/usr/bin/env bash
# Interop with a real RoCE stack: boots Linux Soft-RoCE (rdma_rxe) in a QEMU VM and runs real programs
# between it and uroce, both directions, clean and with 5% loss, and prints a Markdown matrix.
#
#   scripts/interop.sh                 the short subset (CI): ibv_rc_pingpong both ways, one lossy ib_write_bw,
#                                      ibv_rc_pingpong and ib_write_bw from uroce on a PCI NIC (below), and
#                                      ibv_rc_pingpong and ib_write_bw on 802.1Q VLAN 100, one each way, and
#                                      UCX's tag_bw (ucx_perftest through UCP) and libfabric's ofi_rxm
#                                      (fi_pingpong over MSG endpoints) from rxe to uroce, and UCP connected by
#                                      socket address (UCX's rdmacm) from uroce to rxe, fio's RDMA READs
#                                      from uroce to rxe, and iSCSI over RDMA (libiscsi's iscsi-perf) from rxe
#                                      to tgt's target through uroce
#   scripts/interop.sh --full          everything: pingpongs, perftest, qperf, pyverbs, UCX, libfabric, fio,
#                                      iSER; uroce as client and as server, plus rxe <-> rxe (a second VM)
#                                      as the control; clean and lossy;
#                                      and every program from uroce on a PCI NIC: uroced in the VM on its
#                                      second NIC, a virtio-net PCI device run by DPDK's net_virtio through
#                                      uio_pci_generic, as uroced runs a physical NIC, against the host's uroced
#   options: --cells A,B   only programs whose name contains A or B, or only the cells of direction A
#                          (uroce-client, uroce-server, control, pci, vlan-client, vlan-server), with --full
#            --out FILE    where the matrix goes (default build/interop/matrix[-full].md)
#            --build DIR   the build to test (default build/release; configured and built here)
#            --no-build    use DIR as it is (ctest: the test suite built it)
#            --time-limit S  stop the matrix after S seconds (cleanup still runs; default 3600, CI 900)
#            --retries N   run a failed cell again up to N times; a later pass is marked PASS* with the
#                          earlier failure (default 0; for a machine so loaded that rxe under TCG stalls)
#   exit status: 0 every cell passed, 1 a cell failed, 2 bad usage, 77 skipped (not root, or
#   UROCE_SKIP_INTEROP=1)
#   environment: INTEROP_ACCEL=auto|kvm|tcg, INTEROP_BOOT_TIMEOUT (s), INTEROP_VM_MEM (MB), INTEROP_VM_CPUS
#
# Pieces (scripts/interop/): initramfs.sh (the guest's initramfs), guest-init.sh + guest-agent.sh (the
# guest), vm.sh (boot, KVM-or-TCG), netns.sh (the namespace, bridge, taps, veth), loss.sh (nftables loss),
# matrix.py + programs.py + host.py + guest.py + capture_check.py (the cells), cleanup.sh (the trap).
# Everything it creates is recorded and removed on exit, whatever happens; nothing else is touched.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

full=0 cells= out= build=build/release do_build=1 time_limit=3600 retries=0
while (($#)); do
  case "$1" in
    --full) full=1 ;;
    --cells) cells=$2; shift ;;
    --out) out=$2; shift ;;
    --build) build=$2; shift ;;
    --no-build) do_build=0 ;;
    --time-limit) time_limit=$2; shift ;;
    --retries) retries=$2; shift ;;
    -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
    *) echo "interop.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
if [ -n "${UROCE_SKIP_INTEROP:-}" ]; then echo "interop.sh: skipped (UROCE_SKIP_INTEROP)"; exit 77; fi
[ "$(id -u)" = 0 ] || { echo "interop.sh: skipped: needs root (network namespaces, taps, nftables)"; exit 77; }
if [ -z "$out" ]; then
  out=$repo/build/interop/matrix.md
  if ((full)); then out=$repo/build/interop/matrix-full.md; fi
fi
mkdir -p "$(dirname "$out")"

scripts/deps.sh >/dev/null
if ((do_build)); then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$build" --target uroce uroced uroce_verbs_shim uroce_rdmacm_shim >/dev/null
fi
build=$(cd "$build" && pwd)

export INTEROP_DIR=$repo/scripts/interop
. "$INTEROP_DIR/run.sh" uroce-interop
prepare_guest_kernel

ns=uroce-interop-$$
netns_create "$ns"
# vm0's second NIC (tap2) is a PCI device that uroced in the VM drives with DPDK (the "pci" cells).
vm_boot vm0 "$ns" tap0 52:54:00:99:00:02 10.99.0.2/24 tap2 52:54:00:99:00:04
if ((full)); then  # the rxe <-> rxe control needs a second VM; it boots while the first one does
  INTEROP_ACCEL=$(cat "$INTEROP_WORK/vm0/accel") vm_boot vm1 "$ns" tap1 52:54:00:99:00:03 10.99.0.3/24
fi
vm_wait_ready vm0
if ((full)); then vm_wait_ready vm1 || log "vm1 did not boot: the control cells are left out"; fi

args=(--run "$INTEROP_WORK" --netns "$ns" --build "$build" --out "$out" --accel "$(cat "$INTEROP_WORK/vm0/accel")"
      --kernel "$INTEROP_KERNEL" --retries "$retries")
if ((full)); then args+=(--full); fi
if [ -n "$cells" ]; then args+=(--cells "$cells"); fi
start=$SECONDS
rc=0
# In the background and waited for, so that a TERM or INT reaches the trap at once (bash runs traps only
# between foreground commands); cleanup stops it by PID.
timeout -k 10 "$time_limit" /usr/bin/python3 "$INTEROP_DIR/matrix.py" "${args[@]}" &
matrix_pid=$!
record pid "$matrix_pid"
wait "$matrix_pid" || rc=$?
if [ "$rc" = 124 ]; then log "the matrix did not finish within --time-limit $time_limit s"; fi
log "matrix done in $((SECONDS - start)) s; written to $out"
exit "$rc"
