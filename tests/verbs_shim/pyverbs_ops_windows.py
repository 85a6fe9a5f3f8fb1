"""pyverbs_ops.py's checks of memory windows: the responder (b) opens part of a region through a window and
the requester (a) reaches it with the window's rkey. Type 1 windows are bound with ibv_bind_mw and serve
every QP of their PD; type 2 windows are bound by an IBV_WR_BIND_MW work request, serve only the QP that
bound them, and are invalidated by SEND with invalidate. Outcomes as rxe reports them."""
import errno

import pyverbs.enums as e

from pyverbs_ops import check, expect, expect_bytes, pattern

REMOTE_RW = e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
REGION_ACCESS = e.IBV_ACCESS_LOCAL_WRITE | REMOTE_RW | e.IBV_ACCESS_MW_BIND


def bound(p, wr_id):
    """The bind's completion on b's send CQ."""
    return dict(wr_id=wr_id, status=e.IBV_WC_SUCCESS, opcode=e.IBV_WC_BIND_MW, qp_num=p.b_qpn)


def write(t, p, wr_id, rkey, addr, length, a_offset=0):
    t.a.post_send(p.qid, [dict(wr_id=wr_id, opcode=e.IBV_WR_RDMA_WRITE, sges=[["a", a_offset, length]],
                               rdma=[rkey, addr])])
    return t.a.poll(p.qid, "send", 1)


def bound_type2(t, offset, length, access, wr_id, what):
    """Region "win" on b, a pair, and type 2 window "w2" bound by b's IBV_WR_BIND_MW: (region, pair, rkey)."""
    win = t.b.reg_mr("win", 65536, REGION_ACCESS)
    p = t.pair()
    t.b.alloc_mw("w2", e.IBV_MW_TYPE_2)
    rkey = t.b.post_bind_mw(p.qid, "w2", "win", offset, length, access, wr_id)
    expect(t.b.poll(p.qid, "send", 1), [bound(p, wr_id)], what)
    return win, p, rkey


@check
def device_reports_memory_windows(t):
    caps = t.b.device_caps()
    assert caps["device_cap_flags"] & e.IBV_DEVICE_MEM_WINDOW, caps
    assert caps["device_cap_flags"] & e.IBV_DEVICE_MEM_WINDOW_TYPE_2B, caps
    assert caps["max_mw"] > 0, caps


@check
def type1_window(t):
    win = t.b.reg_mr("win", 65536, REGION_ACCESS)
    p = t.pair()
    first = t.b.alloc_mw("w1", e.IBV_MW_TYPE_1)
    rkey = t.b.bind_mw(p.qid, "w1", "win", 4096, 4096, REMOTE_RW, 5)
    expect(t.b.poll(p.qid, "send", 1), [bound(p, 5)], "ibv_bind_mw's completion")
    assert rkey != first and rkey >> 8 == first >> 8, f"rkey {rkey:#x} after the bind, {first:#x} before"
    msg = pattern(200, 31)
    t.a.write("a", 0, msg.hex())
    expect(write(t, p, 1, rkey, win["addr"] + 4096 + 100, 200), [p.sent(1, e.IBV_WC_RDMA_WRITE)],
           "WRITE through the window")
    expect_bytes(t.b.read("win", 4096 + 100, 200), msg, "the window's bytes")
    t.a.post_send(p.qid, [dict(wr_id=2, opcode=e.IBV_WR_RDMA_READ, sges=[["a", 1000, 200]],
                               rdma=[rkey, win["addr"] + 4096 + 100])])
    expect(t.a.poll(p.qid, "send", 1), [p.sent(2, e.IBV_WC_RDMA_READ, byte_len=200)], "READ through the window")
    expect_bytes(t.a.read("a", 1000, 200), msg, "what the READ brought")
    # While a window is bound to it, the region cannot go (rxe: EINVAL).
    assert t.b.dereg_mr_errno("win") == errno.EINVAL, "the region was deregistered under a bound window"
    # One byte before the window: refused, though the region has it; nothing written.
    expect(write(t, p, 3, rkey, win["addr"] + 4095, 2), [p.send_failed(3, e.IBV_WC_REM_ACCESS_ERR)],
           "WRITE across the window's start")
    expect_bytes(t.b.read("win", 4094, 4), bytes(4), "the bytes around the window's start")
    # The window, then the region, go.
    t.b.dealloc_mw("w1")
    assert t.b.dereg_mr_errno("win") == 0, "the region could not be deregistered after its window went"


