#!/usr/bin/env python3
"""RoCEv2 UD multicast with rdmacm-utils' unmodified mckey through uroce-run: rdma_join_multicast, the
MULTICAST_JOIN event's address handle and Q_Key, the QP attached to the group, datagrams to QP 0xFFFFFF.

- One daemon's loopback port: two receivers and a sender on one group; each receiver must get all the
  sender's messages (mckey's receiver waits for exactly -C completions, so a lost or undelivered datagram
  fails it by timeout). The same with an IPv6 group, and with no bind address (the group's family picks the
  source address).
- Two daemons over a veth pair in two network namespaces: the receiver on one, the sender on the other.
  The captures must show the datagrams to 239.1.1.1 at MAC 01:00:5e:01:01:01, destination QP 0xFFFFFF;
  the receiver's daemon's IGMPv2 Membership Report for the group while the receiver is a member and a
  Leave Group after, both well-formed to tshark. The same over IPv6 (ff0e::1:2) with MLD Reports and Done,
  and the MLD Reports of the daemon's solicited-node groups.
- rdma_join_multicast on an ID of the wrong kind or with a unicast address fails (mckey prints the error).

Usage: test_multicast.py UROCED UROCE_RUN UROCE
"""
import os
import subprocess
import sys
import time
import unittest

from daemon_harness import Daemon, DaemonTestCase, is_root, tshark, two_namespaces_with_veth  # noqa: E402

UROCED = UROCE_RUN = UROCE = None
TIMEOUT = 60
MESSAGES = 10


