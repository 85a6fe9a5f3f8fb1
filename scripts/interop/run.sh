# The start of a harness run, sourced by interop.sh and mirror_captures.sh (with $INTEROP_DIR set): a private
# work directory ($INTEROP_WORK, named after $1) with its registry, the helpers (lib.sh, vm.sh, netns.sh),
# and an EXIT trap that undoes everything the run created (cleanup.sh) and removes the directory, unless the
# run failed and INTEROP_KEEP is set.
INTEROP_WORK=$(mktemp -d "/tmp/${1:-uroce-interop}.XXXXXX")
export INTEROP_WORK
: >"$INTEROP_WORK/created"
. "$INTEROP_DIR/lib.sh"
. "$INTEROP_DIR/vm.sh"
. "$INTEROP_DIR/netns.sh"
finish() {
  local rc=$?
  trap - EXIT INT TERM
  "$INTEROP_DIR/cleanup.sh" "$INTEROP_WORK"
  if [ "$rc" = 0 ] || [ -z "${INTEROP_KEEP:-}" ]; then rm -rf "$INTEROP_WORK"; else log "kept $INTEROP_WORK"; fi
  exit "$rc"
}
trap finish EXIT
trap 'exit 130' INT TERM

# prepare_guest_kernel: $INTEROP_KERNEL, the newest installed kernel with rdma_rxe (what the VMs boot), and
# the VMs' initramfs for it.
prepare_guest_kernel() {
  local k
  INTEROP_KERNEL=
  for k in $(ls -1 /boot/vmlinuz-* 2>/dev/null | sed 's|/boot/vmlinuz-||' | sort -V -r); do
    if modinfo -k "$k" -n rdma_rxe >/dev/null 2>&1; then INTEROP_KERNEL=$k; break; fi
  done
  [ -n "$INTEROP_KERNEL" ] || die "no installed kernel with rdma_rxe (linux-image-amd64)"
  export INTEROP_KERNEL
  "$INTEROP_DIR/initramfs.sh" "$INTEROP_KERNEL" "$INTEROP_WORK/initramfs.cpio.gz"
}
