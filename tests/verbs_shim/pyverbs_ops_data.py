"""pyverbs_ops.py's data-path checks: each one succeeds on a real NIC, and asserts every completion field
that is defined and every byte that moves (and the bytes next to them, which must not)."""
import struct

import pyverbs.enums as e
from pyverbs.pyverbs_error import PyverbsRDMAError

from pyverbs_ops import check, expect, expect_bytes, pattern

ZERO = bytes(1)


@check
def send_with_immediate(t):
    p = t.pair()
    msg = pattern(100, 1)
    t.a.write("a", 0, msg.hex())
    t.b.post_recv(p.qid, 11, [["b", 0, 4096]])
    # pyverbs stores imm_data unchanged in ibv_send_wr's network-order field and reads ibv_wc's the same
    # way, so the value must come back as given.
    t.a.post_send(p.qid, [dict(wr_id=1, opcode=e.IBV_WR_SEND_WITH_IMM, sges=[["a", 0, 100]], imm=0x12345678)])
    expect(t.a.poll(p.qid, "send", 1), [p.sent(1, e.IBV_WC_SEND)], "requester")
    expect(t.b.poll(p.qid, "recv", 1), [p.received(11, 100, wc_flags=e.IBV_WC_WITH_IMM, imm_data=0x12345678)],
           "responder")
    expect_bytes(t.b.read("b", 0, 101), msg + ZERO, "received bytes")


@check
def rdma_write_with_immediate(t):
    p = t.pair()
    msg = pattern(3000, 2)  # three packets at MTU 1024
    t.a.write("a", 0, msg.hex())
    t.b.post_recv(p.qid, 21, [["b", 0, 64]])  # consumed for the completion; its buffer is not written
    t.a.post_send(p.qid, [dict(wr_id=2, opcode=e.IBV_WR_RDMA_WRITE_WITH_IMM, sges=[["a", 0, 3000]],
                               rdma=[t.bm["rkey"], t.bm["addr"] + 8192], imm=0xDEADBEEF)])
    expect(t.a.poll(p.qid, "send", 1), [p.sent(2, e.IBV_WC_RDMA_WRITE)], "requester")
    expect(t.b.poll(p.qid, "recv", 1), [p.received(21, 3000, e.IBV_WC_RECV_RDMA_WITH_IMM, e.IBV_WC_WITH_IMM,
                                                  imm_data=0xDEADBEEF)], "responder")
    expect_bytes(t.b.read("b", 8191, 3002), ZERO + msg + ZERO, "written bytes")
    expect_bytes(t.b.read("b", 0, 64), bytes(64), "the receive buffer of a WRITE with immediate")


@check
def zero_length_messages(t):
    p = t.pair()
    t.b.post_recv(p.qid, 31, [["b", 0, 64]])
    t.b.post_recv(p.qid, 32, [])  # a receive without SGEs takes zero-length messages
    t.b.post_recv(p.qid, 33, [["b", 64, 64]])
    rdma = [t.bm["rkey"], t.bm["addr"]]
    t.a.post_send(p.qid, [
        dict(wr_id=1, opcode=e.IBV_WR_SEND),                                   # no SGE
        dict(wr_id=2, opcode=e.IBV_WR_SEND_WITH_IMM, sges=[["a", 0, 0]], imm=7),  # one SGE of length 0
        dict(wr_id=3, opcode=e.IBV_WR_RDMA_WRITE, rdma=rdma),
        dict(wr_id=4, opcode=e.IBV_WR_RDMA_WRITE_WITH_IMM, rdma=rdma, imm=8),
        dict(wr_id=5, opcode=e.IBV_WR_RDMA_READ, rdma=rdma),
    ])
    expect(t.a.poll(p.qid, "send", 5), [
        p.sent(1, e.IBV_WC_SEND), p.sent(2, e.IBV_WC_SEND), p.sent(3, e.IBV_WC_RDMA_WRITE),
        p.sent(4, e.IBV_WC_RDMA_WRITE), p.sent(5, e.IBV_WC_RDMA_READ, byte_len=0)], "requester")
    expect(t.b.poll(p.qid, "recv", 3), [
        p.received(31, 0), p.received(32, 0, wc_flags=e.IBV_WC_WITH_IMM, imm_data=7),
        p.received(33, 0, e.IBV_WC_RECV_RDMA_WITH_IMM, e.IBV_WC_WITH_IMM, imm_data=8)], "responder")
    expect_bytes(t.b.read("b", 0, 256), bytes(256), "memory after zero-length messages")


