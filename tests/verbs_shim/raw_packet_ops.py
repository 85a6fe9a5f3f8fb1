#!/usr/bin/python3
"""A pyverbs program (Debian's python3-pyverbs, unmodified libibverbs API) that checks through uroce what a
raw packet QP does on a real uroced beyond what rdma-core's tests and perftest look at: a frame to the
port's own MAC looping back to the port's rules, IBV_SEND_IP_CSUM and IBV_WC_IP_CSUM_OK, a sniffer rule
seeing RoCE traffic between two of the port's QPs, a rule on ARP trapping ARP from the port's own responder
(and with DONT_TRAP sharing it), and the default rules taking only what the port's stack leaves. Every check
uses contexts of its own ("applications"), as separate programs would.

  uroce-run /usr/bin/python3 raw_packet_ops.py --port-mac MAC --port-ip IP [--check NAME]

With --check cap_net_raw (run without CAP_NET_RAW, test_raw_packet.py uses setpriv) it checks instead that a
raw packet QP is refused with EPERM while other QPs are not; with --check hold it makes rules of every kind
and an RSS QP over work queues, prints "holding" and waits to be killed (the daemon must free it all). Prints
PASS/FAIL per check; exits 0 if all pass.
"""
import argparse
import errno
import socket
import struct
import sys
import time
import traceback

import pyverbs.enums as e
from pyverbs.addr import AH, AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.flow import Flow, FlowAttr
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.spec import EthSpec
from pyverbs.wr import RecvWR, SendWR, SGE

MAC_A = "02:00:00:00:00:0a"  # the made-up MAC the sending application writes as its source
BUF = 4096
CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn


def mac_bytes(text):
    return bytes(int(x, 16) for x in text.split(":"))


def ones_sum(data):
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s > 0xffff:
        s = (s & 0xffff) + (s >> 16)
    return s


def eth(dst, src, ether_type, payload):
    return mac_bytes(dst) + mac_bytes(src) + struct.pack("!H", ether_type) + payload


def udp_ipv4(dst_mac, src_ip, dst_ip, payload, src_mac=MAC_A):
    """A UDP/IPv4 frame with both checksums left zero."""
    udp = struct.pack("!HHHH", 40000, 9000, 8 + len(payload), 0) + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 7, 0, 64, 17, 0, socket.inet_aton(src_ip),
                     socket.inet_aton(dst_ip))
    return eth(dst_mac, src_mac, 0x0800, ip + udp)


def arp_request(sender_mac, sender_ip, target_ip):
    body = struct.pack("!HHBBH6s4s6s4s", 1, 0x0800, 6, 4, 1, mac_bytes(sender_mac), socket.inet_aton(sender_ip),
                       b"\0" * 6, socket.inet_aton(target_ip))
    return eth("ff:ff:ff:ff:ff:ff", sender_mac, 0x0806, body)


class App:
    """One application: a context, a PD, a CQ, a registered buffer and a raw packet QP in RTS with receives
    posted (each in its own 4 KiB of the buffer)."""

    def __init__(self, receives=8):
        self.ctx = Context(name="uroce0")
        self.pd = PD(self.ctx)
        self.cq = CQ(self.ctx, 256)
        self.mr = MR(self.pd, BUF * 16, e.IBV_ACCESS_LOCAL_WRITE)
        init = QPInitAttr(qp_type=e.IBV_QPT_RAW_PACKET, scq=self.cq, rcq=self.cq,
                          cap=QPCap(max_send_wr=16, max_recv_wr=16, max_send_sge=1, max_recv_sge=1))
        self.qp = QP(self.pd, init, QPAttr(port_num=1))
        self.flows = []
        self.pending = []  # receive completions polled while waiting for a send's
        for i in range(1, receives + 1):
            self.qp.post_recv(RecvWR(wr_id=i, num_sge=1, sg=[SGE(self.mr.buf + i * BUF, BUF, self.mr.lkey)]))

    def rule(self, spec=None, flow_type=e.IBV_FLOW_ATTR_NORMAL, flags=0, priority=0):
        attr = FlowAttr(num_of_specs=1 if spec else 0, flow_type=flow_type, priority=priority, port=1, flags=flags)
        if spec:
            attr.specs.append(spec)
        self.flows.append(Flow(self.qp, attr))
        return self.flows[-1]

    def send(self, frame, flags=0):
        self.mr.write(frame, len(frame), 0)
        wr = SendWR(wr_id=0, opcode=e.IBV_WR_SEND, num_sge=1, sg=[SGE(self.mr.buf, len(frame), self.mr.lkey)],
                    send_flags=e.IBV_SEND_SIGNALED | flags)
        self.qp.post_send(wr)
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            sent = [w for w in self.completions(wait=0.01) if not self.stash(w)]
            if sent:
                assert len(sent) == 1 and sent[0].status == e.IBV_WC_SUCCESS, f"send: {sent[0].status}"
                return
        raise AssertionError("the send did not complete")

    def stash(self, wc):
        """Keeps a receive completion for received(); False for any other."""
        if wc.opcode != e.IBV_WC_RECV:
            return False
        self.pending.append(wc)
        return True

    def completions(self, at_least=0, wait=0.3):
        """The completions that arrive within `wait` seconds (sooner once `at_least` came)."""
        got = []
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            n, wcs = self.cq.poll(16)
            got += wcs[:n]
            if at_least and len(got) >= at_least:
                break
            if not n:
                time.sleep(0.002)
        return got

    def received(self, wait=0.3, at_least=0):
        """[(bytes, wc_flags)] of the frames received within `wait` seconds."""
        out = []
        wcs, self.pending = self.pending, []
        if len(wcs) < at_least or not at_least:
            wcs += self.completions(max(at_least - len(wcs), 0), wait)
        for wc in wcs:
            assert wc.status == e.IBV_WC_SUCCESS and wc.opcode == e.IBV_WC_RECV, f"receive: {wc.status} {wc.opcode}"
            out.append((self.mr.read(wc.byte_len, wc.wr_id * BUF), wc.wc_flags))
        return out


