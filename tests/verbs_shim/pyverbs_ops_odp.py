"""pyverbs_ops.py's checks of on-demand paging (IBV_ACCESS_ON_DEMAND): the capabilities ibv_query_device_ex
reports, every operation through on-demand regions, a region that follows its mapping when the process
replaces it (which a pinned region does not), an unmapped page as an access error, the implicit region
(the whole address space), and ibv_advise_mr's prefetch and its errors."""
import errno

import pyverbs.enums as e

from pyverbs_ops import check, expect, expect_bytes, pattern

SIZE = 4 * 4096
PREFETCH, PREFETCH_WRITE, NO_FAULT = (e._IBV_ADVISE_MR_ADVICE_PREFETCH, e._IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE,
                                      e._IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT)
FLUSH = e._IBV_ADVISE_MR_FLAG_FLUSH


def odp_regions(t, name="o"):
    """Fresh mappings `name` on both sides (SIZE bytes, zero) under on-demand regions of the same name."""
    for node in (t.a, t.b):
        node.map_buffer(name, SIZE)
        region = node.reg_mr(name, SIZE, at=name, odp=True)
    return region  # b's


@check
def odp_capabilities(t):
    every = (e.IBV_ODP_SUPPORT_SEND | e.IBV_ODP_SUPPORT_RECV | e.IBV_ODP_SUPPORT_WRITE | e.IBV_ODP_SUPPORT_READ |
             e.IBV_ODP_SUPPORT_ATOMIC | e.IBV_ODP_SUPPORT_SRQ_RECV)
    want = {"general": e.IBV_ODP_SUPPORT | e.IBV_ODP_SUPPORT_IMPLICIT, "rc": every, "xrc": every,
            "uc": e.IBV_ODP_SUPPORT_SEND | e.IBV_ODP_SUPPORT_RECV | e.IBV_ODP_SUPPORT_WRITE |
            e.IBV_ODP_SUPPORT_SRQ_RECV,
            "ud": e.IBV_ODP_SUPPORT_SEND | e.IBV_ODP_SUPPORT_RECV | e.IBV_ODP_SUPPORT_SRQ_RECV}
    got = t.a.odp_caps()
    assert got == want, f"odp caps: got {got}, want {want}"


@check
def odp_regions_carry_every_operation(t):
    bo = odp_regions(t)
    p = t.pair()
    msg = pattern(3000, 41)  # three packets at MTU 1024
    t.a.write("o", 0, msg.hex())
    t.b.post_recv(p.qid, 1, [["o", 0, 4096]])
    t.a.post_send(p.qid, [dict(wr_id=1, opcode=e.IBV_WR_SEND, sges=[["o", 0, 3000]]),
                          dict(wr_id=2, opcode=e.IBV_WR_RDMA_WRITE, sges=[["o", 0, 3000]],
                               rdma=[bo["rkey"], bo["addr"] + 8192])])
    expect(t.a.poll(p.qid, "send", 2), [p.sent(1, e.IBV_WC_SEND), p.sent(2, e.IBV_WC_RDMA_WRITE)], "requester")
    expect(t.b.poll(p.qid, "recv", 1), [p.received(1, 3000)], "responder")
    expect_bytes(t.b.read("o", 0, 3001), msg + bytes(1), "SEND into an on-demand region")
    expect_bytes(t.b.read("o", 8191, 3002), bytes(1) + msg + bytes(1), "WRITE into an on-demand region")
    # READ back into another place of a's region; then the atomics on b's.
    t.a.post_send(p.qid, [dict(wr_id=3, opcode=e.IBV_WR_RDMA_READ, sges=[["o", 4096, 3000]],
                               rdma=[bo["rkey"], bo["addr"] + 8192])])
    expect(t.a.poll(p.qid, "send", 1), [p.sent(3, e.IBV_WC_RDMA_READ, byte_len=3000)], "READ")
    expect_bytes(t.a.read("o", 4096, 3000), msg, "READ from an on-demand region")
    t.b.write("o", 12288, (5).to_bytes(8, "little").hex())
    t.a.post_send(p.qid, [dict(wr_id=4, opcode=e.IBV_WR_ATOMIC_FETCH_AND_ADD, sges=[["o", 12288, 8]],
                               atomic=[bo["rkey"], bo["addr"] + 12288, 10, 0]),
                          dict(wr_id=5, opcode=e.IBV_WR_ATOMIC_CMP_AND_SWP, sges=[["o", 12296, 8]],
                               atomic=[bo["rkey"], bo["addr"] + 12288, 15, 99])])
    expect(t.a.poll(p.qid, "send", 2), [p.sent(4, e.IBV_WC_FETCH_ADD, byte_len=8),
                                        p.sent(5, e.IBV_WC_COMP_SWAP, byte_len=8)], "atomics")
    expect_bytes(t.a.read("o", 12288, 16), (5).to_bytes(8, "little") + (15).to_bytes(8, "little"), "originals")
    expect_bytes(t.b.read("o", 12288, 8), (99).to_bytes(8, "little"), "after FETCH_ADD 10, then CMP_SWAP 15 -> 99")


