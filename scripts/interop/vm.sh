# Boots one interop VM: Debian's kernel with -kernel, the initramfs from initramfs.sh, the host's root
# over virtio-9p read-only, a per-VM shared directory read-write (the guest agent's command queue), and
# one virtio-net on a tap inside the harness's network namespace; optionally a second virtio-net, at the
# fixed PCI address $INTEROP_PCI_NIC, for a DPDK PMD in the guest (scripts/pci_port.sh). Source it after
# lib.sh.
#
# KVM is used only where it really works: /dev/kvm here can be a paravirtualised variant on which Debian's
# kernel hangs right after the boot stub ("Probing EDD"). With accel "auto" the VM is started with KVM
# first; if the kernel has not printed its banner within $INTEROP_KVM_PROBE seconds, that VM is stopped
# and the boot is redone with TCG (software emulation: ~6.5 s to boot on an idle machine).

INTEROP_KVM_PROBE=${INTEROP_KVM_PROBE:-12}
INTEROP_BOOT_TIMEOUT=${INTEROP_BOOT_TIMEOUT:-300}
INTEROP_PCI_NIC=0000:00:10.0  # slot 0x10: after everything QEMU places by itself

# vm_launch NAME ACCEL NETNS TAP MAC IP/N KERNEL INITRD [PCI_TAP PCI_MAC]: starts qemu in the background;
# echoes its pid.
vm_launch() {
  local name=$1 accel=$2 ns=$3 tap=$4 mac=$5 ip=$6 kernel=$7 initrd=$8 pci_tap=${9:-} pci_mac=${10:-}
  local dir=$INTEROP_WORK/$name cpu=max extra=()
  [ "$accel" = kvm ] && cpu=host
  if [ -n "$pci_tap" ]; then
    extra=(-netdev "tap,id=n1,ifname=$pci_tap,script=no,downscript=no"
           -device "virtio-net-pci,netdev=n1,mac=$pci_mac,addr=0x10")
  fi
  mkdir -p "$dir/share"
  : >"$dir/console.log"
  ip netns exec "$ns" qemu-system-x86_64 -nodefaults -no-user-config -name "$name" \
    -machine pc -accel "$accel" -cpu "$cpu" -smp "${INTEROP_VM_CPUS:-1}" -m "${INTEROP_VM_MEM:-1024}" \
    -kernel "$kernel" -initrd "$initrd" \
    -append "console=ttyS0 loglevel=6 panic=-1 interop.agent=$INTEROP_DIR/guest-agent.sh interop.ip=$ip" \
    -display none -serial "file:$dir/console.log" -monitor none -no-reboot \
    -fsdev local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap \
    -device virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot \
    -fsdev "local,id=work,path=$dir/share,security_model=none,multidevs=remap" \
    -device virtio-9p-pci,fsdev=work,mount_tag=work \
    -netdev "tap,id=n0,ifname=$tap,script=no,downscript=no" \
    -device "virtio-net-pci,netdev=n0,mac=$mac" "${extra[@]}" \
    </dev/null >"$dir/qemu.log" 2>&1 &
  local pid=$!
  record pid "$pid"
  echo "$pid"
}

# vm_stop PID: stops one qemu by PID (TERM, then KILL).
vm_stop() {
  kill "$1" 2>/dev/null || return 0
  for _ in $(seq 50); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
  kill -9 "$1" 2>/dev/null || true
}

kvm_usable() { [ -r /dev/kvm ] && [ -w /dev/kvm ]; }

# vm_boot NAME NETNS TAP MAC IP/N [PCI_TAP PCI_MAC]: boots the VM (vm_wait_ready waits for its agent);
# writes NAME/pid and NAME/accel.
vm_boot() {
  local name=$1 ns=$2 tap=$3 mac=$4 ip=$5 pci=("${@:6}")
  local dir=$INTEROP_WORK/$name accel=${INTEROP_ACCEL:-auto} pid
  local kernel=/boot/vmlinuz-$INTEROP_KERNEL initrd=$INTEROP_WORK/initramfs.cpio.gz
  if [ "$accel" = auto ]; then
    accel=tcg
    if kvm_usable; then
      pid=$(vm_launch "$name" kvm "$ns" "$tap" "$mac" "$ip" "$kernel" "$initrd" "${pci[@]}")
      if wait_for "$INTEROP_KVM_PROBE" grep -q "Linux version" "$dir/console.log"; then
        accel=kvm
      else
        log "$name: KVM did not start the kernel within ${INTEROP_KVM_PROBE}s; using TCG"
        vm_stop "$pid"
      fi
    fi
  fi
  if [ "$accel" = tcg ]; then
    pid=$(vm_launch "$name" tcg "$ns" "$tap" "$mac" "$ip" "$kernel" "$initrd" "${pci[@]}")
  fi
  echo "$pid" >"$dir/pid"
  echo "$accel" >"$dir/accel"
}

# vm_wait_ready NAME: waits for the guest agent's ready file; fails (console shown) if the VM died or
# did not get there in time.
vm_wait_ready() {
  local name=$1 dir=$INTEROP_WORK/$1
  local start=$SECONDS deadline=$((SECONDS + INTEROP_BOOT_TIMEOUT))
  until [ -e "$dir/share/ready" ]; do
    if ! kill -0 "$(cat "$dir/pid")" 2>/dev/null || ((SECONDS > deadline)); then
      log "$name did not boot; its console:"
      tail -30 "$dir/console.log" >&2
      cat "$dir/qemu.log" >&2
      return 1
    fi
    sleep 0.2
  done
  log "$name ready ($(cat "$dir/accel"), $((SECONDS - start)) s): $(grep -m1 -o 'link rxe0[^ ]* state [A-Z]*' "$dir/share/ready")"
}
