#!/bin/sh
# In the interop VM: hands the VM's second NIC, a PCI device (virtio-net), to DPDK and runs uroced on it
# with DPDK's own driver for it (net_virtio), as on a host with a physical NIC: the device is unbound from
# the kernel's driver and bound to uio_pci_generic, DPDK maps its BARs and gives it hugepage memory for DMA
# (a device without an IOMMU needs physical addresses: hugepages, never --no-huge). Ends by exec'ing uroced,
# so that stopping this job stops the daemon.
#
#   pci-port.sh PCI_ADDRESS UROCED IP SOCKET IP6
set -eu
dev=$1 uroced=$2 ip=$3 socket=$4 ip6=$5
sys=/sys/bus/pci/devices/$dev
[ -e "$sys" ] || { echo "pci-port: no PCI device $dev"; exit 1; }
modprobe uio_pci_generic
if [ -e "$sys/driver" ]; then echo "$dev" >"$sys/driver/unbind"; fi
echo uio_pci_generic >"$sys/driver_override"
echo "$dev" >/sys/bus/pci/drivers_probe
[ "$(basename "$(readlink "$sys/driver")")" = uio_pci_generic ] || { echo "pci-port: $dev not bound to uio_pci_generic"; exit 1; }
grep -q ' hugetlbfs ' /proc/mounts || { mkdir -p /dev/hugepages; mount -t hugetlbfs nodev /dev/hugepages; }
echo 192 >/proc/sys/vm/nr_hugepages  # 384 MB of 2-MB pages for uroced's 256
grep -E 'HugePages_(Total|Free)' /proc/meminfo
exec "$uroced" --port "$dev" --ip "$ip" --ip "$ip6" --socket "$socket" --memory-mb 256 --hugepages on
