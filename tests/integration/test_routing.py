#!/usr/bin/env python3
"""Routed RoCEv2: two uroced on two different IP networks, joined by a Linux router (the kernel's IPv4 and
IPv6 forwarding in a network namespace of its own), as RoCE hosts in two racks are joined by a layer-3 switch.

Topology, built here (root only), every name unique to this process and removed at the end:

    namespace A                    namespace R (the router)                  namespace B
    uroced 10.81.1.1/24  --veth--  10.81.1.254/24     10.81.2.254/24  --veth--  uroced 10.81.2.1/24
           fd81:1::1/64            fd81:1::fe/64      fd81:2::fe/64                    fd81:2::1/64
    --gateway 10.81.1.254, fd81:1::fe                        --gateway 10.81.2.254, fd81:2::fe

The daemons' veth ends carry no kernel address (ARP and IPv6 off there: uroced owns the address); R's ends
carry the router's addresses, with net.ipv4.ip_forward=1 and net.ipv6.conf.all.forwarding=1. The only way
from A to B is through R's kernel. Each case starts its daemons afresh (each with a capture of its own) and
stops them by PID before it reads the captures.

1. rping -V -C 20 -S 4096 (every ping's data verified) from A to 10.81.2.1, server in B. A's capture: the
   RoCE frames A sends to 10.81.2.1 leave with TTL 64 to R's MAC (the gateway's, found by ARP: A never asks
   ARP for 10.81.2.1); B's capture: the same frames arrive with TTL 63 from R's MAC on the other link, so
   they were routed (a bridge would keep the TTL and A's MAC). And the replies the other way, likewise.
2. The same over IPv6 (rping -a fd81:2::1): hop limit 64 at A, 63 at B; the gateway found by neighbour
   discovery, no Neighbor Solicitation for fd81:2::1 from A.
3. ib_send_bw -R (perftest, rdma_cm) from A to 10.81.2.1: both sides exit 0, the client prints its
   bandwidth table line (65536 bytes, 1000 iterations, a nonzero average).
4. Negative: (a) rping from A to 10.81.3.7, a network R has no route to: A sends the CM REQ to the gateway
   (capture: every frame to R's MAC, TTL 64), R answers ICMP unreachable; rping must not connect. As on
   Linux, whose IB CM ignores ICMP, the REQ is retried (RDMA_CM_EVENT_UNREACHABLE -110 comes after its 15
   retries, ~100 s): the client is stopped after NEGATIVE_WATCH seconds, still waiting or failed.
   (b) A fourth uroced in a namespace C (a veth pair of its own, nothing else on it) with --ip 10.81.4.1/24
   --ip fd81:4::1/64 and no --gateway: rping to 10.81.9.9 and to fd81:9::9 must print
   RDMA_CM_EVENT_ADDR_ERROR, error -101 (ENETUNREACH, as on Linux) within 2 s, having asked nobody (no ARP
   or Neighbor Solicitation on C's link), not -110 after a resolution timeout.
5. Congestion notification: R marks A's RoCE packets ECN Congestion Experienced (nftables, `ip ecn set ce` in
   its forward chain, as an ECN switch under load marks them); rping -V A->B still passes, and B answers with
   CNPs (opcode 0x81) to A's QP (the QP B's ACKs go to): TOS 0xC2 (DSCP 48, ECT(0)), BECN, PSN 0, fewer
   than the marked packets (paced per QP), well-formed to Wireshark, all received at A through R; A's RC
   data leaves ECT(0) (DCQCN on). With --cnp off on B: marked packets, no CNP.

6. IPv6 router discovery instead of a configured gateway: R runs radvd (Debian's, unmodified) advertising
   itself on both links with fd81:1::/64 and fd81:2::/64 on-link; A and B are started with their IPv6
   subnets but no IPv6 --gateway. Each must solicit (a Router Solicitation from its link-local address to
   ff02::2 in its capture), take R's advertisement (uroce stats: rd_advertisements_received), and then
   rping -V -a fd81:2::1 must pass with the same routed frames as case 2: hop limit 64 at A to R's MAC, 63
   at B from R's other MAC, and no Neighbor Solicitation for the far side; the next hop is R's link-local
   address, learned with its MAC from the advertisement.

7. SLAAC: R's radvd marks fd81:1::/64 autonomous on A's link (valid lifetime 8 s); A has no IPv6 --ip. A
   must form fd81:1:: + the EUI-64 of its MAC (its GID table shows it, "(SLAAC)"), B's rping -V must reach
   it through R, and it must leave A's table once radvd is killed and its lifetime is over.

Prints PASS or FAIL for each case; exits 0 only if every case passed (and prints SKIP and exits 0 when not
root or when rping, ib_send_bw or tshark is missing, as the other veth tests do).

  test_routing.py --uroced build/.../emulator/uroced --uroce-run build/.../verbs_shim/uroce-run
                  [--case N]... [--workdir DIR (kept: captures and daemon logs)]
"""
import argparse
import contextlib
import ipaddress
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "verbs_shim"))

