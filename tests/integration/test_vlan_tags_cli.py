#!/usr/bin/env python3
"""`uroce` on captures whose frames carry VLAN tags as a provider's links carry them: QinQ (an 802.1ad
service tag, or the 0x9100 of older switches, outside the customer's 802.1Q tag), a lone 802.1ad tag, and an
802.1Q tag; and a QinQ frame inside an ERSPAN mirror session. rxe's real captures are tagged here frame by
frame. Every command must read through the tags: dissect shows the same lines, check, explain and replay
tell the same story, and tshark, an independent decoder, agrees with every RoCE field and with both tags.

Usage: test_vlan_tags_cli.py UROCE_BINARY CAPTURE_DIR
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

import pcapfile
import tshark_compare
import tunnels

UROCE = None
CAPTURES = None
TSHARK = shutil.which("tshark")


def tagged(frame, tags):
    """`frame` (untagged Ethernet II) with (TPID, PCP, VID) tags after its source MAC, outermost first."""
    inserted = b"".join(struct.pack(">HH", tpid, pcp << 13 | vid) for tpid, pcp, vid in tags)
    return frame[:12] + inserted + frame[12:]


# name: (tags, outermost first)
VARIANTS = {
    "qinq": [(0x88A8, 5, 200), (0x8100, 3, 100)],
    "qinq_9100": [(0x9100, 1, 4094), (0x8100, 0, 1)],
    "service_tag_only": [(0x88A8, 2, 300)],
    "customer_tag_only": [(0x8100, 6, 42)],
}
CAPTURE_NAMES = ["01-rc-send-pingpong.pcap", "10-rdma-cm-rping.pcap", "11-rc-write-loss5.pcap"]


def uroce(*args):
    return subprocess.run([UROCE, *args], capture_output=True, text=True, timeout=120)


def original(name):
    return os.path.join(CAPTURES, name)


class TaggedCaptures(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="uroce-vlan-test-")
        cls.addClassCleanup(shutil.rmtree, cls.tmp)

    def write(self, name, variant, wrap):
        """The capture `name` with each frame (and its index) passed through `wrap`."""
        path = os.path.join(self.tmp, f"{variant}-{name}")
        _, recs = pcapfile.read(original(name))
        out = []
        for i, (sec, usec, _, frame) in enumerate(recs):
            w = wrap(bytes(frame), i)
            out.append((sec, usec, len(w), w))
        pcapfile.write(path, pcapfile.LINKTYPE_ETHERNET, out)
        return path

    def tagged(self, name, variant):
        path = os.path.join(self.tmp, f"{variant}-{name}")
        if os.path.exists(path):
            return path
        return self.write(name, variant, lambda f, i: tagged(f, VARIANTS[variant]))

    def test_dissect_reads_through_the_tags(self):
        for name in CAPTURE_NAMES:
            plain = uroce("dissect", original(name))
            self.assertEqual(plain.returncode, 0)
            for variant in VARIANTS:
                with self.subTest(capture=name, variant=variant):
                    res = uroce("dissect", self.tagged(name, variant))
                    self.assertEqual(res.returncode, 0, res.stderr)
                    self.assertEqual(res.stdout.splitlines(), plain.stdout.splitlines())
                    self.assertIn("ICRC ok", res.stdout)

    def test_json_gives_both_tags(self):
        path = self.tagged(CAPTURE_NAMES[0], "qinq")
        rows = [json.loads(l) for l in uroce("dissect", "--json", path).stdout.splitlines()]
        self.assertGreater(len(rows), 10)
        for row in rows:
            eth = row["eth"]
            self.assertEqual((eth["outer_vlan_tpid"], eth["outer_vlan_id"], eth["outer_vlan_pcp"]), (0x88A8, 200, 5))
            self.assertEqual((eth["vlan_id"], eth["vlan_pcp"]), (100, 3))
            self.assertNotIn("vlan_tpid", eth)  # 0x8100, the usual: not shown
        lone = json.loads(uroce("dissect", "--json", self.tagged(CAPTURE_NAMES[0], "service_tag_only"))
                          .stdout.splitlines()[0])["eth"]
        self.assertEqual((lone["vlan_tpid"], lone["vlan_id"], lone["vlan_pcp"]), (0x88A8, 300, 2))
        self.assertNotIn("outer_vlan_id", lone)
        verbose = uroce("dissect", "-V", path).stdout
        self.assertIn("Service VLAN ID: 200", verbose)
        self.assertIn("VLAN ID: 100", verbose)

    def test_check_explain_and_replay_tell_the_same_story(self):
        for name in CAPTURE_NAMES:
            lossy = ["--lossy"] if "loss" in name else []
            with self.subTest(capture=name):
                path = self.tagged(name, "qinq")
                for cmd in (["check"], ["replay", "--side", "both", *lossy], ["explain"]):
                    plain, tags = uroce(*cmd, original(name)), uroce(*cmd, path)
                    self.assertEqual(tags.returncode, plain.returncode, cmd)
                    self.assertEqual(tags.stdout.replace(path, "CAPTURE"),
                                     plain.stdout.replace(original(name), "CAPTURE"), cmd)

    def test_a_third_tag_is_not_read_through(self):
        # Three tags: uroce reads two, as a switch's QinQ does, and shows the frame as another ethertype.
        path = self.write(CAPTURE_NAMES[0], "three_tags",
                          lambda f, i: tagged(f, [(0x88A8, 0, 1), (0x8100, 0, 2), (0x8100, 0, 3)]))
        res = uroce("dissect", path)
        self.assertEqual(res.returncode, 0)
        self.assertNotIn("ICRC", res.stdout)
        self.assertIn("ethertype 0x8100", res.stdout)

    def test_a_qinq_frame_in_a_mirror_session(self):
        path = self.write(CAPTURE_NAMES[0], "erspan_qinq",
                          lambda f, i: tunnels.erspan_ii(tagged(f, VARIANTS["qinq"]), session=9, sequence=i))
        plain = uroce("dissect", original(CAPTURE_NAMES[0])).stdout.splitlines()
        lines = uroce("dissect", path).stdout.splitlines()
        self.assertEqual(lines, [f"{l}  [ERSPAN type II session 9]" for l in plain])
        first = json.loads(uroce("dissect", "--json", path).stdout.splitlines()[0])
        self.assertEqual((first["eth"]["outer_vlan_id"], first["eth"]["vlan_id"]), (200, 100))

    @unittest.skipIf(TSHARK is None, "tshark is not installed")
    def test_tshark_agrees_on_every_roce_field(self):
        for name in CAPTURE_NAMES:
            for variant in VARIANTS:
                with self.subTest(capture=name, variant=variant):
                    tshark_compare.assert_agreement(self, UROCE, TSHARK, self.tagged(name, variant))

    @unittest.skipIf(TSHARK is None, "tshark is not installed")
    def test_tshark_agrees_on_the_tags(self):
        # tshark shows an 802.1ad tag as "ieee8021ad", an 802.1Q or 0x9100 tag as "vlan"; each list in order.
        for variant, tags in VARIANTS.items():
            with self.subTest(variant=variant):
                path = self.tagged(CAPTURE_NAMES[0], variant)
                cmd = [TSHARK, "-r", path, "-T", "fields", "-E", "occurrence=a", "-E", "aggregator=,",
                       "-E", "separator=\t", "-e", "eth.type", "-e", "ieee8021ad.id", "-e", "ieee8021ad.priority",
                       "-e", "vlan.id", "-e", "vlan.priority"]
                theirs = [l.split("\t") for l in subprocess.run(cmd, check=True, capture_output=True,
                                                                text=True).stdout.splitlines()]
                ours = [json.loads(l)["eth"] for l in uroce("dissect", "--json", path).stdout.splitlines()]
                self.assertEqual(len(theirs), len(ours))
                for row, eth in zip(theirs, ours):
                    numbers = lambda text: [int(x) for x in text.split(",") if x]  # noqa: E731
                    eth_type, ad_ids, ad_pcps, q_ids, q_pcps = row[0], *map(numbers, row[1:])
                    mine = ([(eth["outer_vlan_tpid"], eth["outer_vlan_id"], eth["outer_vlan_pcp"])]
                            if "outer_vlan_tpid" in eth else [])
                    mine.append((eth.get("vlan_tpid", 0x8100), eth["vlan_id"], eth["vlan_pcp"]))
                    self.assertEqual(int(eth_type, 0), mine[0][0])
                    self.assertEqual(ad_ids, [vid for tpid, vid, _ in mine if tpid == 0x88A8])
                    self.assertEqual(ad_pcps, [pcp for tpid, _, pcp in mine if tpid == 0x88A8])
                    self.assertEqual(q_ids, [vid for tpid, vid, _ in mine if tpid != 0x88A8])
                    self.assertEqual(q_pcps, [pcp for tpid, _, pcp in mine if tpid != 0x88A8])
                    self.assertEqual([(tpid, vid, pcp) for tpid, vid, pcp in mine],
                                     [(tpid, vid, pcp) for tpid, pcp, vid in tags])


def main():
    global UROCE, CAPTURES
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    UROCE, CAPTURES = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    suite = unittest.defaultTestLoader.loadTestsFromTestCase(TaggedCaptures)
    return 0 if unittest.TextTestRunner(verbosity=2).run(suite).wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
