"""pyverbs_ops.py's checks of remote invalidation and of the errors a request itself causes (keys, access
rights, bounds, lengths), with the statuses a real NIC (and rxe) reports."""
import pyverbs.enums as e
from pyverbs.pyverbs_error import PyverbsRDMAError

from pyverbs_ops import check, expect, expect_bytes, pattern

REMOTE = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ


@check
def send_with_invalidate(t):
    p = t.pair()
    inv = t.b.reg_mr("inv", 4096, REMOTE)
    msg = pattern(64, 11)
    t.a.write("a", 0, msg.hex())
    # Before: the key works.
    t.a.post_send(p.qid, [dict(wr_id=1, opcode=e.IBV_WR_RDMA_WRITE, sges=[["a", 0, 16]],
                               rdma=[inv["rkey"], inv["addr"]])])
    expect(t.a.poll(p.qid, "send", 1), [p.sent(1, e.IBV_WC_RDMA_WRITE)], "WRITE before the invalidation")
    # SEND with invalidate ("imm" is ibv_send_wr.invalidate_rkey): the receiver learns which key went
    # (ibv_wc.invalidated_rkey shares imm_data's place, flagged by IBV_WC_WITH_INV).
    t.b.post_recv(p.qid, 71, [["b", 0, 256]])
    t.a.post_send(p.qid, [dict(wr_id=2, opcode=e.IBV_WR_SEND_WITH_INV, sges=[["a", 0, 64]], imm=inv["rkey"])])
    expect(t.a.poll(p.qid, "send", 1), [p.sent(2, e.IBV_WC_SEND)], "requester")
    expect(t.b.poll(p.qid, "recv", 1), [p.received(71, 64, wc_flags=e.IBV_WC_WITH_INV, imm_data=inv["rkey"])],
           "responder")
    expect_bytes(t.b.read("b", 0, 65), msg + bytes(1), "the SEND's bytes")
    # After: the key is refused like an unknown one, and the region's memory was not touched.
    t.a.post_send(p.qid, [dict(wr_id=3, opcode=e.IBV_WR_RDMA_WRITE, sges=[["a", 16, 16]],
                               rdma=[inv["rkey"], inv["addr"] + 16])])
    expect(t.a.poll(p.qid, "send", 1), [p.send_failed(3, e.IBV_WC_REM_ACCESS_ERR)], "WRITE with the invalidated key")
    expect_bytes(t.b.read("inv", 0, 32), msg[:16] + bytes(16), "the invalidated region")


@check
def send_with_invalidate_of_another_pd(t):
    # A SEND with invalidate may only name a region of the receiving QP's own protection domain: the
    # responder refuses it with an Invalid Request NAK, and the region stays valid.
    victim = t.b.reg_mr("victim", 4096, REMOTE, pd="other")
    p = t.pair()
    t.b.post_recv(p.qid, 81, [["b", 0, 256]])
    t.a.post_send(p.qid, [dict(wr_id=1, opcode=e.IBV_WR_SEND_WITH_INV, sges=[["a", 0, 8]], imm=victim["rkey"])])
    expect(t.a.poll(p.qid, "send", 1), [p.send_failed(1, e.IBV_WC_REM_INV_REQ_ERR)], "requester")
    # The receive the SEND took completes with the error (as rxe does), and the responder QP fails.
    expect(t.b.poll(p.qid, "recv", 1), [p.recv_failed(81, e.IBV_WC_REM_INV_REQ_ERR)], "responder")
    assert t.b.qp_state(p.qid) == e.IBV_QPS_ERR, "the responder QP is not in the error state"
    # Through a QP of the region's own PD, the key still works.
    q = t.pair(b_create=dict(pd="other"))
    msg = pattern(32, 12)
    t.a.write("a", 0, msg.hex())
    t.a.post_send(q.qid, [dict(wr_id=2, opcode=e.IBV_WR_RDMA_WRITE, sges=[["a", 0, 32]],
                               rdma=[victim["rkey"], victim["addr"]])])
    expect(t.a.poll(q.qid, "send", 1), [q.sent(2, e.IBV_WC_RDMA_WRITE)], "WRITE through the region's PD")
    expect_bytes(t.b.read("victim", 0, 32), msg, "the region after the refused invalidation")