from daemon_harness import Daemon, daemon_side_link, is_root, sh, tshark  # noqa: E402
import test_rdmacm  # noqa: E402
from daemon_harness import stats  # noqa: E402

TAG = f"u{os.getpid()}"
PINGS = 20
PING_SIZE = 4096
NEGATIVE_WATCH = 6      # s: how long the rping into an unroutable network is watched (4a)
ENETUNREACH_BOUND = 2   # s: ADDR_ERROR -101 must come before rping's own 2 s resolution timeout (4b)

# The two routed sides: (namespace key, IPv4, IPv6, IPv4 gateway, IPv6 gateway).
SIDES = {"A": ("10.81.1.1", "fd81:1::1", "10.81.1.254", "fd81:1::fe"),
         "B": ("10.81.2.1", "fd81:2::1", "10.81.2.254", "fd81:2::fe")}
PREFIX = {4: 24, 6: 64}
FAMILY = {4: ("ip", "ip.ttl"), 6: ("ipv6", "ipv6.hlim")}
NOT_ICMP = "!icmp && !icmpv6"  # an ICMP error quotes the IP and UDP headers of the frame it is about


def link(here, there):
    """The name of namespace `here`'s end of the veth to namespace `there`."""
    return f"{TAG}{here}{there}".lower()


def mac(ns, ifname):
    return json.loads(sh("ip", "-n", ns, "-j", "link", "show", "dev", ifname).stdout)[0]["address"]


@contextlib.contextmanager
def routed_topology():
    """Namespaces A, R, B (and C) as in the docstring; yields {key: namespace name}."""
    ns = {k: f"{TAG}-{k}" for k in "ARBC"}
    try:
        for n in ns.values():
            sh("ip", "netns", "add", n)
        r = ns["R"]
        sh("ip", "netns", "exec", r, "sysctl", "-qw", "net.ipv4.ip_forward=1")
        sh("ip", "netns", "exec", r, "sysctl", "-qw", "net.ipv6.conf.all.forwarding=1")
        sh("ip", "-n", r, "link", "set", "lo", "up")
        for side, (_, _, gw4, gw6) in SIDES.items():
            sh("ip", "link", "add", link(side, "R"), "netns", ns[side], "type", "veth",
               "peer", "name", link("R", side), "netns", r)
            daemon_side_link(ns[side], link(side, "R"))
            router_end = link("R", side)
            sh("ip", "-n", r, "link", "set", router_end, "mtu", "4200")
            sh("ip", "-n", r, "addr", "add", f"{gw4}/{PREFIX[4]}", "dev", router_end)
            # nodad: the gateway must answer neighbour discovery at once, not after duplicate detection.
            sh("ip", "-n", r, "addr", "add", f"{gw6}/{PREFIX[6]}", "dev", router_end, "nodad")
            sh("ip", "-n", r, "link", "set", router_end, "up")
        # C: a veth pair of its own, both ends in C; nothing answers there.
        sh("ip", "link", "add", link("C", "X"), "netns", ns["C"], "type", "veth", "peer", "name", link("X", "C"),
           "netns", ns["C"])
        daemon_side_link(ns["C"], link("C", "X"))
        daemon_side_link(ns["C"], link("X", "C"))
        yield ns
    finally:
        for n in ns.values():
            sh("ip", "netns", "del", n, check=False)