@check
def scatter_gather_lists(t):
    p = t.pair()
    t.a.reg_mr("a2", 4096)
    # Four SGEs over two regions (two lkeys), 1811 bytes: two packets, the boundary inside an SGE.
    sges = [["a", 0, 10], ["a", 1000, 300], ["a2", 17, 1], ["a", 5000, 1500]]
    msg = pattern(1811, 3)
    at = 0
    for mr, off, length in sges:
        t.a.write(mr, off, msg[at:at + length].hex())
        at += length
    t.b.post_recv(p.qid, 41, [["b", 0, 100], ["b", 2000, 1000], ["b", 4000, 1000]])
    from_b = pattern(1811, 4)
    t.b.write("b", 12288, from_b.hex())
    read_into = [["a", 20000, 5], ["a2", 100, 1000], ["a", 30000, 806]]
    t.a.post_send(p.qid, [
        dict(wr_id=1, opcode=e.IBV_WR_SEND, sges=sges),
        dict(wr_id=2, opcode=e.IBV_WR_RDMA_WRITE, sges=sges, rdma=[t.bm["rkey"], t.bm["addr"] + 8192]),
        dict(wr_id=3, opcode=e.IBV_WR_RDMA_READ, sges=read_into, rdma=[t.bm["rkey"], t.bm["addr"] + 12288]),
    ])
    expect(t.a.poll(p.qid, "send", 3), [p.sent(1, e.IBV_WC_SEND), p.sent(2, e.IBV_WC_RDMA_WRITE),
                                        p.sent(3, e.IBV_WC_RDMA_READ, byte_len=1811)], "requester")
    expect(t.b.poll(p.qid, "recv", 1), [p.received(41, 1811)], "responder")
    # SEND: scattered over the receive's SGEs in order; nothing around them touched.
    expect_bytes(t.b.read("b", 0, 101), msg[:100] + ZERO, "receive SGE 1")
    expect_bytes(t.b.read("b", 1999, 1002), ZERO + msg[100:1100] + ZERO, "receive SGE 2")
    expect_bytes(t.b.read("b", 3999, 1001), ZERO + msg[1100:] + bytes(289), "receive SGE 3")
    # WRITE: gathered into one contiguous range. READ: scattered over the local SGEs.
    expect_bytes(t.b.read("b", 8191, 1813), ZERO + msg + ZERO, "written bytes")
    expect_bytes(t.a.read("a", 19999, 7), ZERO + from_b[:5] + ZERO, "read SGE 1")
    expect_bytes(t.a.read("a2", 99, 1002), ZERO + from_b[5:1005] + ZERO, "read SGE 2")
    expect_bytes(t.a.read("a", 29999, 808), ZERO + from_b[1005:] + ZERO, "read SGE 3")


@check
def inline_data(t):
    p = t.pair(a_create=dict(max_inline=256))
    assert p.a_max_inline >= 256, f"max_inline_data {p.a_max_inline} < 256 asked for"
    first, second, third = pattern(150, 5), pattern(50, 6), pattern(64, 7)
    t.a.write("a", 0, first.hex())
    t.a.write("a", 400, second.hex())
    t.a.write("a", 600, third.hex())
    t.b.post_recv(p.qid, 51, [["b", 0, 512]])
    # Inline data is copied at post time: lkeys are not looked at (0 here, as applications often pass
    # for unregistered buffers) and the buffers may change as soon as ibv_post_send returns.
    inline = e.IBV_SEND_INLINE | e.IBV_SEND_SIGNALED
    t.a.post_send(p.qid, [
        dict(wr_id=1, opcode=e.IBV_WR_SEND, sges=[["a", 0, 150, 0], ["a", 400, 50, 0]], flags=inline),
        dict(wr_id=2, opcode=e.IBV_WR_RDMA_WRITE, sges=[["a", 600, 64, 0]], flags=inline,
             rdma=[t.bm["rkey"], t.bm["addr"] + 1024]),
    ])
    t.a.write("a", 0, bytes(1024).hex())
    expect(t.a.poll(p.qid, "send", 2), [p.sent(1, e.IBV_WC_SEND), p.sent(2, e.IBV_WC_RDMA_WRITE)], "requester")
    expect(t.b.poll(p.qid, "recv", 1), [p.received(51, 200)], "responder")
    expect_bytes(t.b.read("b", 0, 201), first + second + ZERO, "inline SEND")
    expect_bytes(t.b.read("b", 1023, 66), ZERO + third + ZERO, "inline WRITE")
    # More than max_inline_data is refused at post time, and nothing is sent.
    t.a.write("a", 0, pattern(p.a_max_inline + 1, 8).hex())
    too_long = dict(wr_id=3, opcode=e.IBV_WR_SEND, sges=[["a", 0, p.a_max_inline + 1]], flags=inline)
    try:
        t.a.post_send(p.qid, [too_long])
        refused = False
    except PyverbsRDMAError:
        refused = True
    assert refused, f"an inline SEND of {p.a_max_inline + 1} bytes (max_inline_data + 1) was accepted"
    expect(t.a.poll(p.qid, "send", 0), [], "requester after a refused post")


