#!/usr/bin/env python3
"""RoCEv2 over IPv6 between two uroced on a veth pair in two network namespaces (issue 4: IPv6 neighbour
discovery). Each daemon has an IPv4 address (GID 0), a configured IPv6 address (GID 1) and its fe80::
link-local address (GID 2, made from its MAC). Unmodified ibv_rc_pingpong runs through uroce-run over GID 1
and over GID 2; neither daemon knows the other's MAC beforehand, so the traffic only flows if neighbour
discovery works both ways (the kernel side of each veth has IPv6 off and cannot help). Also: the same
over one daemon's loopback port, where no neighbour discovery is needed. The capture of one
daemon must show Neighbor Solicitations and Advertisements that tshark finds well-formed, and RoCE frames
that are all IPv6 with valid ICRCs (uroce dissect). And the kernel's own `ping -6` gets its answers.
rdma_cm over IPv6: unmodified rping and ucmatose connect by IPv6 address (configured, link-local, ::1), and
the CM's MADs travel over IPv6.

Usage: test_ipv6.py UROCED UROCE_RUN UROCE
"""
import os
import re
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "verbs_shim"))

from daemon_harness import Daemon, DaemonTestCase, is_root, stats, tshark, two_namespaces_with_veth  # noqa: E402
from server_client import run_server_client  # noqa: E402
import test_rdmacm  # noqa: E402

UROCED = UROCE_RUN = UROCE = None
PINGPONG_RESULT = re.compile(r"\d+ bytes in [\d.]+ seconds")
ADDRESSES = (("10.77.6.1", "fd00:75::1"), ("10.77.6.2", "fd00:75::2"))