class Routing:
    def __init__(self, args, workdir, ns):
        self.uroced = args.uroced
        self.uroce_run = args.uroce_run
        self.work = workdir
        self.ns = ns
        self.mac = {"A": mac(ns["A"], link("A", "R")), "B": mac(ns["B"], link("B", "R")),
                    "RA": mac(ns["R"], link("R", "A")), "RB": mac(ns["R"], link("R", "B"))}

    def daemon(self, side, case, addresses, gateways, iface, extra=()):
        name = f"{side.lower()}{case}"
        capture = os.path.join(self.work, name + ".pcap")
        args = ["--port", f"net_af_packet0,iface={iface}", "--capture", capture, *extra]
        for a in addresses:
            args += ["--ip", a]
        for g in gateways:
            args += ["--gateway", g]
        return Daemon(self.uroced, self.work, name, args, netns=self.ns[side]), capture

    def routed_daemon(self, side, case, extra=()):
        v4, v6, gw4, gw6 = SIDES[side]
        return self.daemon(side, case, [f"{v4}/{PREFIX[4]}", f"{v6}/{PREFIX[6]}"], [gw4, gw6], link(side, "R"), extra)

    @contextlib.contextmanager
    def daemons(self, started):
        """Stops the daemons of `started` ((daemon, capture) pairs, filled by the caller) by PID at the end,
        all signalled first, then each waited for; a daemon that did not exit 0 fails the case."""
        try:
            yield started
        finally:
            for d, _ in started:
                d.request_stop()
            codes = [(d, d.stop()) for d, _ in started]
        for d, rc in codes:
            assert rc == 0, f"uroced exited with {rc}:\n{d.read_log()[-3000:]}"

    # --- capture checks ----------------------------------------------------------------------------------

    def roce(self, capture, family, src, dst):
        """(hop count, eth.src, eth.dst) of every RoCEv2 frame from src to dst in the capture."""
        ip, hops = FAMILY[family]
        rows = tshark("-r", capture, "-Y", f"udp.port == 4791 && {ip}.src == {src} && {ip}.dst == {dst} && {NOT_ICMP}",
                      "-T", "fields", "-e", hops, "-e", "eth.src", "-e", "eth.dst")
        return [tuple(r.split("\t")) for r in rows]

    def check_direction(self, family, caps, frm, to, minimum):
        """Every RoCE frame from side `frm` to side `to`: sent (frm's capture) with hop count 64 to the
        gateway's MAC, received (to's capture) with 63 from the router's MAC on to's link."""
        src, dst = SIDES[frm][0 if family == 4 else 1], SIDES[to][0 if family == 4 else 1]
        sent = self.roce(caps[frm], family, src, dst)
        got = self.roce(caps[to], family, src, dst)
        what = f"IPv{family} RoCE {src} -> {dst}"
        assert len(got) >= minimum, f"{what}: {len(got)} frames at {to} (fewer than {minimum})"
        assert len(sent) >= len(got), f"{what}: {len(sent)} frames sent by {frm}, {len(got)} received by {to}"
        want_sent = ("64", self.mac[frm], self.mac["R" + frm])
        want_got = ("63", self.mac["R" + to], self.mac[to])
        bad_sent = [r for r in sent if r != want_sent]
        bad_got = [r for r in got if r != want_got]
        assert not bad_sent, (f"{what}: {len(bad_sent)} of {len(sent)} frames leave {frm} not as "
                              f"(hops, eth.src, eth.dst) = {want_sent}, e.g. {bad_sent[:3]}")
        assert not bad_got, (f"{what}: {len(bad_got)} of {len(got)} frames reach {to} not as "
                             f"(hops, eth.src, eth.dst) = {want_got} (routed), e.g. {bad_got[:3]}")
        return len(sent), len(got)

    def asked_for(self, capture, family, address):
        """The ARP requests / Neighbor Solicitations in the capture that ask for `address`."""
        if family == 4:
            return tshark("-r", capture, "-Y", f"arp.opcode == 1 && arp.dst.proto_ipv4 == {address}")
        return tshark("-r", capture, "-Y", f"icmpv6.type == 135 && icmpv6.nd.ns.target_address == {address}")

    def check_routed(self, family, caps):
        i = 0 if family == 4 else 1
        a_to_b = self.check_direction(family, caps, "A", "B", PINGS)
        b_to_a = self.check_direction(family, caps, "B", "A", PINGS)
        # A, which spoke first, had to ask for its gateway's MAC (B may have learnt R's from R's own query).
        assert self.asked_for(caps["A"], family, SIDES["A"][2 + i]), \
            f"A never asked its link for its gateway {SIDES['A'][2 + i]}"
        for side, other in (("A", "B"), ("B", "A")):
            asked = self.asked_for(caps[side], family, SIDES[other][i])
            assert not asked, f"{side} asked its link for the off-link {SIDES[other][i]}: {asked[:3]}"
        return (f"A->B {a_to_b[0]} frames hops 64 at A, {a_to_b[1]} hops 63 from R's MAC at B; "
                f"B->A {b_to_a[0]}/{b_to_a[1]} likewise; gateways resolved, no neighbour query for the far side")

    # --- the cases ---------------------------------------------------------------------------------------

    def rping_across(self, case, family):
        started = []
        with self.daemons(started):
            started += [self.routed_daemon("A", case), self.routed_daemon("B", case)]
            (a, _), (b, _) = started
            server_ip = SIDES["B"][0 if family == 4 else 1]
            test_rdmacm.rping(self.uroce_run, b.socket, a.socket, server_ip, None, PINGS, PING_SIZE)
        caps = {"A": started[0][1], "B": started[1][1]}
        return f"{PINGS} pings of {PING_SIZE} B verified; " + self.check_routed(family, caps)

    def case1(self):
        return self.rping_across(1, 4)

    def case2(self):
        return self.rping_across(2, 6)

    def case3(self):
        started = []
        with self.daemons(started):
            started += [self.routed_daemon("A", 3), self.routed_daemon("B", 3)]
            (a, _), (b, _) = started
            common = ["ib_send_bw", "-R", "-d", "uroce0", "-p", test_rdmacm.port(), "-s", "65536", "-n", "1000"]
            client_out, _ = test_rdmacm.server_client(
                self.uroce_run, b.socket, a.socket, common, [*common, SIDES["B"][0]], "ib_send_bw -R",
                retry_on=("Couldn't", "Unable", "REJECTED", "Failed"))
        # " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"
        line = re.search(r"^\s*65536\s+1000\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$", client_out, re.M)
        assert line, f"ib_send_bw -R printed no bandwidth line for 65536 B x 1000:\n{client_out}"
        assert float(line.group(2)) > 0, f"ib_send_bw -R: average bandwidth 0:\n{client_out}"
        return f"both exited 0; {line.group(0).strip()!r}"

    def case5(self):
        """R marks A's RoCE traffic Congestion Experienced, as an ECN switch under load: B answers with CNPs
        to A's QP; with --cnp off, with none."""
        r = self.ns["R"]
        nft = ["ip", "netns", "exec", r, "nft"]
        sh(*nft, "add", "table", "inet", "uroce_ce")
        sh(*nft, "add", "chain", "inet", "uroce_ce", "marker", "{ type filter hook forward priority 0 ; }")
        sh(*nft, "add", "rule", "inet", "uroce_ce", "marker", "ip", "saddr", SIDES["A"][0], "udp", "dport", "4791",
           "ip", "ecn", "set", "ce")
        results = []
        try:
            for cnp in ("on", "off"):
                started = []
                with self.daemons(started):
                    started += [self.routed_daemon("A", f"5{cnp}"), self.routed_daemon("B", f"5{cnp}", ["--cnp", cnp])]
                    (a, _), (b, _) = started
                    test_rdmacm.rping(self.uroce_run, b.socket, a.socket, SIDES["B"][0], None, PINGS, PING_SIZE)
                results.append(self.check_cnps(started[0][1], started[1][1], cnp == "on"))
        finally:
            sh(*nft, "delete", "table", "inet", "uroce_ce", check=False)
        return "; ".join(results)

    def check_cnps(self, cap_a, cap_b, expected):
        a, b = SIDES["A"][0], SIDES["B"][0]
        marked = tshark("-r", cap_b, "-Y", f"ip.src == {a} && udp.port == 4791 && ip.dsfield.ecn == 3 && {NOT_ICMP}")
        assert marked, "no CE-marked RoCE frame from A reached B: the router did not mark"
        # A (DCQCN on by default) sends its RC data ECN-capable, ECT(0); its ACKs and the CM's MADs Not-ECT.
        data = f"ip.src == {a} && udp.port == 4791 && infiniband.bth.opcode <= 16 && {NOT_ICMP}"
        not_ect = tshark("-r", cap_a, "-Y", f"{data} && ip.dsfield.ecn != 2")
        assert not not_ect and tshark("-r", cap_a, "-Y", data), f"A's RC data not all ECT(0): {not_ect[:3]}"
        fields = ["-T", "fields", "-e", "ip.dsfield", "-e", "infiniband.bth.destqp", "-e", "infiniband.bth.psn",
                  "-e", "ip.ttl"]
        cnp = f"ip.src == {b} && ip.dst == {a} && infiniband.bth.opcode == 129"
        sent = [r.split("\t") for r in tshark("-r", cap_b, "-Y", cnp, *fields)]
        got = [r.split("\t") for r in tshark("-r", cap_a, "-Y", cnp, *fields)]
        if not expected:
            assert not sent, f"--cnp off: B sent {len(sent)} CNPs"
            return f"--cnp off: {len(marked)} CE-marked frames at B, no CNP"
        assert sent, f"{len(marked)} CE-marked frames reached B, and B sent no CNP"
        # The QP the CNPs must name: A's, where B's ACKs go.
        acks = {q for q in tshark("-r", cap_b, "-Y", f"ip.src == {b} && ip.dst == {a} && infiniband.bth.opcode == 17",
                                  "-T", "fields", "-e", "infiniband.bth.destqp")}
        bad = [r for r in sent if r[0] != "0xc2" or r[1] not in acks or r[2] != "0" or r[3] != "64"]
        assert not bad, (f"CNPs not as (TOS 0xc2, BECN, A's QP {sorted(acks)}, PSN 0, TTL 64): {bad[:3]}")
        # Wireshark 4.0 has no field for BTH byte 4: BECN set and nothing else there is frame byte 46
        # (Ethernet 14 + IPv4 20 + UDP 8 + BTH 4).
        becn = tshark("-r", cap_b, "-Y", f"({cnp}) && frame[46:1] == 40")
        assert len(becn) == len(sent), f"{len(sent) - len(becn)} of {len(sent)} CNPs without BECN (or FECN set)"
        assert len(got) == len(sent) and all(r[3] == "63" for r in got), \
            f"B sent {len(sent)} CNPs, A received {len(got)} (TTL 63 through R): {got[:3]}"
        malformed = tshark("-r", cap_b, "-Y", f"({cnp}) && (_ws.malformed || _ws.expert.severity >= warning)")
        assert not malformed, f"Wireshark finds the CNPs malformed: {malformed[:3]}"
        assert len(sent) < len(marked), f"{len(sent)} CNPs for {len(marked)} marked frames: not paced"
        return (f"{len(marked)} CE-marked frames at B: {len(sent)} CNPs (TOS 0xc2, BECN, PSN 0, to A's QP "
                f"{sorted(acks)}), all {len(got)} at A through R")

    def start_radvd(self, name, intervals, prefix_options):
        """radvd (Debian's) in R, advertising R on both links, each side's /64 with `prefix_options(side)`,
        every `intervals` (min, max) seconds; started once R's link-local addresses are usable (radvd wants
        their duplicate detection over) and given a second for its first advertisements."""
        conf = os.path.join(self.work, f"{name}.conf")
        with open(conf, "w") as f:
            for side in SIDES:
                prefix = SIDES[side][1].rsplit(":", 2)[0] + "::/64"  # fd81:1::1 -> fd81:1::/64
                f.write(f"interface {link('R', side)} {{\n  AdvSendAdvert on;\n"
                        f"  MinRtrAdvInterval {intervals[0]};\n  MaxRtrAdvInterval {intervals[1]};\n"
                        f"  AdvDefaultLifetime 1800;\n"
                        f"  prefix {prefix} {{ AdvOnLink on; {prefix_options(side)} }};\n}};\n")
        r = self.ns["R"]
        deadline = time.time() + 10
        while sh("ip", "-n", r, "-6", "addr", "show", "tentative").stdout.strip() and time.time() < deadline:
            time.sleep(0.2)
        log = os.path.join(self.work, f"{name}.log")
        radvd = subprocess.Popen(["ip", "netns", "exec", r, "radvd", "--nodaemon", "--config", conf,
                                  "--pidfile", os.path.join(self.work, f"{name}.pid"), "--logmethod", "stderr"],
                                 stdout=subprocess.DEVNULL, stderr=open(log, "w"))
        time.sleep(1)  # its first advertisements go out before the daemons exist
        if radvd.poll() is not None:
            raise AssertionError(f"radvd exited {radvd.returncode}: {open(log).read()}")
        return radvd

    def case6(self):
        # Long periodic intervals: what A and B learn comes from answering their solicitations (or radvd's
        # first advertisements at its start), not from a steady stream.
        radvd = self.start_radvd("radvd", (200, 600), lambda side: "AdvAutonomous off;")
        try:
            started = []
            learned = {}
            with self.daemons(started):
                for side in SIDES:
                    v4, v6, gw4, _ = SIDES[side]
                    started.append(self.daemon(side, 6, [f"{v4}/{PREFIX[4]}", f"{v6}/{PREFIX[6]}"], [gw4],
                                               link(side, "R")))
                uroce = os.path.join(os.path.dirname(self.uroced), "..", "pcap_tools", "uroce")
                for (d, _), side in zip(started, SIDES):
                    deadline = time.time() + 10
                    while time.time() < deadline:
                        net = stats(uroce, d.socket)["net"]
                        if net["rd_advertisements_received"] >= 1:
                            break
                        time.sleep(0.2)
                    learned[side] = net
                    assert net["rd_advertisements_received"] >= 1, f"{side} took no Router Advertisement: {net}"
                (a, _), (b, _) = started
                test_rdmacm.rping(self.uroce_run, b.socket, a.socket, SIDES["B"][1], None, PINGS, PING_SIZE)
        finally:
            radvd.terminate()
            radvd.wait(timeout=10)
        caps = {"A": started[0][1], "B": started[1][1]}
        for side in SIDES:
            rs = tshark("-r", caps[side], "-Y", "icmpv6.type == 133 && ipv6.dst == ff02::2 && ipv6.src == fe80::/10")
            assert rs, f"{side} sent no Router Solicitation from its link-local address to ff02::2"
            ra = tshark("-r", caps[side], "-Y", f"icmpv6.type == 134 && eth.src == {self.mac['R' + side]}")
            assert ra, f"{side}'s capture has no Router Advertisement from R"
        return (f"RS sent and RA taken on both sides (A: {learned['A']['rd_solicitations_sent']} RS, "
                f"{learned['A']['rd_advertisements_received']} RA); {PINGS} pings of {PING_SIZE} B verified; "
                + self.check_routed_v6_without_gateway_query(caps))

    def check_routed_v6_without_gateway_query(self, caps):
        a_to_b = self.check_direction(6, caps, "A", "B", PINGS)
        b_to_a = self.check_direction(6, caps, "B", "A", PINGS)
        for side, other in (("A", "B"), ("B", "A")):
            asked = self.asked_for(caps[side], 6, SIDES[other][1])
            assert not asked, f"{side} asked its link for the off-link {SIDES[other][1]}: {asked[:3]}"
        return (f"A->B {a_to_b[0]} frames hops 64 at A, {a_to_b[1]} hops 63 from R's MAC at B; "
                f"B->A {b_to_a[0]}/{b_to_a[1]} likewise; no neighbour query for the far side")

    def case7(self):
        """SLAAC: R's radvd marks fd81:1::/64 autonomous on A's link, with short lifetimes (valid 8 s,
        preferred 4 s, sent every 3-4 s). A has no IPv6 --ip: it must form fd81:1:: + the EUI-64 of its MAC
        and show it in its GID table (uroce address: "(SLAAC)"), B (fd81:2::1, no IPv6 gateway) must rping -V
        it through R, and once radvd is killed (no goodbye advertisement) the address must leave A's table
        when its valid lifetime is over."""
        m = [int(x, 16) for x in self.mac["A"].split(":")]
        eui64 = [m[0] ^ 2, m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]]
        formed = str(ipaddress.IPv6Address(bytes([0xfd, 0x81, 0, 1, 0, 0, 0, 0] + eui64)))
        radvd = self.start_radvd("radvd7", (3, 4), lambda side: "AdvAutonomous on; AdvValidLifetime 8; "
                                 "AdvPreferredLifetime 4;" if side == "A" else "AdvAutonomous off;")
        uroce = os.path.join(os.path.dirname(self.uroced), "..", "pcap_tools", "uroce")

        def table(d):
            out = subprocess.run([uroce, "address", "--socket", d.socket], capture_output=True, text=True,
                                 timeout=30)
            assert out.returncode == 0, out.stderr
            return out.stdout

        try:
            started = []
            with self.daemons(started):
                v4a, _, gw4a, _ = SIDES["A"]
                v4b, v6b, gw4b, _ = SIDES["B"]
                started.append(self.daemon("A", 7, [f"{v4a}/{PREFIX[4]}"], [gw4a], link("A", "R")))
                started.append(self.daemon("B", 7, [f"{v4b}/{PREFIX[4]}", f"{v6b}/{PREFIX[6]}"], [gw4b],
                                           link("B", "R")))
                (a, _), (b, _) = started
                deadline = time.time() + 15
                while f"{formed}/64" not in table(a) and time.time() < deadline:
                    time.sleep(0.2)
                # B reaches fd81:1::/64 through the router its advertisement names: wait for it.
                while stats(uroce, b.socket)["net"]["rd_advertisements_received"] == 0 and time.time() < deadline:
                    time.sleep(0.2)
                shown = table(a)
                line = next((x for x in shown.splitlines() if f"  {formed}/64  " in x), None)
                assert line and line.endswith("(SLAAC)"), f"A formed no {formed}/64:\n{shown}"
                test_rdmacm.rping(self.uroce_run, a.socket, b.socket, formed, None, PINGS, PING_SIZE)
                radvd.kill()
                radvd.wait(timeout=10)
                gone_at = time.time()
                while formed in table(a) and time.time() < gone_at + 15:
                    time.sleep(0.2)
                assert formed not in table(a), f"{formed} outlived its valid lifetime:\n{table(a)}"
                gone_after = time.time() - gone_at
                net = stats(uroce, a.socket)["net"]
                assert net["slaac_addresses_formed"] >= 1, net
        finally:
            if radvd.poll() is None:
                radvd.terminate()
                radvd.wait(timeout=10)
        return (f"A formed {formed}/64 (GID {line.split()[1]}), B pinged it {PINGS} times with -V through R, "
                f"gone {gone_after:.1f} s after radvd was killed")

    def case4(self):
        started = []
        with self.daemons(started):
            started += [self.routed_daemon("A", 4),
                        self.daemon("C", 4, ["10.81.4.1/24", "fd81:4::1/64"], [], link("C", "X"))]
            (a, cap_a), (c, cap_c) = started
            # (a) Into a network the router has no route to.
            start = time.time()
            try:
                out = subprocess.run([self.uroce_run, "--socket", a.socket, "rping", "-c", "-a", "10.81.3.7",
                                      "-p", test_rdmacm.port(), "-C", "1"], capture_output=True, text=True,
                                     timeout=NEGATIVE_WATCH)
                elapsed, text, rc = time.time() - start, out.stdout + out.stderr, out.returncode
            except subprocess.TimeoutExpired as e:  # still retrying its REQ; run() has killed it (by PID:
                # uroce-run execs rping)
                elapsed, rc = time.time() - start, None
                text = "".join(x.decode(errors="replace") if isinstance(x, bytes) else x
                               for x in (e.stdout, e.stderr) if x)
            # (b) No gateway: ENETUNREACH at once, for each family.
            unreach = []
            for far in ("10.81.9.9", "fd81:9::9"):
                t0 = time.time()
                o = subprocess.run([self.uroce_run, "--socket", c.socket, "rping", "-c", "-a", far,
                                    "-p", test_rdmacm.port(), "-C", "1"], capture_output=True, text=True,
                                   timeout=test_rdmacm.TIMEOUT)
                unreach.append((far, time.time() - t0, o.returncode, o.stdout + o.stderr))
        # A's REQ went to the gateway's MAC; what R did about it (ICMP unreachable, or nothing) is evidence.
        req = tshark("-r", cap_a, "-Y", f"udp.port == 4791 && ip.dst == 10.81.3.7 && {NOT_ICMP}", "-T", "fields",
                     "-e", "eth.dst", "-e", "ip.ttl")
        icmp = tshark("-r", cap_a, "-Y", "icmp.type == 3 && ip.src == 10.81.1.254", "-T", "fields", "-e", "icmp.code")
        evidence = (f"A sent {len(req)} RoCE frames to 10.81.3.7 (first: {req[:1]}); "
                    f"R sent {len(icmp)} ICMP unreachable (codes {sorted(set(icmp))})")
        failures = []
        if rc == 0:
            failures.append(f"(a) rping to 10.81.3.7 succeeded?\n{text}")
        if not icmp:
            failures.append(f"(a) R sent no ICMP unreachable to A: the REQ never reached the router? {evidence}")
        if not req or any(r.split("\t") != [self.mac["RA"], "64"] for r in req):
            failures.append(f"(a) the frames to 10.81.3.7 did not all go to the gateway's MAC {self.mac['RA']} with TTL 64: "
                            f"{req[:3]}")
        event = (re.findall(r"RDMA_CM_EVENT_\w+[^\n]*", text) or ["no event printed"])[-1]
        results = [f"(a) rping to 10.81.3.7: rc {rc} after {elapsed:.1f} s, {event!r}; {evidence}"]
        for far, t, code, text_b in unreach:
            if code == 0 or "RDMA_CM_EVENT_ADDR_ERROR, error -101" not in text_b:
                failures.append(f"(b) rping to {far} without a gateway: rc {code}, no 'ADDR_ERROR, error -101':\n"
                                f"{text_b}")
            elif t >= ENETUNREACH_BOUND:
                failures.append(f"(b) rping to {far}: ADDR_ERROR -101 only after {t:.1f} s")
            results.append(f"(b) rping to {far} without a gateway: ADDR_ERROR -101 after {t:.2f} s")
            family = 4 if "." in far else 6
            asked = self.asked_for(cap_c, family, far)
            if asked:
                failures.append(f"(b) C asked its link for the off-link {far}: {asked[:3]}")
        assert not failures, "\n  ".join(failures + ["(what was seen: " + "; ".join(results) + ")"])
        return "; ".join(results)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--uroced", required=True)
    ap.add_argument("--uroce-run", required=True)
    ap.add_argument("--case", type=int, action="append", choices=[1, 2, 3, 4, 5, 6, 7])
    ap.add_argument("--workdir", help="keep the captures and daemon logs here (default: a temporary directory)")
    a = ap.parse_args()
    if not is_root():
        print("SKIP: routed RoCEv2 needs root (network namespaces, veth pairs, a kernel router)")
        return 0
    missing = [p for p in ("rping", "ib_send_bw", "tshark", "radvd") if shutil.which(p) is None]
    if missing:
        print("SKIP: not installed: " + " ".join(missing))
        return 0
    names = {1: "rping -V over IPv4 through the router", 2: "rping -V over IPv6 through the router",
             3: "ib_send_bw -R through the router", 4: "unroutable destinations",
             5: "a router marking CE: CNPs back to the sender",
             6: "IPv6 router discovery (radvd) instead of a gateway",
             7: "SLAAC: an address formed under radvd's autonomous prefix, used, and let lapse"}
    failures = 0
    t_all = time.time()
    with contextlib.ExitStack() as stack:
        if a.workdir:
            os.makedirs(a.workdir, exist_ok=True)
            work = a.workdir
        else:
            work = stack.enter_context(tempfile.TemporaryDirectory(prefix="uroce-routing-"))
        ns = stack.enter_context(routed_topology())
        t = Routing(a, work, ns)
        for n in a.case or [1, 2, 3, 4, 5, 6, 7]:
            t0 = time.time()
            try:
                result = getattr(t, f"case{n}")()
                print(f"PASS {n}. {names[n]} ({time.time() - t0:.1f} s): {result}", flush=True)
            except Exception as e:  # noqa: BLE001 - every case reports, the run goes on
                failures += 1
                print(f"FAIL {n}. {names[n]} ({time.time() - t0:.1f} s): {e}", flush=True)
    print(f"routing tests: {'all passed' if failures == 0 else f'{failures} failed'} ({time.time() - t_all:.1f} s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