@check
def own_mac_loops_back(args):
    """A frame to the port's own MAC never leaves the port: it comes back to the port's rules, once."""
    a, b = App(), App()
    b.rule(EthSpec(dst_mac=args.port_mac, dst_mac_mask="ff:ff:ff:ff:ff:ff", ether_type=0x88b5,
                   ether_type_mask=0xffff))
    frame = eth(args.port_mac, MAC_A, 0x88b5, bytes(range(64)))
    a.send(frame)
    got = b.received(at_least=1)
    assert [f for f, _ in got] == [frame], f"B received {got}"
    assert not a.received(wait=0.1), "the sender got its own frame"


@check
def ip_checksum_offload(args):
    """IBV_SEND_IP_CSUM fills in the IPv4 and UDP checksums; the receiver reports IBV_WC_IP_CSUM_OK."""
    a, b = App(), App()
    b.rule(EthSpec(dst_mac=args.port_mac, dst_mac_mask="ff:ff:ff:ff:ff:ff", ether_type=0x0800,
                   ether_type_mask=0xffff))
    frame = udp_ipv4(args.port_mac, "198.51.100.7", "198.51.100.8", b"checksum me " * 10)
    a.send(frame, e.IBV_SEND_IP_CSUM)
    a.send(frame)
    got = b.received(at_least=2)
    assert len(got) == 2, f"B received {len(got)} frames"
    (offloaded, flags), (plain, plain_flags) = got
    ip, udp = offloaded[14:34], offloaded[34:]
    assert ones_sum(ip) == 0xffff, f"IPv4 header checksum {ip[10:12].hex()} does not sum"
    pseudo = ip[12:20] + struct.pack("!BBH", 0, 17, len(udp))
    assert udp[6:8] != b"\0\0" and ones_sum(pseudo + udp) == 0xffff, f"UDP checksum {udp[6:8].hex()} does not sum"
    assert offloaded[:24] + offloaded[26:40] + offloaded[42:] == frame[:24] + frame[26:40] + frame[42:], \
        "offload changed more than the two checksums"
    assert flags & e.IBV_WC_IP_CSUM_OK, f"no IBV_WC_IP_CSUM_OK (wc_flags {flags:#x})"
    assert plain == frame and not plain_flags & e.IBV_WC_IP_CSUM_OK, "without the flag the frame changed"


