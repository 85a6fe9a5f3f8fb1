#!/bin/sh
# iser_target.sh PORT IQN INITIATOR...: tgt's target daemon (tgtd, with its iser driver on rdma_cm and
# verbs) serving the iSCSI target IQN on rdma_cm port 3260 (iSER's) of every address, to the initiators
# named; its logical unit 1 is a file of $ISER_LUN_MIB MiB (16 unless set) of random bytes in the working
# directory. The server of the interop matrix's iSER row (programs.py), and the target of the verbs shim's
# iser family (tests/verbs_shim/iser_storage.py). PORT names tgtd's control socket
# (/var/run/tgtd/socket.PORT) and its readiness signal:
#
# once the target is ready, an iSCSI-over-TCP portal opens on 127.0.0.1, TCP port PORT. The harness starts
# the client when a TCP socket listens on the server's port, and an rdma_cm listener is not one it can see.
# The client reaches the target over iSER alone.
#
# The iser driver keeps its default port because tgt 1.0.85 cannot be told another reliably: its parser of
# "--iser port=N" tests errno after strtol without clearing it first, so it refuses any N when an earlier
# call left errno set (real libibverbs' start-up does; uroce's shim happens not to).
#
# tgtd ignores SIGTERM while it serves a target, so TERM or INT (the harness stopping the server) make
# this script kill it by PID and exit 143.
set -eu
port=$1 iqn=$2
shift 2
lun=$(pwd)/iser-lun-$port.img
control=/var/run/tgtd/socket.$port

head -c "$((${ISER_LUN_MIB:-16} * 1048576))" /dev/urandom >"$lun"
# tgtd's control socket lives there. tgt's service makes it; in the VM /var is a fresh tmpfs.
mkdir -p /var/run/tgtd
# The iscsi driver's own TCP portal on the loopback, at a port the kernel picks (its default is every
# address, port 3260); pool_sz_mb: the iser driver registers one buffer pool for all data, 1 GiB unless told.
tgtd -f -C "$port" --iscsi portal=127.0.0.1:0 --iser pool_sz_mb=128 &
pid=$!
stop() {
  kill -9 "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  rm -f "$lun" "$control" "$control.lock"
}
trap 'stop; exit 143' TERM INT

tries=0
until tgtadm -C "$port" --op show --mode target >/dev/null 2>&1; do
  kill -0 "$pid" 2>/dev/null || { echo "iser_target: tgtd exited"; stop; exit 1; }
  tries=$((tries + 1))
  [ "$tries" -lt 600 ] || { echo "iser_target: tgtd does not answer tgtadm"; stop; exit 1; }
  sleep 0.1
done
adm() {
  tgtadm -C "$port" "$@" || { echo "iser_target: tgtadm $* failed"; stop; exit 1; }
}
# tgt 1.0.85's iser driver refuses a login unless the initiator's name is bound as well as an address.
adm --lld iser --mode target --tid 1 --op new -T "$iqn"
adm --lld iser --mode target --tid 1 --op bind --initiator-address ALL
for initiator in "$@"; do
  adm --lld iser --mode target --tid 1 --op bind --initiator-name "$initiator"
done
adm --lld iser --mode logicalunit --op new --tid 1 --lun 1 --backing-store "$lun"
adm --lld iscsi --mode portal --op new --param "portal=127.0.0.1:$port"
echo "iser_target: $iqn on rdma_cm port 3260, tgtd $pid"
# A wait a trapped signal interrupts; tgtd leaves by itself only if it fails.
while kill -0 "$pid" 2>/dev/null; do
  wait "$pid" || true
done
echo "iser_target: tgtd exited"
stop
exit 1