@check
def fence_after_read(t):
    # The fenced SEND carries the buffer the READ before it fills: without the fence it would be sent
    # (stale, zero) before the READ's response arrived.
    p = t.pair()
    remote = pattern(4096, 9)
    t.b.write("b", 0x4000, remote.hex())
    t.b.post_recv(p.qid, 61, [["b", 0, 4096]])
    t.a.post_send(p.qid, [
        dict(wr_id=1, opcode=e.IBV_WR_RDMA_READ, sges=[["a", 0x4000, 4096]],
             rdma=[t.bm["rkey"], t.bm["addr"] + 0x4000]),
        dict(wr_id=2, opcode=e.IBV_WR_SEND, sges=[["a", 0x4000, 4096]], flags=e.IBV_SEND_SIGNALED | e.IBV_SEND_FENCE),
    ])
    expect(t.a.poll(p.qid, "send", 2), [p.sent(1, e.IBV_WC_RDMA_READ, byte_len=4096), p.sent(2, e.IBV_WC_SEND)],
           "requester")
    expect(t.b.poll(p.qid, "recv", 1), [p.received(61, 4096)], "responder")
    expect_bytes(t.b.read("b", 0, 4096), remote, "the fenced SEND's payload")


@check
def unsignalled_completions(t):
    # Rounds of 8 WRITEs on a 16-deep send queue, only the last of each signalled: the signalled one
    # retires the unsignalled ones before it, so the queue never fills, and only it completes.
    p = t.pair(a_create=dict(sq_sig_all=False, depth=16))
    msg = pattern(32 * 32, 10)
    t.a.write("a", 0, msg.hex())
    for r in range(4):
        wrs = [dict(wr_id=r * 8 + i, opcode=e.IBV_WR_RDMA_WRITE, sges=[["a", (r * 8 + i) * 32, 32]],
                    rdma=[t.bm["rkey"], t.bm["addr"] + (r * 8 + i) * 32], flags=e.IBV_SEND_SIGNALED if i == 7 else 0)
               for i in range(8)]
        t.a.post_send(p.qid, wrs)
        expect(t.a.poll(p.qid, "send", 1), [p.sent(r * 8 + 7, e.IBV_WC_RDMA_WRITE)], f"round {r}")
    expect_bytes(t.b.read("b", 0, len(msg) + 1), msg + ZERO, "the unsignalled WRITEs' bytes")
    # sq_sig_all: every WR completes, signalled or not.
    q = t.pair(a_create=dict(sq_sig_all=True))
    t.a.post_send(q.qid, [dict(wr_id=i, opcode=e.IBV_WR_RDMA_WRITE, sges=[["a", 0, 8]],
                               rdma=[t.bm["rkey"], t.bm["addr"]], flags=0) for i in range(3)])
    expect(t.a.poll(q.qid, "send", 3), [q.sent(i, e.IBV_WC_RDMA_WRITE) for i in range(3)], "sq_sig_all")


