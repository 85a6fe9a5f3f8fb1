"""pyverbs_ops.py's checks of tag matching SRQs (ibv_create_srq_ex with IBV_SRQT_TM, ibv_post_srq_ops) through
the shim, on the requester's own device: the device's tm_caps, ADD's handles, the list operations'
completions read through an extended CQ (ibv_wc_read_tm_info) and through ibv_poll_cq, IBV_WC_TM_ERR,
IBV_WC_TM_SYNC_REQ, ENOMEM at max_num_tags, *bad_wr, and what ibv_create_srq_ex and ibv_post_srq_ops refuse.
Messages are not sent here: that is the transport's matching, which rdma-core's test_tag_matching.py runs."""
import errno
import time

import pyverbs.enums as e
from pyverbs.cq import CQ, CQEX, CqInitAttrEx, PollCqAttr
from pyverbs.srq import SRQ, OpsWr, SrqAttr, SrqInitAttr, SrqInitAttrEx
from pyverbs.wr import SGE

from pyverbs_node import errno_of
from pyverbs_ops import check

TM_MASK = e.IBV_SRQ_INIT_ATTR_TYPE | e.IBV_SRQ_INIT_ATTR_PD | e.IBV_SRQ_INIT_ATTR_CQ | e.IBV_SRQ_INIT_ATTR_TM
# uroced's transport::DeviceLimits.
CAPS = {"max_num_tags": 1024, "max_ops": 1024, "max_rndv_hdr_size": 64, "max_sge": 1}


def tm_srq(node, cq, max_num_tags=2, max_ops=10, mask=TM_MASK):
    a = SrqInitAttrEx(max_wr=16, max_sge=1)
    a.comp_mask = mask
    a.srq_type = e.IBV_SRQT_TM
    a.pd = node.pds["main"]
    a.cq = cq
    a.max_num_tags = max_num_tags
    a.max_ops = max_ops
    return SRQ(node.ctx, a)


def add(node, wr_id, tag, offset=0, flags=e.IBV_OPS_SIGNALED, sges=1):
    mr = node.mrs["a"]
    sg = [SGE(mr.buf + offset + 64 * i, 64, mr.lkey) for i in range(sges)]
    return OpsWr(wr_id=wr_id, opcode=e.IBV_WR_TAG_ADD, flags=flags, recv_wr_id=wr_id + 1000, num_sge=sges, tag=tag,
                 mask=0xffff, sg_list=sg)


def delete(wr_id, handle, flags=e.IBV_OPS_SIGNALED):
    wr = OpsWr(wr_id=wr_id, opcode=e.IBV_WR_TAG_DEL, flags=flags)
    wr.handle = handle  # (OpsWr's constructor takes no handle)
    return wr


def sync(wr_id, handled, flags=e.IBV_OPS_SIGNALED | e.IBV_OPS_TM_SYNC):
    return OpsWr(wr_id=wr_id, opcode=e.IBV_WR_TAG_SYNC, flags=flags, unexpected_cnt=handled)


def chain(*wrs):
    """The operations linked through next_wr, as a tuple to post: pyverbs' next_wr keeps no reference, so the
    tuple keeps every one alive while the chain is posted."""
    for a, b in zip(wrs, wrs[1:]):
        a.next_wr = b
    return wrs


def post_errno(srq, wrs, bad=None):
    """0, or the errno ibv_post_srq_ops returned for an operation or a chain(). A `bad` OpsWr gets *bad_wr
    copied in: pyverbs copies the struct whole, sg_list pointer included, so it is only given where the
    failing operation has no SGEs (its copy would free the list a second time)."""
    head = wrs[0] if isinstance(wrs, tuple) else wrs
    return errno_of(lambda: srq.post_srq_ops(head, bad) if bad is not None else srq.post_srq_ops(head))


def expect_errno(srq, wr, want, what, bad=None):
    got = post_errno(srq, wr, bad)
    assert got == want, f"{what}: ibv_post_srq_ops gave errno {got}, want {want}"


def poll_ex(cq, timeout=2.0):
    """Every completion now in an extended CQ, as dicts: the list operations' are in the ring when
    ibv_post_srq_ops returns, the timeout is only a safety net."""
    deadline = time.monotonic() + timeout
    attr = PollCqAttr()
    while True:
        rc = cq.start_poll(attr)
        if rc == 0:
            break
        if time.monotonic() > deadline:
            return []
    got = []
    while rc == 0:
        info = cq.read_tm_info()
        got.append({"wr_id": cq.wr_id, "status": cq.status, "opcode": cq.read_opcode(),
                    "wc_flags": cq.read_wc_flags(), "tag": info.tag, "priv": info.priv})
        rc = cq.poll_next()
    cq.end_poll()
    return got


def completion(wr_id, opcode, status=e.IBV_WC_SUCCESS, wc_flags=0):
    # A list operation's completion carries no tag information: only a tag matching receive's does.
    return {"wr_id": wr_id, "status": status, "opcode": opcode, "wc_flags": wc_flags, "tag": 0, "priv": 0}


def expect_completions(got, want, what):
    assert got == want, f"{what}:\n    got  {got}\n    want {want}"


