"""One side of the pyverbs test (pyverbs_ops.py): a verbs device opened through pyverbs, with named memory
regions and numbered RC queue pairs, driven by plain-data calls so that the same methods run locally (the
requester) or on the peer process (the responder, through `serve`). Runs under /usr/bin/python3 (Debian's
python3-pyverbs) and uroce-run, so every verb below goes through the verbs shim to uroced.

Values crossing the process boundary are JSON: bytes as hex, scatter/gather lists as [mr name, offset,
length] triples, completions as dicts of the ibv_wc fields a check looks at.
"""
import ctypes
import json
import os
import signal
import time

import pyverbs.enums as e
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.addr import AH, GID, AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import DM, AllocDmAttr, Context
from pyverbs.mr import DMMR, MR, MW, MWBind, MWBindInfo
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
_PROT_RW, _MAP_PRIVATE_ANONYMOUS, _MAP_FIXED = 0x3, 0x22, 0x10
PAGE = os.sysconf("SC_PAGE_SIZE")

ALL_ACCESS = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ |
              e.IBV_ACCESS_REMOTE_ATOMIC)
PORT = 1
GID_INDEX = 0  # uroce's GID 0 is the port's IPv4 address (RoCE v2)


def address(gid, sgid_index=GID_INDEX):
    return AHAttr(is_global=1, port_num=PORT, gr=GlobalRoute(dgid=GID(gid), sgid_index=sgid_index))


def errno_of(call):
    """0 if call() succeeds, else the errno of the verbs error it raised."""
    try:
        call()
    except PyverbsRDMAError as ex:
        return ex.error_code
    return 0


def wc_dict(wc):
    return {"wr_id": wc.wr_id, "status": wc.status, "opcode": wc.opcode, "byte_len": wc.byte_len,
            "imm_data": wc.imm_data, "wc_flags": wc.wc_flags, "qp_num": wc.qp_num, "src_qp": wc.src_qp}


