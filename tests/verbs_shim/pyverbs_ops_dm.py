"""pyverbs_ops.py's checks of device memory (ibv_alloc_dm): memory that belongs to the NIC, shared by every
client, copied in and out with ibv_memcpy_to_dm / _from_dm, and registered zero based with ibv_reg_dm_mr
so that RDMA reaches it; and the errors ibv_alloc_dm, ibv_reg_dm_mr and ibv_free_dm give."""
import errno

import pyverbs.enums as e

from pyverbs_ops import check, expect, expect_bytes, pattern

DEVICE_MEMORY = 256 * 1024


@check
def device_memory_is_copied_and_reached_by_rdma(t):
    assert t.b.max_dm_size() == DEVICE_MEMORY, f"max_dm_size {t.b.max_dm_size()}"
    got = t.b.alloc_dm("dm", 8192)
    assert got == 0, f"ibv_alloc_dm: errno {got}"
    first = pattern(8192, 51)
    got = t.b.dm_write("dm", 0, first.hex())
    assert got == 0, f"ibv_memcpy_to_dm: errno {got}"
    expect_bytes(t.b.dm_read("dm", 0, 8192), first, "memcpy to and from device memory")
    # A region on its second half: zero based, so the remote address is an offset into the region.
    keys = t.b.reg_dm_mr("dmr", "dm", 4096, 4096)
    assert "errno" not in keys, f"ibv_reg_dm_mr: {keys}"
    p = t.pair()
    msg = pattern(3000, 52)
    t.a.write("a", 0, msg.hex())
    t.a.post_send(p.qid, [dict(wr_id=1, opcode=e.IBV_WR_RDMA_WRITE, sges=[["a", 0, 3000]], rdma=[keys["rkey"], 100])])
    expect(t.a.poll(p.qid, "send", 1), [p.sent(1, e.IBV_WC_RDMA_WRITE)], "WRITE into device memory")
    expect_bytes(t.b.dm_read("dm", 4096 + 96, 3008), first[4096 + 96:4096 + 100] + msg + first[4096 + 3100:4096 + 3104],
                 "device memory after the WRITE")
    expect_bytes(t.b.dm_read("dm", 0, 4096), first[:4096], "the first half, outside the region")
    t.a.post_send(p.qid, [dict(wr_id=2, opcode=e.IBV_WR_RDMA_READ, sges=[["a", 8192, 4096]], rdma=[keys["rkey"], 0])])
    expect(t.a.poll(p.qid, "send", 1), [p.sent(2, e.IBV_WC_RDMA_READ, byte_len=4096)], "READ from device memory")
    expect_bytes(t.a.read("a", 8192, 4096), first[4096:4196] + msg + first[4096 + 3100:], "read bytes")
    # The region as a local buffer: a SEND from it (its sge address is an offset too).
    t.a.post_recv(p.qid, 3, [["a", 16384, 64]])
    q_send = [dict(wr_id=4, opcode=e.IBV_WR_SEND, sges=[["dmr", 100, 64]])]
    t.b.post_send(p.qid, q_send)
    expect(t.b.poll(p.qid, "send", 1), [dict(wr_id=4, status=e.IBV_WC_SUCCESS, opcode=e.IBV_WC_SEND)], "SEND")
    expect(t.a.poll(p.qid, "recv", 1), [dict(wr_id=3, status=e.IBV_WC_SUCCESS, byte_len=64)], "receive")
    expect_bytes(t.a.read("a", 16384, 64), msg[:64], "bytes sent from device memory")
    # (pyverbs closes a DM's regions before the DM itself, so ibv_free_dm's EBUSY for a DM with a region on
    # it is checked by uroce_service_tests instead.)
    t.b.dereg_mr("dmr")
    got = t.b.free_dm("dm")
    assert got == 0, f"ibv_free_dm: errno {got}"


@check
def device_memory_refusals(t):
    # Longer than the device has, or more than is left of it (all clients share it): EINVAL, then ENOMEM.
    assert t.b.alloc_dm("huge", DEVICE_MEMORY + 1) == errno.EINVAL
    assert t.b.alloc_dm("all", DEVICE_MEMORY) == 0
    assert t.a.alloc_dm("more", 4096) == errno.ENOMEM, "the other client found device memory left"
    assert t.b.free_dm("all") == 0
    assert t.a.alloc_dm("more", 4096) == 0, "device memory freed by one client is there for another"
    # Regions: zero based only, and within the allocation.
    assert t.a.reg_dm_mr("x", "more", 0, 4096, e.IBV_ACCESS_LOCAL_WRITE) == {"errno": errno.EINVAL}
    assert t.a.reg_dm_mr("x", "more", 4000, 100) == {"errno": errno.EINVAL}
    # Copies outside it: EFAULT; offsets and lengths not multiples of 4: EINVAL (mlx5's rule).
    assert t.a.dm_write("more", 4092, "00" * 8) == errno.EFAULT
    assert t.a.dm_write("more", 2, "00" * 4) == errno.EINVAL
    assert t.a.dm_write("more", 4, "00" * 6) == errno.EINVAL
    assert t.a.free_dm("more") == 0
