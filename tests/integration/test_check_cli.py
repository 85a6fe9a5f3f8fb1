#!/usr/bin/env python3
"""End-to-end tests of `uroce check`: the real captures keep every rule, and copies changed on purpose
break the rule they should, at the frame they should, with the exit status CI scripts rely on.

Usage: test_check_cli.py UROCE_BINARY CAPTURE_DIR
"""
import json
import os
import pathlib
import struct
import subprocess
import sys
import tempfile
import unittest

import pcapfile

UROCE = None
CAPTURES = None
RC_RDMA_WRITE_FIRST, RC_RDMA_WRITE_MIDDLE = 0x06, 0x07


def check(*args):
    return subprocess.run([UROCE, "check", *args], capture_output=True, text=True, timeout=120)


def captures():
    interop = os.path.join(CAPTURES, "..", "interop")
    return [os.path.join(d, n) for d in (CAPTURES, interop) for n in sorted(os.listdir(d)) if n.endswith(".pcap")]


class CheckCli(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tmp.cleanup()

    def changed(self, name, change):
        """A copy of capture NAME with CHANGE(frame bytes, BTH offset) applied to the first RoCE frame it
        returns True for (ICRC fixed afterwards); returns the copy's path and the frame's number."""
        linktype, records = pcapfile.read(os.path.join(CAPTURES, name))
        number = None
        for i, (_, _, _, frame) in enumerate(records):
            bth = pcapfile.roce_offset(frame)
            if bth is not None and change(frame, bth):
                pcapfile.fix_icrc(frame)
                number = i + 1
                break
        self.assertIsNotNone(number, "nothing to change")
        path = os.path.join(self.tmp.name, "changed-" + name)
        pcapfile.write(path, linktype, records)
        return path, number

    def violations(self, path):
        res = check("--json", path)
        self.assertEqual(res.returncode, 1, res.stdout + res.stderr)
        report = json.loads(res.stdout)
        self.assertFalse(report["ok"])
        return [(v["rule"], v["frame"]) for v in report["violations"]]

    def test_real_captures_keep_every_rule(self):
        for path in captures():
            res = check(path)
            self.assertEqual(res.returncode, 0, f"{path}:\n{res.stdout}{res.stderr}")
            self.assertIn("OK: no violation", res.stdout)
            report = json.loads(check("--json", path).stdout)
            self.assertTrue(report["ok"])
            self.assertGreater(report["roce"], 0)

    def test_write_length_against_reth(self):
        def longer_dma_length(frame, bth):
            if frame[bth] != RC_RDMA_WRITE_FIRST:
                return False
            length = struct.unpack(">I", frame[bth + 12 + 12:bth + 12 + 16])[0]
            frame[bth + 12 + 12:bth + 12 + 16] = struct.pack(">I", length + 4)
            return True
        path, number = self.changed("05-rc-write.pcap", longer_dma_length)
        found = self.violations(path)
        self.assertEqual(len(found), 1, found)
        rule, frame = found[0]
        self.assertEqual(rule, "write_length")
        self.assertGreater(frame, number)  # reported at the message's LAST
        self.assertIn(f"the RDMA WRITE of frame {number} carried", check(path).stdout)

    def test_opcode_sequence(self):
        def middle_becomes_first(frame, bth):
            if frame[bth] != RC_RDMA_WRITE_MIDDLE:
                return False
            frame[bth] = RC_RDMA_WRITE_FIRST  # (a FIRST has a RETH: the parser reads the payload's first 16 bytes)
            return True
        path, number = self.changed("05-rc-write.pcap", middle_becomes_first)
        self.assertIn(("opcode_sequence", number), self.violations(path))

    def test_bad_icrc(self):
        linktype, records = pcapfile.read(os.path.join(CAPTURES, "01-rc-send-pingpong.pcap"))
        index = next(i for i, r in enumerate(records) if pcapfile.roce_offset(r[3]) is not None)
        records[index][3][-1] ^= 0x80
        path = os.path.join(self.tmp.name, "bad-icrc.pcap")
        pcapfile.write(path, linktype, records)
        self.assertEqual(self.violations(path), [("bad_icrc", index + 1)])
        self.assertIn("FAIL: 1 violations", check(path).stdout)

    def test_pfc_and_pause_rules(self):
        """Well-formed PFC and PAUSE frames among RoCE keep every rule; one to a unicast MAC breaks
        pause_destination, one with the class-enable vector's reserved byte set breaks pfc_enable_vector."""
        linktype, records = pcapfile.read(os.path.join(CAPTURES, "05-rc-write.pcap"))
        switch = bytes.fromhex("02aabbccdd01")
        extra = [pcapfile.pfc_frame(switch, 0x08, [0, 0, 0, 0xFFFF, 0, 0, 0, 0]), pcapfile.pause_frame(switch, 10),
                 pcapfile.mac_control_frame(switch, 0x0101, struct.pack(">BB8H", 0, 0x08, *[0] * 8),
                                            dst=bytes.fromhex("525400770b0b")),
                 pcapfile.pfc_frame(switch, 0x08, [0, 0, 0, 7, 0, 0, 0, 0], reserved=0x80)]
        mixed = records[:5] + [(records[4][0], records[4][1], 60, f) for f in extra] + records[5:]
        path = os.path.join(self.tmp.name, "pfc.pcap")
        pcapfile.write(path, linktype, mixed[:7])
        self.assertEqual(check(path).returncode, 0, check(path).stdout)  # the two good ones
        pcapfile.write(path, linktype, mixed)
        self.assertEqual(self.violations(path), [("pause_destination", 8), ("pfc_enable_vector", 9)])
        out = check(path).stdout
        self.assertIn("PFC from 02:aa:bb:cc:dd:01 to 52:54:00:77:0b:0b", out)
        self.assertIn("class-enable vector 0x8008", out)

    def test_damaged_capture(self):
        data = pathlib.Path(os.path.join(CAPTURES, "05-rc-write.pcap")).read_bytes()
        path = os.path.join(self.tmp.name, "damaged.pcap")
        pathlib.Path(path).write_bytes(data[:3000])
        res = check(path)
        self.assertEqual(res.returncode, 2)
        self.assertIn("damaged capture", res.stderr)


if __name__ == "__main__":
    UROCE, CAPTURES = sys.argv[1], sys.argv[2]
    unittest.main(argv=[sys.argv[0], "-v"])
