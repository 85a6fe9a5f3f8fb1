#!/usr/bin/env bash
# Builds the guest's initramfs: busybox-static, the kernel modules rxe (and a VLAN) needs (in load order), and
# guest-init.sh as /init. The guest's real root is the host's, shared read-only over virtio-9p, so the
# initramfs holds only what it takes to mount it.
#
#   initramfs.sh KERNEL_RELEASE OUTPUT.cpio.gz
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
release=$1 out=$2

# Order matters: each module's dependencies come before it (busybox insmod does not resolve them).
# crc32_generic: rxe's ICRC uses the kernel crypto API's crc32. sch_netem: loss injected inside the guest.
# llc stp garp mrp 8021q: the VLAN device of the "vlan" cells (loaded here: a modprobe over 9p under TCG,
# beside a busy guest, took over a minute).
modules=(virtio_ring virtio_pci_modern_dev virtio_pci_legacy_dev virtio virtio_pci failover net_failover
         virtio_net 9pnet 9pnet_virtio netfs fscache 9p crc32_generic ib_core ib_uverbs udp_tunnel
         ip6_udp_tunnel rdma_rxe ib_cm iw_cm configfs rdma_cm rdma_ucm ib_umad sch_netem
         llc stp garp mrp 8021q)

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root"/{bin,dev,proc,sys,newroot,modules}
cp /bin/busybox "$root/bin/busybox"
for applet in sh mount mkdir insmod switch_root sleep cat echo; do ln -s busybox "$root/bin/$applet"; done
i=0
for m in "${modules[@]}"; do
  path=$(modinfo -k "$release" -n "$m") || { echo "initramfs: module $m not found for $release" >&2; exit 1; }
  i=$((i + 1))
  cp "$path" "$root/modules/$(printf '%02d' "$i")-$m.ko"
done
install -m 0755 "$here/guest-init.sh" "$root/init"
(cd "$root" && find . | cpio -o -H newc --quiet) | gzip -1 >"$out"