class Node:
    def __init__(self, device="uroce0"):
        self.ctx = Context(name=device)
        self.pds = {"main": PD(self.ctx)}
        self.mrs = {}
        self.mws = {}
        self.maps = {}   # name -> (address, length): plain mappings (map_buffer)
        self.dms = {}    # name -> DM: device memory
        self.qps = {}    # id -> (QP, send CQ, recv CQ): a CQ pair per QP, so one check's leftovers stay there
        self.gid = str(self.ctx.query_gid(PORT, GID_INDEX))

    # --- memory ---------------------------------------------------------------------------------------
    def reg_mr(self, name, length, access=ALL_ACCESS, pd="main", at=None, odp=False, implicit=False):
        """A region of `length` zeroed bytes: allocated by pyverbs, or over mapping `at` (map_buffer, left as
        it is). odp adds IBV_ACCESS_ON_DEMAND; implicit registers the whole address space (addr 0, length
        SIZE_MAX, on demand), whose "offsets" in an sge list are then absolute addresses."""
        if pd not in self.pds:
            self.pds[pd] = PD(self.ctx)
        if name in self.mrs:  # each check starts from fresh, zeroed regions
            self.mrs.pop(name).close()
        if odp or implicit:
            access |= e.IBV_ACCESS_ON_DEMAND
        if implicit:
            mr = MR(self.pds[pd], 0, access, implicit=True)
        elif at is not None:
            mr = MR(self.pds[pd], length, access, address=self.maps[at][0])
        else:
            mr = MR(self.pds[pd], length, access)
            mr.write(b"\0" * length, length, 0)
        self.mrs[name] = mr
        return {"addr": mr.buf, "rkey": mr.rkey, "lkey": mr.lkey}

    # --- plain mappings, for on-demand regions ------------------------------------------------------
    def map_buffer(self, name, length, fill_hex=""):
        """An anonymous private mapping of `length` bytes (whole pages), its first bytes set to fill_hex:
        its address."""
        addr = _libc.mmap(None, length, _PROT_RW, _MAP_PRIVATE_ANONYMOUS, -1, 0)
        assert addr not in (None, ctypes.c_void_p(-1).value), f"mmap: errno {ctypes.get_errno()}"
        self.maps[name] = (addr, length)
        self.poke(addr, fill_hex)
        return addr

    def remap(self, name, fill_hex=""):
        """New anonymous pages at the same address (munmap, then mmap MAP_FIXED), first bytes fill_hex."""
        addr, length = self.maps[name]
        assert _libc.munmap(addr, length) == 0
        got = _libc.mmap(addr, length, _PROT_RW, _MAP_PRIVATE_ANONYMOUS | _MAP_FIXED, -1, 0)
        assert got == addr, f"mmap MAP_FIXED: {got} errno {ctypes.get_errno()}"
        self.poke(addr, fill_hex)

    def revoke(self, name):
        """Takes mapping `name`'s pages away: an inaccessible (PROT_NONE) mapping in their place, so that
        nothing else can be mapped at those addresses while a check relies on them being unreachable."""
        addr, length = self.maps[name]
        got = _libc.mmap(addr, length, 0, _MAP_PRIVATE_ANONYMOUS | _MAP_FIXED, -1, 0)
        assert got == addr, f"mmap PROT_NONE: {got} errno {ctypes.get_errno()}"

    def unmap(self, name):
        addr, length = self.maps.pop(name)
        assert _libc.munmap(addr, length) == 0

    def poke(self, addr, data_hex):
        data = bytes.fromhex(data_hex)
        ctypes.memmove(addr, data, len(data))

    def peek(self, addr, length):
        return ctypes.string_at(addr, length).hex()

    def resident_pages(self, name):
        """How many of mapping `name`'s pages are present in the page tables (mincore)."""
        addr, length = self.maps[name]
        pages = (length + PAGE - 1) // PAGE
        vec = ctypes.create_string_buffer(pages)
        assert _libc.mincore(addr, length, vec) == 0, f"mincore: errno {ctypes.get_errno()}"
        return sum(b & 1 for b in vec.raw)

    # --- device memory --------------------------------------------------------------------------------
    def alloc_dm(self, name, length):
        """ibv_alloc_dm of `length` bytes as `name`: 0, or the errno it failed with."""
        return errno_of(lambda: self.dms.__setitem__(name, DM(self.ctx, AllocDmAttr(length=length))))

    def free_dm(self, name):
        err = errno_of(self.dms[name].close)
        if not err:
            del self.dms[name]
        return err

    def dm_write(self, name, offset, data_hex):
        """ibv_memcpy_to_dm: 0 or its errno."""
        data = bytes.fromhex(data_hex)
        return errno_of(lambda: self.dms[name].copy_to_dm(offset, data, len(data)))

    def dm_read(self, name, offset, length):
        return bytes(self.dms[name].copy_from_dm(offset, length)).hex()

    def reg_dm_mr(self, name, dm, offset, length, access=ALL_ACCESS | e.IBV_ACCESS_ZERO_BASED):
        """ibv_reg_dm_mr over [offset, offset+length) of `dm` as region `name` (zero based: its sge and
        RDMA addresses are offsets): its keys, or {"errno": ...}."""
        try:
            mr = DMMR(self.pds["main"], length, access, self.dms[dm], offset)
        except PyverbsRDMAError as ex:
            return {"errno": ex.error_code}
        self.mrs[name] = mr
        return {"rkey": mr.rkey, "lkey": mr.lkey}

    def max_dm_size(self):
        return self.ctx.query_device_ex().max_dm_size

    def odp_caps(self):
        c = self.ctx.query_device_ex().odp_caps
        return {"general": c.general_caps, "rc": c.rc_odp_caps, "uc": c.uc_odp_caps, "ud": c.ud_odp_caps,
                "xrc": c.xrc_odp_caps}

    def advise_mr(self, advice, flags, sges, pd="main"):
        """ibv_advise_mr over sges ([mr, offset, length] or with an lkey as fourth): 0 or its errno."""
        return errno_of(lambda: self.pds[pd].advise_mr(advice, flags, self.sge_list(sges)))

    def dereg_mr(self, name):
        self.mrs.pop(name).close()

    def dereg_mr_errno(self, name):
        """ibv_dereg_mr's errno (0: the region is gone; otherwise it stays registered under `name`)."""
        err = errno_of(self.mrs[name].close)
        if not err:
            del self.mrs[name]
        return err

    # --- memory windows -------------------------------------------------------------------------------
    def device_caps(self):
        attr = self.ctx.query_device()
        return {"device_cap_flags": attr.device_cap_flags, "max_mw": attr.max_mw}

    def alloc_mw(self, name, mw_type, pd="main"):
        self.mws[name] = MW(self.pds[pd], mw_type)
        return self.mws[name].rkey

    def dealloc_mw(self, name):
        self.mws.pop(name).close()

    def bind_mw(self, qid, name, mr, offset, length, access, wr_id):
        """ibv_bind_mw (a type 1 window) to [offset, offset+length) of region `mr`: the window's new rkey."""
        mw, region = self.mws[name], self.mrs[mr]
        info = MWBindInfo(region, region.buf + offset, length, access)
        self.qps[qid][0].bind_mw(mw, MWBind(info, e.IBV_SEND_SIGNALED, wr_id))
        return mw.rkey

    def post_bind_mw(self, qid, name, mr, offset, length, access, wr_id):
        """An IBV_WR_BIND_MW work request (a type 2 window): the rkey it gives the window (pyverbs takes
        ibv_inc_rkey of the window's current one, as rdma-core's tests do)."""
        mw, region = self.mws[name], self.mrs[mr]
        wr = SendWR(wr_id=wr_id, opcode=e.IBV_WR_BIND_MW, num_sge=1, sg=self.sge_list([[mr, 0, 0]]),
                    send_flags=e.IBV_SEND_SIGNALED)
        wr.num_sge = 0
        wr.set_bind_wr(mw, MWBindInfo(region, region.buf + offset, length, access))
        self.qps[qid][0].post_send(wr)
        return wr.rkey

    def write(self, mr, offset, data_hex):
        data = bytes.fromhex(data_hex)
        self.mrs[mr].write(data, len(data), offset)

    def read(self, mr, offset, length):
        return bytes(self.mrs[mr].read(length, offset)).hex()

    def sge_list(self, sges):
        """[mr, offset, length] or [mr, offset, length, lkey]: inline data needs no valid lkey."""
        # A zero-based region (device memory) takes offsets: its "buffer" starts at 0.
        return [SGE(getattr(self.mrs[s[0]], "buf", 0) + s[1], s[2], s[3] if len(s) > 3 else self.mrs[s[0]].lkey)
                for s in sges]

    # --- queue pairs ----------------------------------------------------------------------------------
    def create_qp(self, qid, sq_sig_all=False, max_inline=0, depth=16, max_sge=4, pd="main", uc=False):
        scq, rcq = CQ(self.ctx, 2 * depth), CQ(self.ctx, 2 * depth)
        cap = QPCap(max_send_wr=depth, max_recv_wr=depth, max_send_sge=max_sge, max_recv_sge=max_sge,
                    max_inline_data=max_inline)
        init = QPInitAttr(qp_type=e.IBV_QPT_UC if uc else e.IBV_QPT_RC, scq=scq, rcq=rcq, cap=cap, sq_sig_all=int(sq_sig_all))
        qp = QP(self.pds[pd], init)
        self.qps[qid] = (qp, scq, rcq)
        return {"qpn": qp.qp_num, "gid": self.gid, "max_inline": init.cap.max_inline_data}

    def connect(self, qid, qpn, gid, psn=0, remote_psn=0, timeout=14, retry_cnt=7, rnr_retry=7,
                min_rnr_timer=1, mtu=e.IBV_MTU_1024):
        """RESET -> INIT -> RTR -> RTS toward (qpn, gid); the requester-side limits are parameters."""
        self.to_init(qid)
        self.to_rtr(qid, qpn, gid, remote_psn, min_rnr_timer, mtu)
        qp = self.qps[qid][0]
        a = QPAttr(qp_state=e.IBV_QPS_RTS)
        a.timeout, a.retry_cnt, a.rnr_retry, a.sq_psn, a.max_rd_atomic = timeout, retry_cnt, rnr_retry, psn, 4
        rc = qp.qp_type == e.IBV_QPT_RC
        rc_rts = e.IBV_QP_TIMEOUT | e.IBV_QP_RETRY_CNT | e.IBV_QP_RNR_RETRY | e.IBV_QP_MAX_QP_RD_ATOMIC if rc else 0
        qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_SQ_PSN | rc_rts)

    def to_init(self, qid):
        a = QPAttr(qp_state=e.IBV_QPS_INIT)
        a.pkey_index, a.port_num, a.qp_access_flags = 0, PORT, ALL_ACCESS
        self.qps[qid][0].modify(a, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_ACCESS_FLAGS)

    def to_rtr(self, qid, qpn, gid, remote_psn=0, min_rnr_timer=1, mtu=e.IBV_MTU_1024):
        qp = self.qps[qid][0]
        a = QPAttr(qp_state=e.IBV_QPS_RTR)
        a.path_mtu, a.dest_qp_num, a.rq_psn = mtu, qpn, remote_psn
        a.max_dest_rd_atomic, a.min_rnr_timer = 4, min_rnr_timer
        a.ah_attr = address(gid)
        # UC has no acknowledgements: none of the RC-only attributes (IBTA 11.2.4.2's table of modify_qp).
        rc = qp.qp_type == e.IBV_QPT_RC
        rc_rtr = e.IBV_QP_MAX_DEST_RD_ATOMIC | e.IBV_QP_MIN_RNR_TIMER if rc else 0
        qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN | e.IBV_QP_RQ_PSN |
                  rc_rtr)

    def timed_set_up(self, what, gid, qid=None, sgid_index=GID_INDEX):
        """ibv_create_ah ("ah") or INIT -> RTR of QP qid ("rtr") toward gid: {"errno": 0 or the call's errno,
        "seconds": how long the call took}."""
        if what == "rtr":
            self.to_init(qid)
        t0 = time.monotonic()
        try:
            if what == "ah":
                AH(self.pds["main"], attr=address(gid, sgid_index)).close()
            else:
                self.to_rtr(qid, 1, gid)
            err = 0
        except PyverbsRDMAError as ex:
            err = ex.error_code
        return {"errno": err, "seconds": time.monotonic() - t0}

    def vanish(self):
        """Dies at once, as a crashing process does: no verbs call tears anything down."""
        os.kill(os.getpid(), signal.SIGKILL)

    def destroy_qp(self, qid):
        qp, scq, rcq = self.qps.pop(qid)
        qp.close()
        scq.close()
        rcq.close()

    def qp_state(self, qid):
        attr, _ = self.qps[qid][0].query(e.IBV_QP_STATE)
        return attr.qp_state

    def post_recv(self, qid, wr_id, sges):
        """One receive; an empty list posts a receive with no SGE (for zero-length messages)."""
        sg = self.sge_list(sges) or self.sge_list([[next(iter(self.mrs)), 0, 0]])
        wr = RecvWR(wr_id=wr_id, num_sge=len(sg), sg=sg)
        wr.num_sge = len(sges)
        self.qps[qid][0].post_recv(wr)

    def post_send(self, qid, wrs):
        """Posts the work requests (dicts, see send_wr) as one chain, with one ibv_post_send."""
        chain = [self.send_wr(w) for w in wrs]
        for first, second in zip(chain, chain[1:]):
            first.next_wr = second
        self.qps[qid][0].post_send(chain[0])

    def send_wr(self, w):
        sges = w.get("sges", [])
        # pyverbs wants an SGE to build a WR; a WR without one (zero-length) gets num_sge = 0 afterwards.
        sg = self.sge_list(sges) or self.sge_list([[next(iter(self.mrs)), 0, 0]])
        wr = SendWR(wr_id=w["wr_id"], opcode=w["opcode"], num_sge=len(sg), sg=sg,
                    send_flags=w.get("flags", e.IBV_SEND_SIGNALED))
        wr.num_sge = len(sges)
        # ibv_send_wr's imm_data (network order, as pyverbs stores it unchanged) shares a union with
        # invalidate_rkey, which pyverbs has no setter for: "imm" is whichever the opcode uses.
        wr.imm_data = w.get("imm", 0)
        if "rdma" in w:
            wr.set_wr_rdma(*w["rdma"])           # rkey, remote address
        if "atomic" in w:
            wr.set_wr_atomic(*w["atomic"])       # rkey, remote address, compare/add, swap
        return wr

    def poll(self, qid, which, count, timeout=5.0, settle=0.05):
        """Exactly the completions that arrive on the QP's send or recv CQ: waits for `count` of them (up to
        `timeout` s), then `settle` s more, so that a completion too many is seen too."""
        cq = self.qps[qid][1 if which == "send" else 2]
        out = []
        deadline = time.monotonic() + timeout
        while len(out) < count and time.monotonic() < deadline:
            n, wcs = cq.poll(count - len(out))
            out += [wc_dict(wc) for wc in wcs[:n]]
            if not n:
                time.sleep(0.0005)
        end = time.monotonic() + settle
        while time.monotonic() < end:
            n, wcs = cq.poll(16)
            out += [wc_dict(wc) for wc in wcs[:n]]
            if not n:
                time.sleep(0.001)
        return out


def serve(node, sock):
    """The responder process: runs the calls that arrive as JSON lines, one answer line each, until EOF."""
    f = sock.makefile("rw")
    for line in f:
        call = json.loads(line)
        try:
            answer = {"result": getattr(node, call["method"])(*call["args"], **call["kwargs"])}
        except Exception as ex:  # the caller's check reports it
            answer = {"error": f"{type(ex).__name__}: {ex}"}
        f.write(json.dumps(answer) + "\n")
        f.flush()


class Remote:
    """The peer's Node, called through the socket: remote.post_recv(...) runs node.post_recv there."""

    def __init__(self, sock):
        self.f = sock.makefile("rw")

    def __getattr__(self, method):
        def call(*args, **kwargs):
            self.f.write(json.dumps({"method": method, "args": args, "kwargs": kwargs}) + "\n")
            self.f.flush()
            line = self.f.readline()
            if method == "vanish":  # no answer: the peer is gone when its end of the socket closes
                assert not line, f"the peer answered vanish: {line}"
                return None
            if not line:
                raise RuntimeError(f"the peer closed the connection during {method}")
            answer = json.loads(line)
            if "error" in answer:
                raise RuntimeError(f"peer {method}: {answer['error']}")
            return answer["result"]
        return call