@check
def tag_matching_caps_and_list_operations(t):
    caps = t.a.ctx.query_device_ex().tm_caps
    got_caps = {k: getattr(caps, k) for k in CAPS}
    assert got_caps == CAPS, f"tm_caps {got_caps}, want {CAPS}"
    assert caps.flags & e.IBV_TM_CAP_RC, f"tm_caps.flags {caps.flags}: no IBV_TM_CAP_RC"
    cq = CQEX(t.a.ctx, CqInitAttrEx(cqe=64, wc_flags=e.IBV_WC_EX_WITH_TM_INFO | e.IBV_WC_STANDARD_FLAGS))
    srq = tm_srq(t.a, cq, max_num_tags=2)
    try:
        # A chain of two ADDs: both handles written back before ibv_post_srq_ops returns.
        first, second = add(t.a, 1, 0x1234), add(t.a, 2, 0x5678, 64)
        expect_errno(srq, chain(first, second), 0, "two ADDs")
        assert first.handle != 0 and second.handle not in (0, first.handle), (first.handle, second.handle)
        expect_completions(poll_ex(cq), [completion(1, e.IBV_WC_TM_ADD), completion(2, e.IBV_WC_TM_ADD)], "ADDs")
        # The list holds max_num_tags entries: a third is ENOMEM, and completes nothing.
        expect_errno(srq, add(t.a, 3, 0x9abc), errno.ENOMEM, "an ADD to a full list")
        # DEL frees its entry; a DEL of an entry no longer there completes with IBV_WC_TM_ERR, signalled or not.
        expect_errno(srq, chain(delete(4, first.handle), delete(5, first.handle, flags=0)), 0, "two DELs")
        expect_completions(poll_ex(cq), [completion(4, e.IBV_WC_TM_DEL),
                                         completion(5, e.IBV_WC_TM_DEL, e.IBV_WC_TM_ERR)], "DELs")
        # Software reports an unexpected message the device never delivered: out of step, the completions ask
        # for a SYNC (IBV_WC_TM_SYNC_REQ) until one brings the counts together.
        expect_errno(srq, chain(sync(6, 1), add(t.a, 7, 0x7777, 128), sync(8, 0)), 0, "SYNC, ADD, SYNC")
        expect_completions(poll_ex(cq), [completion(6, e.IBV_WC_TM_SYNC, wc_flags=e.IBV_WC_TM_SYNC_REQ),
                                         completion(7, e.IBV_WC_TM_ADD, wc_flags=e.IBV_WC_TM_SYNC_REQ),
                                         completion(8, e.IBV_WC_TM_SYNC)], "SYNCs")
        # The list is full again (0x5678 and 0x7777): room comes back with a DEL.
        expect_errno(srq, add(t.a, 9, 1), errno.ENOMEM, "an ADD to a full list again")
        expect_errno(srq, chain(delete(10, second.handle, flags=0), add(t.a, 11, 2, flags=0)), 0,
                     "a DEL, then an ADD in its room")
        expect_completions(poll_ex(cq, timeout=0.1), [], "unsignalled operations that succeeded")
        # The operations before the first refused are carried out; *bad_wr names it.
        refused = sync(13, 0, flags=e.IBV_OPS_SIGNALED | 0x100)  # a flag verbs.h does not define
        bad = OpsWr()
        expect_errno(srq, chain(delete(12, 0x4242), refused, sync(14, 0)), errno.EINVAL, "an unknown flag", bad)
        assert bad.wr_id == 13, f"*bad_wr is operation {bad.wr_id}, not 13"
        expect_completions(poll_ex(cq), [completion(12, e.IBV_WC_TM_DEL, e.IBV_WC_TM_ERR)], "before *bad_wr")
        # More SGEs than a tagged buffer takes (tm_caps.max_sge), an opcode verbs.h does not define.
        expect_errno(srq, add(t.a, 15, 3, sges=2), errno.EINVAL, "two SGEs")
        unknown = sync(16, 0)
        unknown.opcode = 7
        expect_errno(srq, unknown, errno.EINVAL, "an unknown opcode")
        expect_completions(poll_ex(cq, timeout=0.1), [], "refused operations")
    finally:
        srq.close()
        cq.close()


@check
def tag_matching_through_ibv_poll_cq_and_refusals(t):
    cq = CQ(t.a.ctx, 16)
    srq = tm_srq(t.a, cq)
    try:
        op = add(t.a, 21, 0x10)
        expect_errno(srq, chain(op, delete(22, op.handle + 1000)), 0, "ADD and DEL")
        _, wcs = cq.poll(4)
        got = [(wc.wr_id, wc.status, wc.opcode, wc.wc_flags) for wc in wcs]
        assert got == [(21, e.IBV_WC_SUCCESS, e.IBV_WC_TM_ADD, 0), (22, e.IBV_WC_TM_ERR, e.IBV_WC_TM_DEL, 0)], got
        # ibv_create_srq_ex: a TM SRQ needs its CQ, and sizes the device has.
        assert errno_of(lambda: tm_srq(t.a, cq, mask=TM_MASK & ~e.IBV_SRQ_INIT_ATTR_CQ)) == errno.EINVAL
        assert errno_of(lambda: tm_srq(t.a, cq, max_num_tags=CAPS["max_num_tags"] + 1)) == errno.EINVAL
        assert errno_of(lambda: tm_srq(t.a, cq, max_ops=0)) == errno.EINVAL
        # An SRQ of another type has no list.
        basic = SRQ(t.a.pds["main"], SrqInitAttr(SrqAttr(max_wr=4, max_sge=1)))
        try:
            expect_errno(basic, sync(23, 0), errno.EINVAL, "a SYNC on a basic SRQ")
        finally:
            basic.close()
    finally:
        srq.close()
        cq.close()