class Ipv6Base(DaemonTestCase):
    def setUp(self):
        super().setUp()
        self.port = 19000 + os.getpid() % 5000

    def pingpong(self, a, b, gid_index, extra=(), program="ibv_rc_pingpong"):
        self.port += 1
        command = [program, "-p", str(self.port), "-d", "uroce0", "-g", str(gid_index), "-n", "200",
                   *extra]
        r = run_server_client(UROCE_RUN, a.socket, b.socket, command, " ".join(command), 60, retry_pause=0.1)
        r.assert_both_exited_0()
        self.assertRegex(r.client.stdout, PINGPONG_RESULT)
        self.assertRegex(r.server_out, PINGPONG_RESULT)
        # Each side printed the GID it uses: the IPv6 one it was asked for.
        for out in (r.client.stdout, r.server_out):
            gid = re.search(r"local address: .* GID (\S+)", out)
            self.assertIsNotNone(gid, out)
            self.assertFalse(gid.group(1).startswith("::ffff:"), out)
        return r

    def gids(self, socket):
        out = subprocess.run([UROCE_RUN, "--socket", socket, "ibv_devinfo", "-v"], capture_output=True, text=True,
                             timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        return re.findall(r"GID\[\s*(\d+)\]:\s+([^\s,]+)", out.stdout)


class Ipv6Loopback(Ipv6Base):
    def test_rc_pingpong_over_ipv6_on_the_loopback(self):
        """Two QPs of one port over its IPv6 GID: looped back, no neighbour discovery, no link-local GID."""
        a = Daemon(UROCED, self.dir.name, "lo", ["--ip", "192.0.2.1", "--ip", "fd00:75::9"])
        self.daemons.append(a)
        self.assertEqual([g for _, g in self.gids(a.socket)], ["::ffff:192.0.2.1", "fd00:75::9"])
        self.pingpong(a, a, 1)
        s = stats(UROCE, a.socket)
        self.assertEqual(s["engine"]["tx_no_route"], 0, s)
        self.assertEqual(s["net"]["nd_solicitations_sent"], 0, s)
        self.assertGreater(s["net"]["rx_roce"], 400, s)
        self.assertEqual(a.stop(), 0, a.read_log())

    def test_rdma_cm_over_ipv6_on_the_loopback(self):
        """rdma_cm by IPv6 address on one port: rping (RDMA READ and WRITE of every ping, checked by -V) to
        its configured address; ucmatose, whose server listens on the wildcard, which is :: (it takes IPv4
        connections too, as on Linux), reached at ::1 and at the IPv4 address; a REQ nobody listens for is
        rejected; rdma_server bound to :: serves rdma_client by IPv6 and by IPv4 address."""
        a = Daemon(UROCED, self.dir.name, "lo", ["--ip", "192.0.2.1", "--ip", "fd00:75::9"])
        self.daemons.append(a)
        test_rdmacm.rping(UROCE_RUN, a.socket, a.socket, "fd00:75::9", None, 20, 4096)
        test_rdmacm.ucmatose(UROCE_RUN, a.socket, a.socket, "::1")
        test_rdmacm.ucmatose(UROCE_RUN, a.socket, a.socket, "192.0.2.1")
        test_rdmacm.rping_nobody_listens(UROCE_RUN, a.socket, "fd00:75::9")
        # The synchronous API; a server bound to :: takes an IPv6 and an IPv4 client.
        test_rdmacm.rdma_server_client(UROCE_RUN, a.socket, a.socket, "fd00:75::9", bind="::")
        test_rdmacm.rdma_server_client(UROCE_RUN, a.socket, a.socket, "192.0.2.1", bind="::")
        cm = stats(UROCE, a.socket)["cm"]
        self.assertGreaterEqual(cm["rej_sent"], 1, cm)  # the REQ nobody listened for
        self.assertEqual(cm["rx_malformed"] + cm["timeouts"], 0, cm)

    def test_rdma_cm_refuses_a_family_the_port_lacks(self):
        """A port with no IPv6 address cannot resolve an IPv6 destination: rping fails with an address error,
        and the daemon stays up."""
        a = Daemon(UROCED, self.dir.name, "lo", ["--ip", "192.0.2.1"])
        self.daemons.append(a)
        out = subprocess.run([UROCE_RUN, "--socket", a.socket, "rping", "-c", "-a", "fd00:75::9", "-C", "1"],
                             capture_output=True, text=True, timeout=60)
        self.assertNotEqual(out.returncode, 0, out.stdout + out.stderr)
        self.assertIn("rdma_resolve_addr", out.stdout + out.stderr)
        test_rdmacm.rping(UROCE_RUN, a.socket, a.socket, "192.0.2.1", None, 3, 64)


@unittest.skipUnless(is_root(), "needs root for network namespaces")
class Ipv6OverVeth(Ipv6Base):
    def two_daemons(self, ns, veth, capture):
        """A daemon at each end of the veth, with ADDRESSES; the first one writes `capture`."""
        for i, name in enumerate(("a", "b")):
            v4, v6 = ADDRESSES[i]
            args = ["--port", f"net_af_packet0,iface={veth[i]}", "--ip", v4, "--ip", v6]
            if i == 0:
                args += ["--capture", capture]
            self.daemons.append(Daemon(UROCED, self.dir.name, name, args, netns=ns[i]))
        return self.daemons

    def test_pingpongs_over_ipv6_with_neighbour_discovery(self):
        capture = os.path.join(self.dir.name, "a.pcap")
        with two_namespaces_with_veth() as (ns, veth):
            a, b = self.two_daemons(ns, veth, capture)

            gids = self.gids(a.socket)
            self.assertEqual(len(gids), 3, gids)
            self.assertEqual(gids[0][1], "::ffff:10.77.6.1", gids)
            self.assertEqual(gids[1][1], "fd00:75::1", gids)
            self.assertTrue(gids[2][1].startswith("fe80::"), gids)

            self.pingpong(a, b, 1)                       # fd00:75::1 <-> fd00:75::2
            self.pingpong(a, b, 1, ["-s", "65536"])      # multi-packet messages
            self.pingpong(b, a, 2)                       # link-local, the other way round
            self.pingpong(a, b, 1, program="ibv_ud_pingpong")  # UD: address handles with IPv6 GRHs

            sa, sb = stats(UROCE, a.socket), stats(UROCE, b.socket)
            for s in (sa, sb):
                net, engine = s["net"], s["engine"]
                self.assertEqual(engine["tx_no_route"], 0, s)
                self.assertEqual(s["device"]["rx_bad_icrc"], 0, s)
                self.assertEqual(net["nd_resolution_failures"], 0, s)
                self.assertEqual(net["dropped.bad_nd_message"] + net["dropped.bad_nd_hop_limit"], 0, s)
                self.assertGreaterEqual(net["rx_nd"], 1, s)
                self.assertGreaterEqual(net["nd_solicitations_sent"] + net["nd_solicitations_received"], 1, s)
                # Neither side ever needed ARP for this traffic.
                self.assertEqual(net["arp_requests_sent"], 0, s)
            # One side resolved the other by NS/NA: solicitations answered, advertisements learned from.
            self.assertGreaterEqual(sa["net"]["nd_advertisements_sent"] + sb["net"]["nd_advertisements_sent"], 1)
            self.assertGreaterEqual(
                sa["net"]["nd_advertisements_received"] + sb["net"]["nd_advertisements_received"], 1)
            for d in self.daemons:
                self.assertEqual(d.stop(), 0, d.read_log())

        # Neighbour discovery as Wireshark sees it: NS and NA present, every one well-formed, checksums good.
        nd = tshark("-r", capture, "-Y", "icmpv6.type == 135 || icmpv6.type == 136", "-T", "fields",
                    "-e", "icmpv6.type", "-e", "icmpv6.checksum.status", "-e", "ipv6.hlim")
        types = [line.split("\t")[0] for line in nd]
        print(f"  capture: {len(nd)} ICMPv6 frames: {types.count('135')} NS, {types.count('136')} NA", flush=True)
        self.assertIn("135", types, nd)
        self.assertIn("136", types, nd)
        for line in nd:
            _, status, hlim = line.split("\t")
            self.assertEqual((status, hlim), ("1", "255"), line)  # checksum Good, hop limit 255
        # Each daemon reported its solicited-node groups with MLD (so that an MLD-snooping switch forwards NS
        # to it): from its link-local address, hop limit 1, checksum good.
        mld = tshark("-r", capture, "-Y", "icmpv6.type == 131", "-T", "fields", "-e", "icmpv6.mld.multicast_address",
                     "-e", "icmpv6.checksum.status", "-e", "ipv6.hlim", "-e", "ipv6.src")
        self.assertIn("ff02::1:ff00:1\t1\t1\tfe80::", "\n".join(mld))  # fd00:75::1's group
        self.assertEqual(tshark("-r", capture, "-Y", "_ws.malformed || (icmpv6 && _ws.expert.severity >= 0x00600000)"),
                         [])
        # The RoCE frames: all IPv6, none IPv4; uroce dissect verifies every ICRC.
        roce6 = tshark("-r", capture, "-Y", "ipv6 && udp.dstport == 4791")
        roce4 = tshark("-r", capture, "-Y", "ip && udp.dstport == 4791")
        print(f"  capture: {len(roce6)} RoCE frames over IPv6, {len(roce4)} over IPv4", flush=True)
        self.assertGreater(len(roce6), 400)
        self.assertEqual(roce4, [])
        out = subprocess.run([UROCE, "dissect", capture], capture_output=True, text=True, timeout=300)
        self.assertEqual(out.returncode, 0, out.stderr)
        m = re.search(r"(\d+) frames: (\d+) RoCE \((\d+) with a bad ICRC\), (\d+) malformed", out.stderr)
        self.assertIsNotNone(m, out.stderr)
        _, roce, bad, malformed = map(int, m.groups())
        self.assertEqual(roce, len(roce6))
        self.assertEqual((bad, malformed), (0, 0))


    def test_rdma_cm_over_ipv6_between_two_daemons(self):
        """rping between two daemons by IPv6 address, configured and link-local; neither knows the other's
        MAC, so the address is resolved only after neighbour discovery, and an address nobody has is an
        ADDR_ERROR. The capture shows the CM's REQ, REP and RTU over IPv6 and no IPv4 at all."""
        capture = os.path.join(self.dir.name, "cm.pcap")
        with two_namespaces_with_veth() as (ns, veth):
            a, b = self.two_daemons(ns, veth, capture)
            link_local_a = self.gids(a.socket)[2][1]
            test_rdmacm.rping(UROCE_RUN, a.socket, b.socket, ADDRESSES[0][1], None, 20, 4096)
            test_rdmacm.rping(UROCE_RUN, a.socket, b.socket, link_local_a, None, 5, 64)
            # An address nobody on the link has: no Neighbor Advertisement, ADDR_ERROR -110.
            test_rdmacm.rping_nobody_there(UROCE_RUN, b.socket, "fd00:75::99")
            for d in self.daemons:
                cm = stats(UROCE, d.socket)["cm"]
                self.assertGreaterEqual(cm["rx_mads"], 2, cm)
                self.assertEqual(cm["rx_malformed"] + cm["timeouts"], 0, cm)
                self.assertEqual(d.stop(), 0, d.read_log())

        # REQ 0x0010, REP 0x0013, RTU 0x0014: each connection's handshake, all over IPv6.
        mads = tshark("-r", capture, "-Y", "infiniband.mad.attributeid", "-T", "fields", "-e", "ipv6.src",
                      "-e", "infiniband.mad.attributeid")
        kinds = [line.split("\t")[1] for line in mads]
        for kind in ("0x0010", "0x0013", "0x0014"):
            self.assertGreaterEqual(kinds.count(kind), 2, mads)
        self.assertTrue(all(line.split("\t")[0] for line in mads), mads)
        self.assertTrue(any(line.startswith("fe80::") for line in mads), mads)
        self.assertEqual(tshark("-r", capture, "-Y", "ip"), [])

    def test_kernel_pings_the_daemon_over_ipv6(self):
        """Linux's own `ping -6`, from the other end of the veth: the kernel resolves the daemon's address
        by neighbour discovery (the daemon answers its Neighbor Solicitation) and the daemon answers the
        echo requests, to its configured and to its link-local address."""
        with two_namespaces_with_veth() as (ns, veth):
            v4, v6 = ADDRESSES[0]
            a = Daemon(UROCED, self.dir.name, "a", ["--port", f"net_af_packet0,iface={veth[0]}", "--ip", v4,
                                                     "--ip", v6], netns=ns[0])
            self.daemons.append(a)
            link_local = self.gids(a.socket)[2][1]
            # The pinging side: a kernel interface with IPv6 on, neighbour discovery on, its own address.
            sh = lambda *cmd: subprocess.run(["ip", "netns", "exec", ns[1], *cmd], check=True, capture_output=True)
            sh("sysctl", "-qw", f"net.ipv6.conf.{veth[1]}.disable_ipv6=0")
            sh("ip", "link", "set", veth[1], "arp", "on")
            sh("ip", "-6", "addr", "add", "fd00:75::9/64", "dev", veth[1], "nodad")
            for target in (v6, f"{link_local}%{veth[1]}"):
                out = subprocess.run(["ip", "netns", "exec", ns[1], "ping", "-6", "-c", "3", "-i", "0.2", "-W", "3",
                                      target], capture_output=True, text=True, timeout=60)
                self.assertEqual(out.returncode, 0, f"ping -6 {target}:\n{out.stdout}{out.stderr}")
                self.assertIn("3 received", out.stdout, out.stdout)
            net = stats(UROCE, a.socket)["net"]
            self.assertEqual(net["icmp_echo_replied"], 6, net)
            self.assertEqual(net["rx_icmp_echo_requests"], 6, net)
            self.assertGreaterEqual(net["nd_advertisements_sent"], 1, net)
            self.assertEqual(a.stop(), 0, a.read_log())


if __name__ == "__main__":
    UROCED, UROCE_RUN, UROCE = sys.argv[1:4]
    del sys.argv[1:4]
    unittest.main(verbosity=2)
