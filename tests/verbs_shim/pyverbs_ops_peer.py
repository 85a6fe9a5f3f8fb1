"""pyverbs_ops.py's checks of what a peer does to a requester: receiver not ready (RNR) and a peer that
is gone (retry exceeded), with the statuses a real NIC reports. The last check kills the responder
process, so this module's checks run last and that one last of all."""
import errno
import ipaddress
import time

import pyverbs.enums as e

from pyverbs_ops import check, expect, expect_bytes, pattern


@check
def rnr_retry_zero(t):
    # No receive posted and rnr_retry 0: the first RNR NAK ends the SEND.
    p = t.pair(a_connect=dict(rnr_retry=0))
    t.a.post_send(p.qid, [dict(wr_id=1, opcode=e.IBV_WR_SEND, sges=[["a", 0, 16]])])
    expect(t.a.poll(p.qid, "send", 1), [p.send_failed(1, e.IBV_WC_RNR_RETRY_EXC_ERR)], "requester")
    assert t.a.qp_state(p.qid) == e.IBV_QPS_ERR, "the requester QP is not in the error state"
    # Receiver not ready is no error of the responder's.
    assert t.b.qp_state(p.qid) == e.IBV_QPS_RTS, "the responder QP left RTS"


@check
def rnr_retry_then_receive(t):
    # rnr_retry 7 retries forever (every 2.56 ms, the responder's min_rnr_timer 16): a receive posted
    # later takes the SEND.
    p = t.pair(a_connect=dict(rnr_retry=7), b_connect=dict(min_rnr_timer=16))
    msg = pattern(32, 13)
    t.a.write("a", 0, msg.hex())
    t.a.post_send(p.qid, [dict(wr_id=1, opcode=e.IBV_WR_SEND, sges=[["a", 0, 32]])])
    expect(t.a.poll(p.qid, "send", 0, settle=0.1), [], "requester before the receive")
    t.b.post_recv(p.qid, 101, [["b", 0, 64]])
    expect(t.a.poll(p.qid, "send", 1), [p.sent(1, e.IBV_WC_SEND)], "requester")
    expect(t.b.poll(p.qid, "recv", 1), [p.received(101, 32)], "responder")
    expect_bytes(t.b.read("b", 0, 32), msg, "received bytes")


def gid_text(sixteen):
    """The GID text pyverbs takes: eight groups of four hex digits."""
    return ":".join(sixteen[i:i + 2].hex() for i in range(0, 16, 2))


@check
def unreachable_destination_fails_at_set_up(t):
    # Linux resolves a RoCE destination's MAC before ibv_create_ah, and before ibv_modify_qp gives a
    # connected QP its address vector, and waits for it: 1000 ms, then ETIMEDOUT ("Failed to modify QP to
    # RTR: Connection timed out"). No route: ENETUNREACH at once. A source GID of the other family: EINVAL.
    absent = gid_text(ipaddress.IPv6Address(t.a.gid).packed[:15] + bytes([77]))  # 192.0.2.77: on the port's
    # subnet, and no host has it
    for what in ("ah", "rtr"):
        if what == "rtr":
            t.a.create_qp("unreachable")
        r = t.a.timed_set_up(what, absent, qid="unreachable")
        assert r["errno"] == errno.ETIMEDOUT, f"{what} toward {absent}: errno {r['errno']}, not ETIMEDOUT"
        assert 0.95 < r["seconds"] < 1.5, f"{what} toward {absent} gave up after {r['seconds']:.3f} s, not 1 s"
        if what == "rtr":
            assert t.a.qp_state("unreachable") == e.IBV_QPS_INIT, "the refused RTR moved the QP"
            t.a.destroy_qp("unreachable")
    r = t.a.timed_set_up("ah", gid_text(bytes(10) + b"\xff\xff" + bytes([198, 51, 100, 7])))  # off every
    # subnet, and the port has no gateway
    assert r["errno"] == errno.ENETUNREACH and r["seconds"] < 0.5, f"no route: {r}"
    r = t.a.timed_set_up("ah", gid_text(b"\xfd" + bytes(14) + b"\x77"))  # GID 0 is IPv4
    assert r["errno"] == errno.EINVAL and r["seconds"] < 0.5, f"IPv4 source, IPv6 destination: {r}"
    # The port's own address (the responder's too: both share the loopback port) needs no resolution.
    r = t.a.timed_set_up("ah", t.a.gid)
    assert r["errno"] == 0 and r["seconds"] < 0.5, f"toward our own address: {r}"


def expect_retry_exceeded(t, p, what):
    """A SEND to a peer that is gone: retry_cnt 2 and timeout 12 (16.8 ms) end it in about 50 ms."""
    t0 = time.monotonic()
    t.a.post_send(p.qid, [dict(wr_id=1, opcode=e.IBV_WR_SEND, sges=[["a", 0, 16]])])
    expect(t.a.poll(p.qid, "send", 1, timeout=10), [p.send_failed(1, e.IBV_WC_RETRY_EXC_ERR)], what)
    elapsed = time.monotonic() - t0
    assert 0.04 < elapsed < 3, f"{what}: retry exceeded after {elapsed:.3f} s, not about 0.05 s"
    assert t.a.qp_state(p.qid) == e.IBV_QPS_ERR, f"{what}: the requester QP is not in the error state"


VANISHING = dict(a_connect=dict(timeout=12, retry_cnt=2))


@check
def retry_exceeded_peer_qp_destroyed(t):
    p = t.pair(**VANISHING)
    t.b.destroy_qp(p.qid)
    expect_retry_exceeded(t, p, "peer QP destroyed")


@check
def retry_exceeded_peer_process_killed(t):
    p = t.pair(**VANISHING)
    # The connection works, then the responder process is killed (SIGKILL: no verbs call tears anything
    # down; uroced cleans up after it) and the socket to it closes.
    t.b.post_recv(p.qid, 111, [["b", 0, 64]])
    t.a.post_send(p.qid, [dict(wr_id=0, opcode=e.IBV_WR_SEND, sges=[["a", 0, 16]])])
    expect(t.a.poll(p.qid, "send", 1), [p.sent(0, e.IBV_WC_SEND)], "before the kill")
    t.b.vanish()
    expect_retry_exceeded(t, p, "peer process killed")