class MulticastBase(DaemonTestCase):
    def mckey(self, socket, group, *extra):
        return subprocess.Popen([UROCE_RUN, "--socket", socket, "mckey", "-m", group, "-C", str(MESSAGES), *extra],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def finished(self, proc, what):
        try:
            out, _ = proc.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
            self.fail(f"{what} did not finish (a datagram was not delivered?):\n{out}")
        self.assertEqual(proc.returncode, 0, f"{what}:\n{out}")
        self.assertIn("data transfers complete", out, f"{what}:\n{out}")
        self.assertIn("mckey: joined dgid:", out, f"{what}:\n{out}")
        return out

    def group_traffic(self, receivers, sender, group):
        """Receivers first: the sender sends 3 s after its own join, by then they are members."""
        got = [self.mckey(socket, group, *bind) for socket, bind in receivers]
        time.sleep(1)
        s = self.mckey(sender[0], group, "-s", *sender[1])
        sent = self.finished(s, "the sender")
        outs = [self.finished(r, f"receiver {i}") for i, r in enumerate(got)]
        return sent, outs


class MulticastLoopback(MulticastBase):
    def test_two_receivers_one_sender(self):
        d = Daemon(UROCED, self.dir.name, "lo", ["--ip", "192.0.2.1"])
        self.daemons.append(d)
        bind = ("-b", "192.0.2.1")
        sent, outs = self.group_traffic([(d.socket, bind), (d.socket, bind)], (d.socket, bind), "239.1.1.1")
        # The group's GID as RoCEv2 maps IPv4: ::ffff:239.1.1.1, and no LID.
        for out in [sent, *outs]:
            self.assertIn("joined dgid: ::ffff:239.1.1.1 mlid 0x0", out)

    def test_ipv6_group_and_no_bind_address(self):
        d = Daemon(UROCED, self.dir.name, "lo", ["--ip", "192.0.2.1", "--ip", "fd00:76::1"])
        self.daemons.append(d)
        sent, outs = self.group_traffic([(d.socket, ("-b", "fd00:76::1"))], (d.socket, ()), "ff0e::1:2")
        for out in [sent, *outs]:
            self.assertIn("joined dgid: ff0e::1:2", out)

    def test_unicast_address_refused(self):
        d = Daemon(UROCED, self.dir.name, "lo", ["--ip", "192.0.2.1"])
        self.daemons.append(d)
        # The port's own address: its address resolution succeeds at once, the join is what refuses it.
        p = self.mckey(d.socket, "192.0.2.1", "-b", "192.0.2.1")
        out, _ = p.communicate(timeout=TIMEOUT)
        self.assertNotEqual(p.returncode, 0, out)
        self.assertIn("mckey: failure joining: Invalid argument", out)


@unittest.skipUnless(is_root(), "network namespaces need root")
class MulticastVeth(MulticastBase):
    def across_a_veth(self, addresses, group):
        """Receiver on daemon a (addresses[0]), sender on daemon b; returns both daemons' captures."""
        with two_namespaces_with_veth() as (ns, veth):
            caps = [os.path.join(self.dir.name, n + ".pcap") for n in ("a", "b")]
            for i, name in enumerate(("a", "b")):
                self.daemons.append(Daemon(UROCED, self.dir.name, name,
                                           ["--port", f"net_af_packet0,iface={veth[i]}", "--ip", addresses[i],
                                            "--capture", caps[i]], netns=ns[i]))
            a, b = self.daemons
            self.group_traffic([(a.socket, ("-b", addresses[0]))], (b.socket, ("-b", addresses[1])), group)
            time.sleep(0.5)  # the receiver's leave reaches the wire
            for d in self.daemons:
                self.assertEqual(d.stop(), 0, d.read_log())
        # Nothing malformed, and no IGMP or ICMPv6 (MLD) warning. (tshark warns about every RoCEv2 frame over
        # IPv6: its UDP checksum is zero, as rxe sends it too.)
        warned = "_ws.malformed || ((igmp || icmpv6) && _ws.expert.severity >= 0x00600000)"
        self.assertEqual(tshark("-r", caps[0], "-Y", warned), [])
        return caps

    def test_ipv6_group_across_a_veth_with_mld(self):
        """An IPv6 group: the datagrams at 33:33:00:01:00:02, the receiver's daemon reporting the group with
        MLD (from its link-local address, hop limit 1) and saying Done when it leaves; each daemon also
        reports the solicited-node groups of its addresses, which neighbour discovery needs."""
        caps = self.across_a_veth(("fd00:77::1", "fd00:77::2"), "ff0e::1:2")
        roce = ("udp.dstport == 4791 && ipv6.dst == ff0e::1:2 && eth.dst == 33:33:00:01:00:02 && "
                "infiniband.bth.destqp == 0xffffff")
        self.assertEqual(len(tshark("-r", caps[0], "-Y", roce)), MESSAGES)
        # The receiver's daemon's MAC: the source of its unsolicited Neighbor Advertisement.
        mac_a = tshark("-r", caps[0], "-Y", "ipv6.src == fd00:77::1", "-T", "fields", "-e", "eth.src")[0]
        mld = tshark("-r", caps[0], "-Y", f"(icmpv6.type == 131 || icmpv6.type == 132) && ipv6.src == fe80::/10 && "
                     f"ipv6.hlim == 1 && eth.src == {mac_a}",
                     "-T", "fields", "-e", "icmpv6.type", "-e", "ipv6.dst", "-e", "icmpv6.mld.multicast_address")
        self.assertEqual(mld.count("131\tff0e::1:2\tff0e::1:2"), 2, mld)  # at once, and again 1 s later
        self.assertEqual(mld.count("132\tff02::2\tff0e::1:2"), 1, mld)
        self.assertIn("131\tff02::1:ff00:1\tff02::1:ff00:1", mld)  # fd00:77::1's solicited-node group

    def test_group_across_a_veth_with_igmp(self):
        caps = self.across_a_veth(("10.77.7.1", "10.77.7.2"), "239.1.1.1")

        roce = ("udp.dstport == 4791 && ip.dst == 239.1.1.1 && eth.dst == 01:00:5e:01:01:01 && "
                "infiniband.bth.destqp == 0xffffff && infiniband.bth.opcode == 101")
        self.assertEqual(len(tshark("-r", caps[1], "-Y", roce)), MESSAGES)
        self.assertEqual(len(tshark("-r", caps[0], "-Y", roce)), MESSAGES)
        # `uroce explain` names the group each datagram went to.
        explained = subprocess.run([UROCE, "explain", caps[0]], capture_output=True, text=True, timeout=60).stdout
        self.assertEqual(explained.count("to multicast group 239.1.1.1"), MESSAGES, explained)
        # The receiver's daemon joined and left the group on the wire; nothing malformed. (Its capture also
        # holds what it received: the sender's daemon's IGMP, from 10.77.7.2.)
        igmp = tshark("-r", caps[0], "-Y", "igmp && ip.src == 10.77.7.1", "-T", "fields", "-e", "igmp.type",
                      "-e", "ip.dst", "-e", "igmp.maddr", "-e", "ip.ttl", "-e", "igmp.checksum.status")
        reports = [line for line in igmp if line.startswith("0x16")]
        leaves = [line for line in igmp if line.startswith("0x17")]
        self.assertEqual(len(reports), 2, igmp)  # at once, and again 1 s later
        self.assertEqual(reports[0].split("\t"), ["0x16", "239.1.1.1", "239.1.1.1", "1", "1"], igmp)
        self.assertEqual(len(leaves), 1, igmp)
        self.assertEqual(leaves[0].split("\t"), ["0x17", "224.0.0.2", "239.1.1.1", "1", "1"], igmp)
        # mckey's sender joins too, and librdmacm attaches its QP on every full-member join: its daemon
        # reports the group as well.
        self.assertGreaterEqual(len(tshark("-r", caps[1], "-Y", "igmp.type == 0x16")), 1)


if __name__ == "__main__":
    UROCED, UROCE_RUN, UROCE = sys.argv[1:4]
    del sys.argv[1:4]
    unittest.main(verbosity=2)