@check
def odp_region_follows_its_mapping(t):
    """The process replaces the pages under a region (munmap, then new anonymous pages at the same address).
    An on-demand region sees the new pages, as on a NIC with ODP. A pinned region keeps the old ones, as on
    any NIC: the bytes READ back tell the two apart."""
    first, second = pattern(4096, 42), pattern(4096, 43)
    results = {}
    for name, odp in (("od", True), ("pinned", False)):
        t.b.map_buffer(name, 8192, first.hex())
        region = t.b.reg_mr(name, 8192, at=name, odp=odp)
        p = t.pair()
        rdma = [region["rkey"], region["addr"]]
        t.a.post_send(p.qid, [dict(wr_id=1, opcode=e.IBV_WR_RDMA_READ, sges=[["a", 0, 4096]], rdma=rdma)])
        expect(t.a.poll(p.qid, "send", 1), [p.sent(1, e.IBV_WC_RDMA_READ, byte_len=4096)], f"READ ({name})")
        expect_bytes(t.a.read("a", 0, 4096), first, f"{name}: the pages as registered")
        t.b.remap(name, second.hex())
        t.a.post_send(p.qid, [dict(wr_id=2, opcode=e.IBV_WR_RDMA_READ, sges=[["a", 0, 4096]], rdma=rdma)])
        expect(t.a.poll(p.qid, "send", 1), [p.sent(2, e.IBV_WC_RDMA_READ, byte_len=4096)], f"READ ({name})")
        results[name] = bytes.fromhex(t.a.read("a", 0, 4096))
        if odp:  # a WRITE lands in the new pages, where the process sees it
            t.a.write("a", 0, pattern(100, 44).hex())
            t.a.post_send(p.qid, [dict(wr_id=3, opcode=e.IBV_WR_RDMA_WRITE, sges=[["a", 0, 100]],
                                       rdma=[region["rkey"], region["addr"] + 4096])])
            expect(t.a.poll(p.qid, "send", 1), [p.sent(3, e.IBV_WC_RDMA_WRITE)], "WRITE after the remap")
            expect_bytes(t.b.peek(region["addr"] + 4096, 101), pattern(100, 44) + bytes(1), "written bytes")
        t.b.dereg_mr(name)
        t.b.unmap(name)
    assert results["od"] == second, "the on-demand region did not follow its mapping"
    assert results["pinned"] == first, "the pinned region lost its pages when the process remapped them"


@check
def unmapped_page_under_odp_region_is_an_access_error(t):
    """A page the process took away cannot be faulted in: the responder NAKs (remote access error) and the
    requester's own such page is a local protection error, as rxe reports a failed ODP fault."""
    bo = odp_regions(t)
    t.b.revoke("o")
    p = t.pair()
    t.a.post_send(p.qid, [dict(wr_id=1, opcode=e.IBV_WR_RDMA_WRITE, sges=[["a", 0, 64]],
                               rdma=[bo["rkey"], bo["addr"]])])
    expect(t.a.poll(p.qid, "send", 1), [p.send_failed(1, e.IBV_WC_REM_ACCESS_ERR)], "WRITE to an unmapped page")
    t.a.revoke("o")
    q = t.pair()
    t.b.post_recv(q.qid, 1, [["b", 0, 64]])
    t.a.post_send(q.qid, [dict(wr_id=2, opcode=e.IBV_WR_SEND, sges=[["o", 0, 64]])])
    expect(t.a.poll(q.qid, "send", 1), [q.send_failed(2, e.IBV_WC_LOC_PROT_ERR)], "SEND from an unmapped page")
    for node in (t.a, t.b):
        node.dereg_mr("o")
        node.unmap("o")