@check
def read_and_atomics(t):
    p = t.pair()
    first, second, swap = 0x1122334455667788, 0xFFFFFFFFFFFFFFFE, 0xA5A5A5A5_5A5A5A5A
    t.b.write("b", 0x100, struct.pack("<QQ", first, second).hex())  # the responder's own byte order
    remote = [t.bm["rkey"], t.bm["addr"] + 0x100]
    remote2 = [t.bm["rkey"], t.bm["addr"] + 0x108]
    t.a.post_send(p.qid, [
        dict(wr_id=1, opcode=e.IBV_WR_ATOMIC_CMP_AND_SWP, sges=[["a", 0x10, 8]], atomic=remote + [first, swap]),
        dict(wr_id=2, opcode=e.IBV_WR_ATOMIC_CMP_AND_SWP, sges=[["a", 0x18, 8]], atomic=remote + [first, 0]),
        dict(wr_id=3, opcode=e.IBV_WR_ATOMIC_FETCH_AND_ADD, sges=[["a", 0x20, 8]], atomic=remote2 + [3]),
        dict(wr_id=4, opcode=e.IBV_WR_ATOMIC_FETCH_AND_ADD, sges=[["a", 0x28, 8]], atomic=remote2 + [2**64 - 1]),
        dict(wr_id=5, opcode=e.IBV_WR_RDMA_READ, sges=[["a", 0x40, 16]], rdma=remote),
    ])
    expect(t.a.poll(p.qid, "send", 5), [
        p.sent(1, e.IBV_WC_COMP_SWAP, byte_len=8), p.sent(2, e.IBV_WC_COMP_SWAP, byte_len=8),
        p.sent(3, e.IBV_WC_FETCH_ADD, byte_len=8), p.sent(4, e.IBV_WC_FETCH_ADD, byte_len=8),
        p.sent(5, e.IBV_WC_RDMA_READ, byte_len=16)], "requester")
    returned = struct.unpack("<QQQQ", bytes.fromhex(t.a.read("a", 0x10, 32)))
    # Each atomic returns the value before it: the swap happened, the second compare failed, the adds
    # wrapped around 2^64 (second + 3 = 1, then 1 + (2^64 - 1) = 0).
    assert returned == (first, swap, second, 1), f"atomics returned {[hex(v) for v in returned]}"
    final = struct.unpack("<QQ", bytes.fromhex(t.a.read("a", 0x40, 16)))
    assert final == (swap, 0), f"READ after the atomics: {[hex(v) for v in final]}"
    expect_bytes(t.b.read("b", 0x100, 16), struct.pack("<QQ", swap, 0), "the responder's memory")


@check
def atomic_write(t):
    # IBV_WR_ATOMIC_WRITE through ibv_post_send: its 8 bytes are what the gather list holds, taken at post
    # time (ibv_send_wr has no field for them); they land as given, and nothing beside them changes.
    p = t.pair()
    word = bytes.fromhex("0102030405060708")
    t.b.write("b", 0x200, pattern(24, 9).hex())
    t.a.write("a", 0x10, word.hex())
    t.a.post_send(p.qid, [dict(wr_id=1, opcode=e.IBV_WR_ATOMIC_WRITE, sges=[["a", 0x10, 8]],
                               rdma=[t.bm["rkey"], t.bm["addr"] + 0x208])])
    t.a.write("a", 0x10, bytes(8).hex())  # already taken: changing the buffer now changes nothing
    expect(t.a.poll(p.qid, "send", 1), [p.sent(1, e.IBV_WC_ATOMIC_WRITE, byte_len=8)], "requester")
    expect(t.b.poll(p.qid, "recv", 0), [], "responder")
    expect_bytes(t.b.read("b", 0x200, 24), pattern(24, 9)[:8] + word + pattern(24, 9)[16:], "the responder's memory")
    # Refused at post time: an unaligned address, and a gather list of other than 8 bytes.
    for bad in (dict(sges=[["a", 0x10, 8]], rdma=[t.bm["rkey"], t.bm["addr"] + 0x204]),
                dict(sges=[["a", 0x10, 4]], rdma=[t.bm["rkey"], t.bm["addr"] + 0x208])):
        try:
            t.a.post_send(p.qid, [dict(wr_id=2, opcode=e.IBV_WR_ATOMIC_WRITE, **bad)])
            refused = False
        except PyverbsRDMAError:
            refused = True
        assert refused, f"an ATOMIC WRITE with {bad} was accepted"
    expect(t.a.poll(p.qid, "send", 0), [], "requester after the refused posts")