@check
def sniffer_sees_roce(args):
    """A sniffer rule gets a copy of a RoCE datagram between two UD QPs of the port; they still get it too."""
    sniffer = App()
    sniffer.rule(flow_type=e.IBV_FLOW_ATTR_SNIFFER)
    ctx = Context(name="uroce0")
    pd, cq = PD(ctx), CQ(ctx, 16)
    mr = MR(pd, BUF, e.IBV_ACCESS_LOCAL_WRITE)
    init = QPInitAttr(qp_type=e.IBV_QPT_UD, scq=cq, rcq=cq, cap=QPCap(max_send_wr=4, max_recv_wr=4))
    tx, rx = QP(pd, init, QPAttr(port_num=1)), QP(pd, init, QPAttr(port_num=1))
    rx.post_recv(RecvWR(wr_id=7, num_sge=1, sg=[SGE(mr.buf + 1024, 1024, mr.lkey)]))
    ah = AH(pd, attr=AHAttr(port_num=1, is_global=1, gr=GlobalRoute(dgid=ctx.query_gid(1, 0), sgid_index=0)))
    mr.write(b"roce through a sniffer", 22, 0)
    wr = SendWR(wr_id=1, opcode=e.IBV_WR_SEND, num_sge=1, sg=[SGE(mr.buf, 22, mr.lkey)],
                send_flags=e.IBV_SEND_SIGNALED)
    wr.set_wr_ud(ah, rx.qp_num, QPAttr().qkey)
    tx.post_send(wr)
    deadline, wcs = time.monotonic() + 2, []
    while len(wcs) < 2 and time.monotonic() < deadline:
        n, got = cq.poll(4)
        wcs += got[:n]
    assert sorted(w.opcode for w in wcs) == [e.IBV_WC_SEND, e.IBV_WC_RECV], "the UD QPs' exchange did not happen"
    frames = [f for f, _ in sniffer.received(wait=0.3)]
    roce = [f for f in frames if len(f) > 42 and f[12:14] == b"\x08\x00" and f[23] == 17 and f[36:38] == b"\x12\xb7"]
    assert roce, f"the sniffer saw no RoCEv2 frame among {len(frames)}"
    assert any(b"roce through a sniffer" in f for f in roce), "the datagram's payload is not in what it saw"


@check
def rule_traps_arp(args):
    """A rule on ARP takes the ARP request for the port's address: the port's responder never answers. With
    DONT_TRAP the rule's QP gets it and the port answers as well."""
    a, b = App(), App()
    a.rule(EthSpec(dst_mac=MAC_A, dst_mac_mask="ff:ff:ff:ff:ff:ff"))  # where the port's answer goes
    broadcast_arp = dict(dst_mac="ff:ff:ff:ff:ff:ff", dst_mac_mask="ff:ff:ff:ff:ff:ff", ether_type=0x0806,
                         ether_type_mask=0xffff)  # requests: the port's answer comes back over the wire too
    trap = b.rule(EthSpec(**broadcast_arp))
    request = arp_request(MAC_A, "192.0.2.99", args.port_ip)
    a.send(request)
    got = b.received(at_least=1)
    assert [f for f, _ in got] == [request], f"the rule's QP received {got}"
    assert not a.received(wait=0.3), "the port answered an ARP request a rule had taken"
    trap.close()
    b.rule(EthSpec(**broadcast_arp), flags=e.IBV_FLOW_ATTR_FLAGS_DONT_TRAP)
    a.send(request)
    got = [f for f, _ in b.received(at_least=1)]
    assert got == [request], f"DONT_TRAP: the rule's QP got {[f.hex() for f in got]}"
    replies = [f for f, _ in a.received(at_least=1, wait=2)]
    assert len(replies) == 1, f"DONT_TRAP: the port did not answer ({len(replies)} replies)"
    reply = replies[0]
    assert reply[12:14] == b"\x08\x06" and reply[20:22] == b"\x00\x02", "not an ARP reply"
    assert reply[28:32] == socket.inet_aton(args.port_ip), "the reply is not for the port's address"


@check
def default_rules(args):
    """ALL_DEFAULT gets what the port's stack leaves (promiscuous), MC_DEFAULT its multicast part; neither
    gets what the stack uses (an ICMP echo request to the port, which it answers)."""
    a, all_default, mc_default = App(), App(), App()
    all_default.rule(flow_type=e.IBV_FLOW_ATTR_ALL_DEFAULT)
    mc_default.rule(flow_type=e.IBV_FLOW_ATTR_MC_DEFAULT)
    unicast = eth(args.port_mac, MAC_A, 0x88b6, b"nobody's" * 8)
    multicast = eth("01:00:5e:01:02:03", MAC_A, 0x88b6, b"anybody's" * 8)
    a.send(unicast)
    a.send(multicast)
    got = [f for f, _ in all_default.received(at_least=2)]
    assert got == [unicast, multicast], f"ALL_DEFAULT got {[f.hex() for f in got]}"
    got = [f for f, _ in mc_default.received(at_least=1)]
    assert got == [multicast], f"MC_DEFAULT got {[f.hex() for f in got]}"
    icmp = struct.pack("!BBHHH", 8, 0, 0, 1, 1) + b"ping" * 8
    icmp = icmp[:2] + struct.pack("!H", 0xffff - ones_sum(icmp)) + icmp[4:]
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(icmp), 1, 0, 64, 1, 0, socket.inet_aton("192.0.2.99"),
                     socket.inet_aton(args.port_ip))
    ip = ip[:10] + struct.pack("!H", 0xffff - ones_sum(ip)) + ip[12:]
    a.rule(EthSpec(dst_mac=MAC_A, dst_mac_mask="ff:ff:ff:ff:ff:ff", ether_type=0x0800, ether_type_mask=0xffff))
    a.send(eth(args.port_mac, MAC_A, 0x0800, ip + icmp))
    replies = [f for f, _ in a.received(at_least=1, wait=2)]
    assert len(replies) == 1 and replies[0][34] == 0, "the port did not answer the echo request"
    assert not all_default.received(wait=0.2), "ALL_DEFAULT got a frame the port's stack used"