@check
def type1_rebind_retires_the_old_rkey(t):
    win = t.b.reg_mr("win", 65536, REGION_ACCESS)
    p = t.pair()
    t.b.alloc_mw("w1", e.IBV_MW_TYPE_1)
    old = t.b.bind_mw(p.qid, "w1", "win", 0, 256, REMOTE_RW, 5)
    new = t.b.bind_mw(p.qid, "w1", "win", 256, 256, e.IBV_ACCESS_REMOTE_READ, 6)
    expect(t.b.poll(p.qid, "send", 2), [bound(p, 5), bound(p, 6)], "two binds")
    t.a.post_send(p.qid, [dict(wr_id=1, opcode=e.IBV_WR_RDMA_READ, sges=[["a", 0, 256]],
                               rdma=[new, win["addr"] + 256])])
    expect(t.a.poll(p.qid, "send", 1), [p.sent(1, e.IBV_WC_RDMA_READ, byte_len=256)], "READ with the new rkey")
    expect(write(t, p, 2, old, win["addr"], 16), [p.send_failed(2, e.IBV_WC_REM_ACCESS_ERR)],
           "WRITE with the rkey of the first binding")
    expect_bytes(t.b.read("win", 0, 16), bytes(16), "the region after the refused WRITE")
    t.b.dealloc_mw("w1")


@check
def type2_window_serves_its_qp_and_is_invalidated_by_send(t):
    win, p, rkey = bound_type2(t, 8192, 512, REMOTE_RW, 7, "the IBV_WR_BIND_MW completion")
    other = t.pair()  # same PDs, another connection
    msg = pattern(512, 41)
    t.a.write("a", 0, msg.hex())
    expect(write(t, p, 1, rkey, win["addr"] + 8192, 512), [p.sent(1, e.IBV_WC_RDMA_WRITE)],
           "WRITE through the QP that bound the window")
    expect_bytes(t.b.read("win", 8192, 512), msg, "the window's bytes")
    expect(write(t, other, 2, rkey, win["addr"] + 8192, 16, a_offset=512),
           [other.send_failed(2, e.IBV_WC_REM_ACCESS_ERR)], "WRITE through another QP of the same PD")
    expect_bytes(t.b.read("win", 8192, 16), msg[:16], "the window after the refused WRITE")
    # SEND with invalidate of the window's rkey: the receiver is told, and the window closes.
    t.b.post_recv(p.qid, 71, [["b", 0, 64]])
    t.a.post_send(p.qid, [dict(wr_id=3, opcode=e.IBV_WR_SEND_WITH_INV, sges=[["a", 0, 8]], imm=rkey)])
    expect(t.a.poll(p.qid, "send", 1), [p.sent(3, e.IBV_WC_SEND)], "SEND with invalidate")
    expect(t.b.poll(p.qid, "recv", 1), [p.received(71, 8, wc_flags=e.IBV_WC_WITH_INV, imm_data=rkey)],
           "the receive of the SEND with invalidate")
    expect(write(t, p, 4, rkey, win["addr"] + 8192, 16, a_offset=1024),
           [p.send_failed(4, e.IBV_WC_REM_ACCESS_ERR)], "WRITE through the invalidated window")
    expect_bytes(t.b.read("win", 8192, 16), msg[:16], "the window after the invalidation")
    assert t.b.dereg_mr_errno("win") == 0, "the region is still held by the invalidated window"
    t.b.dealloc_mw("w2")


@check
def type2_bind_of_a_bound_window_fails(t):
    _, p, _ = bound_type2(t, 0, 64, REMOTE_RW, 8, "the first bind")
    t.b.post_bind_mw(p.qid, "w2", "win", 0, 64, REMOTE_RW, 9)  # IBA o10-37.2.30: invalidate it first
    expect(t.b.poll(p.qid, "send", 1), [dict(wr_id=9, status=e.IBV_WC_MW_BIND_ERR, qp_num=p.b_qpn)],
           "the second bind")
    assert t.b.qp_state(p.qid) == e.IBV_QPS_ERR, "the QP that failed a bind is not in the error state"
    t.b.dealloc_mw("w2")


@check
def type2_zero_based_window_takes_offsets(t):
    # IBV_ACCESS_ZERO_BASED: the peer addresses the window from 0, whatever the region's virtual addresses.
    _, p, rkey = bound_type2(t, 12288, 1024, REMOTE_RW | e.IBV_ACCESS_ZERO_BASED, 10, "the zero-based bind")
    msg = pattern(100, 51)
    t.a.write("a", 0, msg.hex())
    expect(write(t, p, 1, rkey, 24, 100), [p.sent(1, e.IBV_WC_RDMA_WRITE)], "WRITE at offset 24 of the window")
    expect_bytes(t.b.read("win", 12288 + 24, 100), msg, "the bytes at the window's offset 24")
    expect(write(t, p, 2, rkey, 1000, 100), [p.send_failed(2, e.IBV_WC_REM_ACCESS_ERR)],
           "WRITE past the window's 1024 bytes")
    expect_bytes(t.b.read("win", 12288 + 1000, 24), bytes(24), "the window's end after the refused WRITE")
    t.b.dealloc_mw("w2")
