"""pyverbs_ops.py's checks of what a peer does to a requester: receiver not ready (RNR) and a peer that
is gone (retry exceeded), with the statuses a real NIC reports. The last check kills the responder
process, so this module's checks run last and that one last of all."""
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