@check
def bad_rkey(t):
    p = t.pair()
    t.b.post_recv(p.qid, 91, [["b", 0, 64]])
    bad = t.bm["rkey"] ^ 0x80  # same slot, another key byte: no region has it
    send = dict(opcode=e.IBV_WR_SEND, sges=[["a", 0, 16]])
    t.a.post_send(p.qid, [dict(wr_id=1, opcode=e.IBV_WR_RDMA_WRITE, sges=[["a", 0, 16]], rdma=[bad, t.bm["addr"]]),
                          dict(send, wr_id=2)])
    # The requester: a Remote Access Error NAK, the QP goes to error, what follows is flushed (also WRs
    # posted after the error).
    expect(t.a.poll(p.qid, "send", 2),
           [p.send_failed(1, e.IBV_WC_REM_ACCESS_ERR), p.send_failed(2, e.IBV_WC_WR_FLUSH_ERR)], "requester")
    assert t.a.qp_state(p.qid) == e.IBV_QPS_ERR, "the requester QP is not in the error state"
    t.a.post_send(p.qid, [dict(send, wr_id=3)])
    expect(t.a.poll(p.qid, "send", 1), [p.send_failed(3, e.IBV_WC_WR_FLUSH_ERR)], "a WR posted in the error state")
    # The responder: an access violation is fatal to its QP too; its posted receive is flushed.
    assert t.b.qp_state(p.qid) == e.IBV_QPS_ERR, "the responder QP is not in the error state"
    expect(t.b.poll(p.qid, "recv", 1), [p.recv_failed(91, e.IBV_WC_WR_FLUSH_ERR)], "responder")
    expect_bytes(t.b.read("b", 0, 64), bytes(64), "the responder's memory")


@check
def remote_access_refused(t):
    # Every way a responder refuses an RDMA access is a Remote Access Error NAK, fatal to both QPs; the
    # responder's memory is not touched.
    no_write = t.b.reg_mr("no_write", 4096, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_READ)
    no_read = t.b.reg_mr("no_read", 4096, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE)
    end = t.bm["addr"] + 65536
    write = dict(opcode=e.IBV_WR_RDMA_WRITE, sges=[["a", 0, 16]])
    read = dict(opcode=e.IBV_WR_RDMA_READ, sges=[["a", 0, 16]])
    cswap = dict(opcode=e.IBV_WR_ATOMIC_CMP_AND_SWP, sges=[["a", 0, 8]])
    cases = [
        ("WRITE across the region's end", dict(write, rdma=[t.bm["rkey"], end - 8]), e.IBV_WC_REM_ACCESS_ERR),
        ("READ before the region's start", dict(read, rdma=[t.bm["rkey"], t.bm["addr"] - 8]), e.IBV_WC_REM_ACCESS_ERR),
        ("WRITE without remote write access", dict(write, rdma=[no_write["rkey"], no_write["addr"]]),
         e.IBV_WC_REM_ACCESS_ERR),
        ("READ without remote read access", dict(read, rdma=[no_read["rkey"], no_read["addr"]]),
         e.IBV_WC_REM_ACCESS_ERR),
        ("atomic without remote atomic access", dict(cswap, atomic=[no_write["rkey"], no_write["addr"], 0, 1]),
         e.IBV_WC_REM_ACCESS_ERR),
    ]
    t.a.write("a", 0, pattern(16, 14).hex())
    for what, wr, status in cases:
        p = t.pair()
        t.a.post_send(p.qid, [dict(wr, wr_id=1)])
        expect(t.a.poll(p.qid, "send", 1), [p.send_failed(1, status)], what)
        assert t.b.qp_state(p.qid) == e.IBV_QPS_ERR, f"{what}: the responder QP is not in the error state"
    expect_bytes(t.b.read("b", 65536 - 16, 16), bytes(16), "the end of the region")
    expect_bytes(t.b.read("no_write", 0, 16), bytes(16), "the region without remote write access")


@check
def receive_too_small(t):
    # A SEND longer than the receive: Invalid Request NAK for the requester, a local length error for the
    # receive (rxe and real NICs alike), both QPs in error.
    p = t.pair()
    t.b.post_recv(p.qid, 121, [["b", 0, 64]])
    t.a.post_send(p.qid, [dict(wr_id=1, opcode=e.IBV_WR_SEND, sges=[["a", 0, 65]])])
    expect(t.a.poll(p.qid, "send", 1), [p.send_failed(1, e.IBV_WC_REM_INV_REQ_ERR)], "requester")
    expect(t.b.poll(p.qid, "recv", 1), [p.recv_failed(121, e.IBV_WC_LOC_LEN_ERR)], "responder")
    assert t.b.qp_state(p.qid) == e.IBV_QPS_ERR, "the responder QP is not in the error state"


