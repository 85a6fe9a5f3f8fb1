#!/usr/bin/python3
"""One RC connection between two pyverbs processes and the checks the interop matrix asks for: SEND with
immediate data, zero-length SEND and zero-length WRITE with immediate, multi-packet WRITE and READ with
the data verified, FETCH_ADD and CMP_SWAP with known operands (returned and final values checked), an
RNR NAK (a SEND arrives before its receive is posted; rnr_retry 7), memory windows (the server opens part of
a region through a type 1 window, bound with ibv_bind_mw, and a type 2 window, bound by an IBV_WR_BIND_MW
work request; the client WRITEs and READs through them with the windows' rkeys and closes the type 2 window
with SEND with invalidate), and a remote access error (a WRITE to memory registered without remote write)
that must complete with IBV_WC_REM_ACCESS_ERR. The client is the
requester of every operation; the server is the responder. Out-of-band exchange over TCP, JSON lines.

  pyverbs_peer.py --dev DEV --gid N --port P                 # server
  pyverbs_peer.py --dev DEV --gid N --port P --connect IP    # client
  --lossy: on a lossy network, where the remote access error may end as retry-exceeded (its NAK lost)
Prints "pyverbs_peer: all N checks passed" and exits 0, or names the failed check and exits 1.
"""
import argparse
import json
import socket
import sys
import time

import pyverbs.enums as e
from pyverbs.addr import AHAttr, GID, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR, MW, MWBind, MWBindInfo
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import RecvWR, SGE, SendWR

SIZE = 1 << 20
BIG = 65536            # multi-packet at any path MTU up to 4096
ATOMIC_AT = SIZE - 64  # a 64-bit word in the server's buffer for the atomics
WINDOW_READ_AT = 5 * BIG  # where the client's READ through a window lands
PATTERN = bytes((i * 7 + 3) & 0xFF for i in range(BIG))
checks = 0


def check(cond, what):
    global checks
    if not cond:
        print(f"pyverbs_peer: FAILED: {what}", flush=True)
        sys.exit(1)
    checks += 1


class Oob:
    def __init__(self, sock):
        self.f = sock.makefile("rw")

    def send(self, **msg):
        self.f.write(json.dumps(msg) + "\n")
        self.f.flush()

    def recv(self):
        line = self.f.readline()
        if not line:
            raise SystemExit("pyverbs_peer: peer closed the exchange")
        return json.loads(line)


