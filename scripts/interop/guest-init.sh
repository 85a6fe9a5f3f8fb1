#!/bin/sh
# /init of the guest's initramfs (busybox sh). Loads the modules, mounts the host's root (virtio-9p tag
# "hostroot", read-only) with tmpfs over the writable places and the run's shared directory (tag "work",
# read-write) at /run/interop, then hands over to the guest agent named on the kernel command line
# (interop.agent=PATH, a path in the host's root).
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
for m in /modules/*.ko; do
  insmod "$m" || echo "init: insmod $m failed"
done
agent=
for word in $(cat /proc/cmdline); do
  case "$word" in interop.agent=*) agent=${word#interop.agent=} ;; esac
done
# cache=loose: the host's root does not change under the guest, and 9p without a cache is slow under TCG.
mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=512000 hostroot /newroot ||
  { echo "init: cannot mount the host root"; sleep 5; exit 1; }
# The host's root as it is, before tmpfs hides parts of it.
mkdir -p /hostroot
mount --bind /newroot /hostroot
for d in tmp run var root; do mount -t tmpfs tmpfs "/newroot/$d"; done
# The repository (the agent's, with its build) may live under one of those, a clone in /tmp or /root: it
# goes back in its place, still read-only.
repo=${agent%/scripts/interop/*}
case "$repo" in
  /tmp/* | /run/* | /var/* | /root/*)
    mkdir -p "/newroot$repo"
    mount --bind "/hostroot$repo" "/newroot$repo" || { echo "init: cannot bind $repo"; sleep 5; exit 1; }
    ;;
esac
mkdir -p /newroot/run/interop
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 work /newroot/run/interop ||
  { echo "init: cannot mount the work share"; sleep 5; exit 1; }
mount --move /proc /newroot/proc
mount --move /sys /newroot/sys
mount --move /dev /newroot/dev
echo "init: switching to the host root, agent $agent"
exec switch_root /newroot /bin/sh "$agent"
