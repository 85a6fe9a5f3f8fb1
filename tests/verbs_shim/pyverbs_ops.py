#!/usr/bin/python3
"""A pyverbs program (Debian's python3-pyverbs, unmodified libibverbs API) that exercises through uroce
what ibverbs-utils and perftest do not: SEND and RDMA WRITE with immediate, SEND with invalidate,
zero-length messages, scatter/gather lists, inline data, fences, unsignalled completions, RDMA READ and
atomics (pyverbs_ops_data.py); memory windows of both types (pyverbs_ops_windows.py); on-demand paging
(pyverbs_ops_odp.py); device memory (pyverbs_ops_dm.py); tag matching SRQs' list operations
(pyverbs_ops_tm.py); the error completions a real NIC reports for bad keys, access rights, bounds and
lengths (pyverbs_ops_errors.py), and for RNR with rnr_retry 0 and retry exceeded against a destroyed QP and
against a killed process (pyverbs_ops_peer.py).

Two processes, both under uroce-run on the same uroced: the requester (this role runs the checks) and the
responder (a pyverbs_node.Node served over a socket, which the requester calls: post_recv, poll, read
memory ...). test_pyverbs.py starts both with one end each of a socketpair:

  uroce-run /usr/bin/python3 pyverbs_ops.py --role responder --fd N
  uroce-run /usr/bin/python3 pyverbs_ops.py --role requester --fd N

Every check uses fresh queue pairs (an error leaves them in the error state) and asserts exact outcomes:
status, opcode, byte_len, imm_data, wc_flags, wr_id, QP numbers and the bytes in memory.
"""
import argparse
import importlib
import socket
import sys
import time
import traceback

import pyverbs.enums as e

from pyverbs_node import Node, Remote, serve

_STATUS = {getattr(e, n): n for n in dir(e)
           if n.startswith("IBV_WC_") and (n.endswith("_ERR") or n == "IBV_WC_SUCCESS")}
_OPCODE = {getattr(e, n): n for n in ("IBV_WC_SEND", "IBV_WC_RDMA_WRITE", "IBV_WC_RDMA_READ", "IBV_WC_COMP_SWAP",
                                      "IBV_WC_FETCH_ADD", "IBV_WC_RECV", "IBV_WC_RECV_RDMA_WITH_IMM",
                                      "IBV_WC_BIND_MW", "IBV_WC_LOCAL_INV")}
CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn


def pattern(n, seed):
    """n bytes that differ per seed and are never zero, so untouched (zero) memory stands out."""
    return bytes((i * 131 + seed * 17) % 251 + 1 for i in range(n))


def show(wcs):
    return [{k: _STATUS.get(v, v) if k == "status" else _OPCODE.get(v, v) if k == "opcode" else
             hex(v) if k == "imm_data" else v for k, v in wc.items()} for wc in wcs]


def expect(got, want, what):
    same = len(got) == len(want) and all(g[k] == v for g, w in zip(got, want) for k, v in w.items())
    assert same, f"{what}:\n    got  {show(got)}\n    want {show(want)}"


def expect_bytes(got_hex, want, what):
    got = bytes.fromhex(got_hex)
    assert got == want, f"{what}: got {got[:48].hex()}... want {want[:48].hex()}... ({len(want)} bytes)"


class Pair:
    """A fresh RC connection: QP `qid` on both sides, connected to each other."""

    def __init__(self, t, a_create=None, b_create=None, a_connect=None, b_connect=None):
        t.next_qid += 1
        self.qid = t.next_qid
        a_qp = t.a.create_qp(self.qid, **(a_create or {}))
        b_qp = t.b.create_qp(self.qid, **(b_create or {}))
        self.a_qpn, self.b_qpn, self.a_max_inline = a_qp["qpn"], b_qp["qpn"], a_qp["max_inline"]
        t.a.connect(self.qid, b_qp["qpn"], b_qp["gid"], psn=100, remote_psn=200, **(a_connect or {}))
        t.b.connect(self.qid, a_qp["qpn"], a_qp["gid"], psn=200, remote_psn=100, **(b_connect or {}))

    # The completions a check expects, with every field defined for them. An error completion defines only
    # wr_id, status and qp_num; byte_len is defined on the send side only for READs and atomics, and
    # src_qp only for UD, so neither is looked at here.
    def sent(self, wr_id, opcode, **more):
        return dict(wr_id=wr_id, status=e.IBV_WC_SUCCESS, opcode=opcode, qp_num=self.a_qpn, **more)

    def received(self, wr_id, byte_len, opcode=e.IBV_WC_RECV, wc_flags=0, **more):
        return dict(wr_id=wr_id, status=e.IBV_WC_SUCCESS, opcode=opcode, byte_len=byte_len, wc_flags=wc_flags,
                    qp_num=self.b_qpn, **more)

    def send_failed(self, wr_id, status):
        return dict(wr_id=wr_id, status=status, qp_num=self.a_qpn)

    def recv_failed(self, wr_id, status):
        return dict(wr_id=wr_id, status=status, qp_num=self.b_qpn)


class Checks:
    """What every check gets: the local node (a), the remote one (b), and fresh 64-KiB regions "a" and "b"
    (zeroed) on both."""

    def __init__(self, a, b):
        self.a, self.b = a, b
        self.next_qid = 0

    def fresh_regions(self):
        self.am = self.a.reg_mr("a", 65536)
        self.bm = self.b.reg_mr("b", 65536)

    def pair(self, **kw):
        return Pair(self, **kw)


def run_requester(sock):
    for module in ("pyverbs_ops_data", "pyverbs_ops_errors", "pyverbs_ops_windows", "pyverbs_ops_odp", "pyverbs_ops_dm",
                   "pyverbs_ops_tm", "pyverbs_ops_peer"):
        importlib.import_module(module)  # registers its checks, in this order
    t = Checks(Node(), Remote(sock))
    failures = 0
    for fn in CHECKS:
        t0 = time.monotonic()
        try:
            t.fresh_regions()
            fn(t)
            print(f"PASS {fn.__name__} ({time.monotonic() - t0:.2f} s)", flush=True)
        except Exception as ex:  # noqa: BLE001 (a check failing in any way is reported and the rest run)
            failures += 1
            detail = str(ex) if isinstance(ex, AssertionError) else traceback.format_exc()
            print(f"FAIL {fn.__name__}: {detail}", flush=True)
    print(f"{len(CHECKS) - failures}/{len(CHECKS)} checks passed", flush=True)
    return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--role", choices=["requester", "responder"], required=True)
    ap.add_argument("--fd", type=int, required=True, help="this side's end of the socketpair")
    args = ap.parse_args()
    sock = socket.socket(fileno=args.fd)
    if args.role == "responder":
        serve(Node(), sock)
        return 0
    return run_requester(sock)


if __name__ == "__main__":
    # The check modules import this one by name: make sure they see this module, not a second copy.
    sys.modules.setdefault("pyverbs_ops", sys.modules["__main__"])
    sys.exit(main())