class Peer:
    def __init__(self, dev, gid_index, lossy=False, sl=0):
        self.lossy = lossy  # --lossy: the network drops frames
        self.sl = sl        # --sl: the address vector's service level (on a VLAN: the frames' priority)
        self.ctx = Context(name=dev)
        self.pd = PD(self.ctx)
        self.cq = CQ(self.ctx, 64)
        cap = QPCap(max_send_wr=16, max_recv_wr=16, max_send_sge=1, max_recv_sge=1)
        self.qp = QP(self.pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq, cap=cap))
        access = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ |
                  e.IBV_ACCESS_REMOTE_ATOMIC)
        self.mr = MR(self.pd, SIZE, access)
        self.ro = MR(self.pd, 4096, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_READ)  # no remote write
        self.gid_index = gid_index
        # How the device flags a completion of SEND with invalidate. rxe hands the kernel's wc_flags to the
        # application unchanged, and the kernel's IB_WC_WITH_INVALIDATE is 1 << 2, which in the verbs ABI is
        # IBV_WC_IP_CSUM_OK; IBV_WC_WITH_INV is 1 << 3 (seen: flags 5 from rxe on Debian 12's kernel 6.1).
        self.with_inv_flag = 1 << 2 if dev.startswith("rxe") else e.IBV_WC_WITH_INV
        self.gid = str(self.ctx.query_gid(1, gid_index))

    def info(self):
        return {"qpn": self.qp.qp_num, "psn": 0x1234, "gid": self.gid, "addr": self.mr.buf, "rkey": self.mr.rkey,
                "ro_addr": self.ro.buf, "ro_rkey": self.ro.rkey}

    def connect(self, remote):
        gr = GlobalRoute(dgid=GID(remote["gid"]), sgid_index=self.gid_index, hop_limit=64)
        attr = QPAttr(qp_state=e.IBV_QPS_INIT, cur_qp_state=e.IBV_QPS_RESET)
        attr.path_mtu = e.IBV_MTU_1024
        attr.dest_qp_num = remote["qpn"]
        attr.rq_psn = remote["psn"]
        attr.sq_psn = 0x1234
        attr.ah_attr = AHAttr(gr=gr, is_global=1, port_num=1, sl=self.sl)
        attr.qp_access_flags = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ |
                                e.IBV_ACCESS_REMOTE_ATOMIC)
        attr.max_rd_atomic = attr.max_dest_rd_atomic = 4
        attr.min_rnr_timer = 12          # 0.64 ms between RNR retries
        attr.timeout, attr.retry_cnt, attr.rnr_retry = 18, 7, 7
        self.qp.to_rts(attr)

    def post_recv(self, wr_id, length=BIG, offset=0):
        sg = [SGE(self.mr.buf + offset, length, self.mr.lkey)]
        self.qp.post_recv(RecvWR(wr_id=wr_id, num_sge=1, sg=sg))

    def post_send(self, opcode, wr_id, length=0, offset=0, imm=None, rdma=None, atomic=None):
        # A zero-length message is one SGE of length 0 (pyverbs insists on an SGE). `imm` is also a SEND with
        # invalidate's rkey: ibv_send_wr's invalidate_rkey shares imm_data's place, which pyverbs stores as given.
        sg = [SGE(self.mr.buf + offset, length, self.mr.lkey)]
        kw = {"imm_data": imm} if imm is not None else {}
        wr = SendWR(wr_id=wr_id, opcode=opcode, num_sge=1, sg=sg, send_flags=e.IBV_SEND_SIGNALED, **kw)
        if rdma:
            wr.set_wr_rdma(rdma[1], rdma[0])
        if atomic:
            wr.set_wr_atomic(atomic[1], atomic[0], atomic[2], atomic[3])
        self.qp.post_send(wr)

    def bind_type2(self, mw, region, addr, length, access, wr_id):
        """An IBV_WR_BIND_MW work request; the rkey it gives the window (pyverbs takes ibv_inc_rkey of the
        window's current one, as rdma-core's own tests do)."""
        wr = SendWR(wr_id=wr_id, opcode=e.IBV_WR_BIND_MW, num_sge=1, sg=[SGE(region.buf, 0, region.lkey)],
                    send_flags=e.IBV_SEND_SIGNALED)
        wr.num_sge = 0
        wr.set_bind_wr(mw, MWBindInfo(region, addr, length, access))
        self.qp.post_send(wr)
        return wr.rkey

    def poll(self, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            n, wcs = self.cq.poll(1)
            if n:
                return wcs[0]
            time.sleep(0.0005)
        raise SystemExit("pyverbs_peer: FAILED: no completion within %d s" % timeout)


def server(peer, oob):
    # 1. SEND with immediate, 2. zero-length SEND, 3. zero-length WRITE with immediate.
    for i in range(3):
        peer.post_recv(100 + i)
    oob.send(step="recvs posted")
    wc = peer.poll()
    check(wc.status == e.IBV_WC_SUCCESS and wc.opcode == e.IBV_WC_RECV and wc.byte_len == 100, "SEND arrives")
    check(wc.wc_flags & e.IBV_WC_WITH_IMM and wc.imm_data == 0x11223344, "immediate data of a SEND")
    check(peer.mr.read(100, 0) == PATTERN[:100], "SEND payload")
    wc = peer.poll()
    check(wc.status == e.IBV_WC_SUCCESS and wc.opcode == e.IBV_WC_RECV and wc.byte_len == 0, "zero-length SEND")
    wc = peer.poll()
    check(wc.status == e.IBV_WC_SUCCESS and wc.opcode == e.IBV_WC_RECV_RDMA_WITH_IMM and wc.byte_len == 0 and
          wc.imm_data == 0x55667788, "zero-length WRITE with immediate")
    # 4. multi-packet WRITE (then told over the exchange), 5. multi-packet READ of a known pattern.
    assert oob.recv()["step"] == "written"
    check(peer.mr.read(BIG, BIG) == PATTERN, "multi-packet WRITE data")
    peer.mr.write(PATTERN[::-1], BIG, 2 * BIG)
    peer.mr.write((100).to_bytes(8, "little"), 8, ATOMIC_AT)
    oob.send(step="read and atomics ready")
    # 6. atomics: the final value must be 7 (100 + 23 = 123, swapped for 7, a failed compare leaves it).
    assert oob.recv()["step"] == "atomics done"
    check(int.from_bytes(peer.mr.read(8, ATOMIC_AT), "little") == 7, "value after the atomics")
    # 7. RNR: the client sends before the receive is posted.
    assert oob.recv()["step"] == "rnr send posted"
    time.sleep(0.3)
    peer.post_recv(200)
    wc = peer.poll()
    check(wc.status == e.IBV_WC_SUCCESS and wc.byte_len == 64, "SEND after an RNR NAK")
    oob.send(step="rnr received")
    # 8. memory windows (IBA 10.6.7, rxe_mw.c): a type 1 window on 8 KiB of a region and a type 2 window on
    # 4 KiB of it. The client WRITEs 4 KiB into the type 1 window, READs all of it back, WRITEs into the type
    # 2 window, then closes it with SEND with invalidate.
    remote_rw = e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
    win = MR(peer.pd, 4 * 4096, e.IBV_ACCESS_LOCAL_WRITE | remote_rw | e.IBV_ACCESS_MW_BIND)
    win.write(bytes(4 * 4096), 4 * 4096, 0)
    win.write(PATTERN[::-1][:4096], 4096, 2 * 4096)  # the type 1 window's second half, for the READ
    peer.post_recv(202, length=64)
    mw1, mw2 = MW(peer.pd, e.IBV_MW_TYPE_1), MW(peer.pd, e.IBV_MW_TYPE_2)
    peer.qp.bind_mw(mw1, MWBind(MWBindInfo(win, win.buf + 4096, 8192, remote_rw), e.IBV_SEND_SIGNALED, 300))
    wc = peer.poll()
    check(wc.status == e.IBV_WC_SUCCESS and wc.opcode == e.IBV_WC_BIND_MW and wc.wr_id == 300,
          f"ibv_bind_mw of a type 1 window: status {wc.status}")
    rkey2 = peer.bind_type2(mw2, win, win.buf + 3 * 4096, 4096, e.IBV_ACCESS_REMOTE_WRITE, 301)
    wc = peer.poll()
    check(wc.status == e.IBV_WC_SUCCESS and wc.opcode == e.IBV_WC_BIND_MW and wc.wr_id == 301,
          f"IBV_WR_BIND_MW of a type 2 window: status {wc.status}")
    oob.send(step="windows bound", t1_addr=win.buf + 4096, t1_rkey=mw1.rkey, t2_addr=win.buf + 3 * 4096,
             t2_rkey=rkey2)
    wc = peer.poll()
    check(wc.status == e.IBV_WC_SUCCESS and wc.opcode == e.IBV_WC_RECV and wc.byte_len == 8 and
          wc.wc_flags & peer.with_inv_flag and wc.imm_data == rkey2,
          f"SEND with invalidate of the type 2 window's rkey {rkey2:#x}: flags {wc.wc_flags}, key {wc.imm_data:#x}")
    assert oob.recv()["step"] == "windows done"
    check(win.read(4096, 4096) == PATTERN[:4096], "WRITE through the type 1 window")
    check(win.read(4096, 3 * 4096) == PATTERN[4096:4096 + 256] + bytes(4096 - 256), "WRITE through the type 2 window")
    # The type 2 window is still allocated, but no longer bound, once the SEND with invalidate closed it. So,
    # once the type 1 window is gone, the region can be deregistered: with a window bound to it, it cannot
    # (EINVAL, rxe and uroce alike). A rebind would show it too, but rxe refuses one whose ibv_mw still holds
    # the allocation's rkey, as pyverbs leaves it after an IBV_WR_BIND_MW (rxe_bind_mw's mw_rkey check).
    mw1.close()
    refused = None
    try:
        win.close()
    except PyverbsRDMAError as err:
        refused = err
    check(refused is None, f"deregistering the region under the invalidated type 2 window: {refused}")
    mw2.close()
    oob.send(step="windows checked")
    # 9. remote access error: the client writes to memory without remote write access.
    oob.recv()


def client(peer, oob):
    assert oob.recv()["step"] == "recvs posted"
    peer.mr.write(PATTERN, BIG, 0)
    remote = peer.remote
    peer.post_send(e.IBV_WR_SEND_WITH_IMM, 1, length=100, imm=0x11223344)
    peer.post_send(e.IBV_WR_SEND, 2)
    peer.post_send(e.IBV_WR_RDMA_WRITE_WITH_IMM, 3, imm=0x55667788, rdma=(remote["addr"], remote["rkey"]))
    for wr_id in (1, 2, 3):
        wc = peer.poll()
        check(wc.status == e.IBV_WC_SUCCESS and wc.wr_id == wr_id, f"send completion {wr_id}")
    peer.post_send(e.IBV_WR_RDMA_WRITE, 4, length=BIG, rdma=(remote["addr"] + BIG, remote["rkey"]))
    wc = peer.poll()
    check(wc.status == e.IBV_WC_SUCCESS and wc.opcode == e.IBV_WC_RDMA_WRITE, "multi-packet WRITE completes")
    oob.send(step="written")
    assert oob.recv()["step"] == "read and atomics ready"
    peer.post_send(e.IBV_WR_RDMA_READ, 5, length=BIG, offset=3 * BIG, rdma=(remote["addr"] + 2 * BIG, remote["rkey"]))
    wc = peer.poll()
    check(wc.status == e.IBV_WC_SUCCESS and wc.opcode == e.IBV_WC_RDMA_READ and wc.byte_len == BIG,
          "multi-packet READ completes")
    check(peer.mr.read(BIG, 3 * BIG) == PATTERN[::-1], "multi-packet READ data")
    target = (remote["addr"] + ATOMIC_AT, remote["rkey"])
    for wr_id, op, compare_add, swap, before in ((6, e.IBV_WR_ATOMIC_FETCH_AND_ADD, 23, 0, 100),
                                                 (7, e.IBV_WR_ATOMIC_CMP_AND_SWP, 123, 7, 123),
                                                 (8, e.IBV_WR_ATOMIC_CMP_AND_SWP, 999, 1, 7)):
        peer.post_send(op, wr_id, length=8, offset=4 * BIG, atomic=(target[0], target[1], compare_add, swap))
        wc = peer.poll()
        check(wc.status == e.IBV_WC_SUCCESS and wc.byte_len == 8, f"atomic {wr_id} completes")
        check(int.from_bytes(peer.mr.read(8, 4 * BIG), "little") == before, f"atomic {wr_id} returns {before}")
    oob.send(step="atomics done")
    peer.post_send(e.IBV_WR_SEND, 9, length=64)
    oob.send(step="rnr send posted")
    wc = peer.poll()
    check(wc.status == e.IBV_WC_SUCCESS and wc.wr_id == 9, "SEND completes after RNR NAKs")
    assert oob.recv()["step"] == "rnr received"
    w = oob.recv()
    assert w["step"] == "windows bound"
    peer.post_send(e.IBV_WR_RDMA_WRITE, 11, length=4096, rdma=(w["t1_addr"], w["t1_rkey"]))
    wc = peer.poll()
    check(wc.status == e.IBV_WC_SUCCESS and wc.opcode == e.IBV_WC_RDMA_WRITE,
          f"WRITE through a type 1 window: status {wc.status}")
    peer.post_send(e.IBV_WR_RDMA_READ, 12, length=8192, offset=WINDOW_READ_AT, rdma=(w["t1_addr"], w["t1_rkey"]))
    wc = peer.poll()
    check(wc.status == e.IBV_WC_SUCCESS and wc.opcode == e.IBV_WC_RDMA_READ and wc.byte_len == 8192,
          f"READ through a type 1 window: status {wc.status}")
    check(peer.mr.read(8192, WINDOW_READ_AT) == PATTERN[:4096] + PATTERN[::-1][:4096], "READ through a window's data")
    peer.post_send(e.IBV_WR_RDMA_WRITE, 13, length=256, offset=4096, rdma=(w["t2_addr"], w["t2_rkey"]))
    wc = peer.poll()
    check(wc.status == e.IBV_WC_SUCCESS, f"WRITE through a type 2 window: status {wc.status}")
    peer.post_send(e.IBV_WR_SEND_WITH_INV, 14, length=8, imm=w["t2_rkey"])
    wc = peer.poll()
    check(wc.status == e.IBV_WC_SUCCESS and wc.opcode == e.IBV_WC_SEND, f"SEND with invalidate: status {wc.status}")
    oob.send(step="windows done")
    assert oob.recv()["step"] == "windows checked"
    peer.post_send(e.IBV_WR_RDMA_WRITE, 10, length=64, rdma=(remote["ro_addr"], remote["ro_rkey"]))
    wc = peer.poll()
    # Under loss (--lossy) the NAK itself may be lost. The responder does not send it again: its QP went to the
    # error state with it and drops the resends, so the requester's retries run out (IBV_WC_RETRY_EXC_ERR).
    allowed = (e.IBV_WC_REM_ACCESS_ERR, e.IBV_WC_RETRY_EXC_ERR) if peer.lossy else (e.IBV_WC_REM_ACCESS_ERR,)
    check(wc.status in allowed, f"WRITE without remote write access: status {wc.status}")
    oob.send(step="done")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dev", required=True)
    ap.add_argument("--gid", type=int, required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--connect")
    ap.add_argument("--lossy", action="store_true", help="the network drops frames (the matrix's lossy cells)")
    ap.add_argument("--sl", type=int, default=0, help="service level of the QP's address vector")
    args = ap.parse_args()
    peer = Peer(args.dev, args.gid, args.lossy, args.sl)
    if args.connect:
        sock = socket.create_connection((args.connect, args.port), timeout=120)
    else:
        listener = socket.create_server(("", args.port))
        sock, _ = listener.accept()
    sock.settimeout(120)
    oob = Oob(sock)
    oob.send(**peer.info())
    peer.remote = oob.recv()
    peer.connect(peer.remote)
    (client if args.connect else server)(peer, oob)
    print(f"pyverbs_peer: all {checks} checks passed", flush=True)


if __name__ == "__main__":
    main()