def cap_net_raw(args):
    """Without CAP_NET_RAW: a raw packet QP is refused with EPERM (as the kernel refuses it); a UD QP is not."""
    ctx = Context(name="uroce0")
    pd, cq = PD(ctx), CQ(ctx, 16)
    try:
        QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RAW_PACKET, scq=cq, rcq=cq, cap=QPCap()))
        raise AssertionError("a raw packet QP was created without CAP_NET_RAW")
    except PyverbsRDMAError as ex:
        assert ex.error_code == errno.EPERM, f"errno {ex.error_code}, not EPERM"
    QP(pd, QPInitAttr(qp_type=e.IBV_QPT_UD, scq=cq, rcq=cq, cap=QPCap()))


def hold(args):
    """Rules of every kind and an RSS QP over two work queues, held until this process is killed."""
    from pyverbs.wq import WQ, WQAttr, WQInitAttr, RwqIndTable, RwqIndTableInitAttr, RxHashConf
    from pyverbs.qp import QPEx, QPInitAttrEx
    app = App()
    app.rule(EthSpec(dst_mac=args.port_mac, dst_mac_mask="ff:ff:ff:ff:ff:ff"))
    app.rule(flow_type=e.IBV_FLOW_ATTR_SNIFFER)
    app.rule(flow_type=e.IBV_FLOW_ATTR_ALL_DEFAULT)
    wqs = [WQ(app.ctx, WQInitAttr(wq_pd=app.pd, wq_cq=app.cq, wq_type=e.IBV_WQT_RQ, max_wr=16, max_sge=1))
           for _ in range(2)]
    for wq in wqs:
        wq.modify(WQAttr(attr_mask=e.IBV_WQ_ATTR_STATE, wq_state=e.IBV_WQS_RDY))
    table = RwqIndTable(app.ctx, RwqIndTableInitAttr(1, wqs))
    rss = QPEx(app.ctx, QPInitAttrEx(qp_type=e.IBV_QPT_RAW_PACKET, pd=app.pd, ind_table=table,
                                     comp_mask=e.IBV_QP_INIT_ATTR_PD | e.IBV_QP_INIT_ATTR_RX_HASH |
                                     e.IBV_QP_INIT_ATTR_IND_TABLE,
                                     hash_conf=RxHashConf(rx_hash_function=e.IBV_RX_HASH_FUNC_TOEPLITZ,
                                                          rx_hash_key_len=40, rx_hash_key=[0x6d] * 40,
                                                          rx_hash_fields_mask=e.IBV_RX_HASH_SRC_IPV4)))
    attr = FlowAttr(num_of_specs=1, port=1)
    attr.specs.append(EthSpec(ether_type=0x0800, ether_type_mask=0xffff))
    held = [Flow(rss, attr), table, wqs]  # noqa: F841 - kept alive until the kill
    print("holding", flush=True)
    time.sleep(600)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port-mac", required=True)
    ap.add_argument("--port-ip", required=True)
    ap.add_argument("--check")
    args = ap.parse_args()
    if args.check == "hold":
        hold(args)
        return 0
    checks = [cap_net_raw] if args.check == "cap_net_raw" else [c for c in CHECKS if args.check in (None, c.__name__)]
    failed = 0
    for c in checks:
        try:
            c(args)
            print(f"PASS {c.__name__}: {c.__doc__.split(chr(10))[0]}", flush=True)
        except Exception:  # noqa: BLE001 - any failure is the check's
            failed += 1
            print(f"FAIL {c.__name__}\n{traceback.format_exc()}", flush=True)
    print(f"{len(checks) - failed}/{len(checks)} checks passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