@check
def local_protection(t):
    # The requester's own keys: an unknown lkey, and a READ into a region without local write access,
    # each a local protection error that fails the QP: the WR after it is flushed.
    t.a.reg_mr("read_only", 4096, e.IBV_ACCESS_REMOTE_READ)
    cases = [
        ("SEND with an unknown lkey", dict(opcode=e.IBV_WR_SEND, sges=[["a", 0, 16, t.am["lkey"] ^ 0x80]])),
        ("READ into a region without local write access",
         dict(opcode=e.IBV_WR_RDMA_READ, sges=[["read_only", 0, 16]], rdma=[t.bm["rkey"], t.bm["addr"]])),
    ]
    t.b.write("b", 0, pattern(16, 15).hex())
    for what, wr in cases:
        p = t.pair()
        t.b.post_recv(p.qid, 131, [["b", 4096, 64]])
        t.a.post_send(p.qid, [dict(wr, wr_id=1), dict(wr_id=2, opcode=e.IBV_WR_SEND, sges=[["a", 0, 16]])])
        expect(t.a.poll(p.qid, "send", 2),
               [p.send_failed(1, e.IBV_WC_LOC_PROT_ERR), p.send_failed(2, e.IBV_WC_WR_FLUSH_ERR)], what)
        if wr["opcode"] == e.IBV_WR_SEND:
            # Found before anything was sent. (The READ's error shows only when its response arrives; the
            # SEND behind it may have been delivered by then, and still completes flushed, as on a NIC.)
            expect(t.b.poll(p.qid, "recv", 0), [], f"{what}: the responder")
    expect_bytes(t.a.read("read_only", 0, 16), bytes(16), "the region without local write access")


@check
def invalid_atomics_refused_at_post(t):
    # A misaligned address or a local buffer of less than 8 bytes: ibv_post_send refuses the atomic with
    # EINVAL, as rdma-core's rxe provider does, and the QP goes on unharmed.
    p = t.pair()
    remote = [t.bm["rkey"], t.bm["addr"]]
    for what, wr in [("misaligned", dict(sges=[["a", 0, 8]], atomic=[remote[0], remote[1] + 4, 1])),
                     ("4-byte buffer", dict(sges=[["a", 0, 4]], atomic=remote + [1]))]:
        try:
            t.a.post_send(p.qid, [dict(wr, wr_id=1, opcode=e.IBV_WR_ATOMIC_FETCH_AND_ADD)])
            errno = 0
        except PyverbsRDMAError as ex:
            errno = ex.error_code
        assert errno == 22, f"a {what} atomic: ibv_post_send returned {errno}, not EINVAL"
    expect(t.a.poll(p.qid, "send", 0), [], "after the refused posts")
    t.a.post_send(p.qid, [dict(wr_id=2, opcode=e.IBV_WR_ATOMIC_FETCH_AND_ADD, sges=[["a", 0, 8]], atomic=remote + [5])])
    expect(t.a.poll(p.qid, "send", 1), [p.sent(2, e.IBV_WC_FETCH_ADD, byte_len=8)], "an atomic after them")
    expect_bytes(t.b.read("b", 0, 8), (5).to_bytes(8, "little"), "the responder's memory")


@check
def opcodes_invalid_for_the_qp_type_refused_at_post(t):
    # UC carries no READ, atomic or SEND with invalidate (IBTA 9.7.4): ibv_post_send refuses them with
    # EINVAL, as the kernel's software providers (rxe, rdmavt) do, and the QP stays usable.
    p = t.pair(a_create=dict(uc=True), b_create=dict(uc=True))
    remote = [t.bm["rkey"], t.bm["addr"]]
    for what, wr in [("READ", dict(opcode=e.IBV_WR_RDMA_READ, sges=[["a", 0, 8]], rdma=remote)),
                     ("atomic", dict(opcode=e.IBV_WR_ATOMIC_FETCH_AND_ADD, sges=[["a", 0, 8]], atomic=remote + [1])),
                     ("SEND with invalidate", dict(opcode=e.IBV_WR_SEND_WITH_INV, sges=[["a", 0, 8]], imm=1))]:
        try:
            t.a.post_send(p.qid, [dict(wr, wr_id=1)])
            errno = 0
        except PyverbsRDMAError as ex:
            errno = ex.error_code
        assert errno == 22, f"a {what} on UC: ibv_post_send returned {errno}, not EINVAL"
    expect(t.a.poll(p.qid, "send", 0), [], "after the refused posts")
    assert t.a.qp_state(p.qid) == e.IBV_QPS_RTS, "the UC QP left RTS"
    msg = pattern(16, 13)
    t.a.write("a", 0, msg.hex())
    t.a.post_send(p.qid, [dict(wr_id=2, opcode=e.IBV_WR_RDMA_WRITE, sges=[["a", 0, 16]], rdma=remote)])
    expect(t.a.poll(p.qid, "send", 1), [p.sent(2, e.IBV_WC_RDMA_WRITE)], "a WRITE on UC after them")
    expect_bytes(t.b.read("b", 0, 16), msg, "the responder's memory")