@check
def implicit_odp_region_covers_the_address_space(t):
    """Each side registers the whole address space once (ibv_reg_mr(pd, NULL, SIZE_MAX, ON_DEMAND)); memory
    mapped afterwards, registered nowhere else, is then sent from, written to and read from with its keys."""
    a_imp = t.a.reg_mr("implicit", 0, implicit=True)
    b_imp = t.b.reg_mr("implicit", 0, implicit=True)
    src, dst = t.a.map_buffer("src", 8192), t.b.map_buffer("dst", 8192)
    msg = pattern(5000, 45)
    t.a.poke(src, msg.hex())
    p = t.pair()
    t.a.post_send(p.qid, [dict(wr_id=1, opcode=e.IBV_WR_RDMA_WRITE, sges=[["implicit", src, 5000]],
                               rdma=[b_imp["rkey"], dst + 100])])
    expect(t.a.poll(p.qid, "send", 1), [p.sent(1, e.IBV_WC_RDMA_WRITE)], "WRITE through implicit regions")
    expect_bytes(t.b.peek(dst + 99, 5002), bytes(1) + msg + bytes(1), "written bytes")
    t.a.post_send(p.qid, [dict(wr_id=2, opcode=e.IBV_WR_RDMA_READ, sges=[["implicit", src + 6000, 1000]],
                               rdma=[b_imp["rkey"], dst + 100])])
    expect(t.a.poll(p.qid, "send", 1), [p.sent(2, e.IBV_WC_RDMA_READ, byte_len=1000)], "READ")
    expect_bytes(t.a.peek(src + 6000, 1000), msg[:1000], "read bytes")
    assert a_imp["addr"] == 0
    for node in (t.a, t.b):
        node.dereg_mr("implicit")
    t.a.unmap("src")
    t.b.unmap("dst")


@check
def advise_mr_prefetches_and_checks_its_list(t):
    t.a.map_buffer("o", SIZE)
    t.a.reg_mr("o", SIZE, at="o", odp=True)
    assert t.a.resident_pages("o") == 0, "a fresh mapping has no pages yet"
    assert t.a.advise_mr(PREFETCH_WRITE, FLUSH, [["o", 0, 2 * 4096 + 1]]) == 0
    got = t.a.resident_pages("o")
    assert got == 3, f"PREFETCH_WRITE of 2 pages and a byte: {got} pages present, not 3"
    assert t.a.advise_mr(PREFETCH, FLUSH, [["o", 0, SIZE]]) == 0
    assert t.a.advise_mr(NO_FAULT, 0, [["o", 0, SIZE]]) == 0
    assert t.a.advise_mr(PREFETCH, 0, [["o", 0, SIZE], ["o", 4096, 1]]) == 0
    # rxe's errors: an lkey that names no on-demand region of the PD (a pinned one, a stranger, another
    # PD's), a write prefetch without local write, a range outside the region; then the uverbs layer's.
    t.a.reg_mr("ro", SIZE, access=e.IBV_ACCESS_REMOTE_READ, odp=True)
    t.a.reg_mr("other", 4096, pd="second", odp=True)
    cases = [
        ("a pinned region", PREFETCH, FLUSH, [["a", 0, 64]], errno.EINVAL),
        ("an lkey nobody has", PREFETCH, FLUSH, [["o", 0, 64, 0x7fffff00]], errno.EINVAL),
        ("another PD's region", PREFETCH, FLUSH, [["other", 0, 64]], errno.EINVAL),
        ("write prefetch, no local write", PREFETCH_WRITE, FLUSH, [["ro", 0, 64]], errno.EPERM),
        ("past the region's end", PREFETCH, FLUSH, [["o", SIZE - 8, 16]], errno.EFAULT),
        ("before its start", PREFETCH, FLUSH, [["o", -8, 16]], errno.EFAULT),
        ("an unknown advice", 7, FLUSH, [["o", 0, 64]], errno.EOPNOTSUPP),
        ("an unknown flag", PREFETCH, 2, [["o", 0, 64]], errno.EINVAL),
    ]
    for what, advice, flags, sges, want in cases:
        got = t.a.advise_mr(advice, flags, sges)
        assert got == want, f"advise_mr with {what}: errno {got}, want {want}"
    # Pages that are gone: a synchronous prefetch fails, the best-effort one does not say.
    t.a.revoke("o")
    got = t.a.advise_mr(PREFETCH, FLUSH, [["o", 0, 64]])
    assert got == errno.EFAULT, f"synchronous prefetch of an unmapped page: errno {got}, want EFAULT"
    assert t.a.advise_mr(PREFETCH, 0, [["o", 0, 64]]) == 0, "best-effort prefetch of an unmapped page"
    for name in ("o", "ro", "other"):
        t.a.dereg_mr(name)
    t.a.unmap("o")
