#!/usr/bin/env python3
"""End-to-end tests of `uroce replay`: rxe's captured requests fed into uroce's responder, its answers set
beside rxe's (the same replay as tests/unit/transport/test_capture_replay.cpp, through the command line),
on the real captures and on copies changed on purpose.

Usage: test_replay_cli.py UROCE_BINARY CAPTURE_DIR
"""
import json
import os
import pathlib
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

import pcapfile

UROCE = None
CAPTURES = None
LOSSY = "11-rc-write-loss5.pcap"
SUMMARY = re.compile(r"^(\d+) of (\d+) connections answered as captured$", re.M)


def replay(*args, stdin=None):
    return subprocess.run([UROCE, "replay", *args], capture_output=True, input=stdin, timeout=120)


def text(res):
    return res.stdout.decode(errors="replace")


class ReplayCli(unittest.TestCase):
    def capture(self, name):
        return os.path.join(CAPTURES, name)

    def test_every_rc_capture_is_answered_as_rxe_did(self):
        connections = 0
        for name in sorted(os.listdir(CAPTURES)):
            if not name.endswith(".pcap") or name.startswith("03-"):  # 03: UD only
                continue
            res = replay(*(["--lossy"] if name == LOSSY else []), self.capture(name))
            out = text(res)
            self.assertEqual(res.returncode, 0, f"{name}:\n{out}\n{res.stderr.decode()}")
            same, total = map(int, SUMMARY.search(out).groups())
            self.assertEqual(same, total, f"{name}:\n{out}")
            self.assertGreater(total, 0, name)
            self.assertNotIn("differ", out)
            connections += total
        self.assertGreaterEqual(connections, 10)

    def test_lossy_capture_compared_exactly_differs(self):
        res = replay(self.capture(LOSSY))
        out = text(res)
        self.assertEqual(res.returncode, 1, out)
        self.assertIn("0 of 1 connections answered as captured", out)
        self.assertRegex(out, r"answer \d+: uroce RC ACKNOWLEDGE psn \d+ .* \| captured RC ACKNOWLEDGE")

    def test_json_rows(self):
        res = replay("--json", self.capture("08-rc-imm-zerolen-read-atomic.pcap"))
        self.assertEqual(res.returncode, 0, res.stderr)
        rows = [json.loads(line) for line in text(res).splitlines()]
        self.assertEqual(len(rows), 1)
        row = rows[0]
        self.assertTrue(row["same"])
        self.assertEqual(row["matched"], row["captured_answers"])
        self.assertEqual(row["uroce_answers"], row["captured_answers"])
        self.assertGreater(row["requests"], 0)
        self.assertEqual(row["differences"], [])

    def test_changed_answer_is_the_one_difference(self):
        """The captured responder's second ACK made to say another MSN (its ICRC fixed): uroce's answer and
        the changed one are shown side by side, and the exit status says they differ."""
        linktype, records = pcapfile.read(self.capture("05-rc-write.pcap"))
        acks = [r[3] for r in records if pcapfile.roce_offset(r[3]) is not None
                and r[3][pcapfile.roce_offset(r[3])] == 0x11]
        frame = acks[1]
        aeth = pcapfile.roce_offset(frame) + 12
        msn = struct.unpack(">I", b"\x00" + bytes(frame[aeth + 1:aeth + 4]))[0]
        frame[aeth + 1:aeth + 4] = struct.pack(">I", msn + 5)[1:]
        pcapfile.fix_icrc(frame)
        with tempfile.TemporaryDirectory() as tmp:
            changed = os.path.join(tmp, "changed.pcap")
            pcapfile.write(changed, linktype, records)
            res = replay("--json", changed)
        self.assertEqual(res.returncode, 1, res.stderr)
        rows = [json.loads(line) for line in text(res).splitlines()]
        diffs = [d for row in rows for d in row["differences"]]
        self.assertEqual(len(diffs), 1, rows)
        self.assertEqual(diffs[0]["captured"]["msn"], msn + 5)
        self.assertEqual(diffs[0]["uroce"]["msn"], msn)

    def test_bad_icrc_frames_are_left_out(self):
        linktype, records = pcapfile.read(self.capture("05-rc-write.pcap"))
        frame = next(r[3] for r in records if pcapfile.roce_offset(r[3]) is not None)
        frame[-1] ^= 0x01
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "bad-icrc.pcap")
            pcapfile.write(path, linktype, records)
            res = replay(path)
        self.assertIn("(1 with a bad ICRC left out)", text(res))

    @unittest.skipUnless(shutil.which("editcap"), "editcap (Wireshark) not installed")
    def test_pcapng_as_wireshark_saves_it(self):
        with tempfile.TemporaryDirectory() as tmp:
            ng = os.path.join(tmp, "read.pcapng")
            subprocess.run(["editcap", "-F", "pcapng", self.capture("06-rc-read.pcap"), ng], check=True)
            res = replay(ng)
        self.assertEqual(res.returncode, 0, text(res))
        self.assertIn("2 of 2 connections answered as captured", text(res))

    def test_ud_only_and_standard_input(self):
        data = pathlib.Path(self.capture("03-ud-send-pingpong.pcap")).read_bytes()
        res = replay("-", stdin=data)
        self.assertEqual(res.returncode, 0, res.stderr)
        self.assertIn("No RC requests to replay", text(res))

    def test_damaged_and_missing_files(self):
        data = pathlib.Path(self.capture("05-rc-write.pcap")).read_bytes()
        with tempfile.TemporaryDirectory() as tmp:
            damaged = os.path.join(tmp, "damaged.pcap")
            pathlib.Path(damaged).write_bytes(data[:3000])
            res = replay(damaged)
            self.assertEqual(res.returncode, 2)
            self.assertIn("damaged capture", res.stderr.decode())
        res = replay(os.path.join(CAPTURES, "no-such-file.pcap"))
        self.assertEqual(res.returncode, 2)
        self.assertEqual(replay("--mtu", "1000", self.capture("05-rc-write.pcap")).returncode, 105)


if __name__ == "__main__":
    UROCE, CAPTURES = sys.argv[1], sys.argv[2]
    unittest.main(argv=[sys.argv[0], "-v"])
