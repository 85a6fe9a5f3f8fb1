#!/usr/bin/env python3
"""End-to-end tests of `uroce dissect` on real and deliberately damaged captures.

Usage: test_dissect_cli.py UROCE_BINARY CAPTURE_DIR
"""
import json
import pathlib
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import pcapfile
from inject_frames import roce

UROCE = None
CAPTURES = None


def run(*args, stdin=None):
    return subprocess.run([UROCE, "dissect", *args], capture_output=True, text=True, input=stdin, timeout=60)


def json_rows(*args):
    res = run("--json", *args)
    assert res.returncode == 0, res.stderr
    return [json.loads(line) for line in res.stdout.splitlines()]


class DissectCli(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="uroce-dissect-test-")
        self.send = os.path.join(CAPTURES, "01-rc-send-pingpong.pcap")

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def path(self, name):
        return os.path.join(self.tmp, name)

    def test_every_real_frame_is_ok(self):
        for name in sorted(os.listdir(CAPTURES)):
            if not name.endswith(".pcap"):
                continue
            res = run(os.path.join(CAPTURES, name))
            self.assertEqual(res.returncode, 0, res.stderr)
            lines = res.stdout.splitlines()
            roce = [l for l in lines if "psn" in l]
            self.assertGreater(len(roce), 0, name)
            self.assertTrue(all(l.endswith("ICRC ok") for l in roce), name)
            self.assertNotIn("MALFORMED", res.stdout)
            self.assertIn("with a bad ICRC", res.stderr)

    def flip_and_check(self, where):
        linktype, records = pcapfile.read(self.send)
        index = next(i for i, r in enumerate(records) if pcapfile.roce_offset(r[3]) is not None and len(r[3]) > 100)
        frame = records[index][3]
        bth = pcapfile.roce_offset(frame)
        if where == "payload":
            frame[bth + 12 + 5] ^= 0x01  # a payload byte of the SEND
        else:
            frame[bth + 11] ^= 0x01      # lowest PSN bit
        out = self.path(f"flipped-{where}.pcap")
        pcapfile.write(out, linktype, records)
        rows = json_rows(out)
        bad = [r["frame"]["number"] for r in rows if "icrc" in r and not r["icrc"]["ok"]]
        self.assertEqual(bad, [index + 1])
        summary = run(out).stdout.splitlines()[index]
        self.assertTrue(summary.endswith("ICRC BAD"), summary)

    def test_flipped_payload_bit_is_bad(self):
        self.flip_and_check("payload")

    def test_flipped_psn_bit_is_bad(self):
        self.flip_and_check("psn")

    def test_truncated_file_reports_error_after_good_frames(self):
        data = pathlib.Path(self.send).read_bytes()
        out = self.path("truncated.pcap")
        pathlib.Path(out).write_bytes(data[:len(data) // 2 + 7])
        res = run(out)
        self.assertEqual(res.returncode, 2)
        self.assertGreater(len(res.stdout.splitlines()), 10)  # the frames before the damage are shown
        self.assertIn("damaged capture after frame", res.stderr)

    def test_garbage_file_is_a_clear_error(self):
        out = self.path("garbage.pcap")
        pathlib.Path(out).write_bytes(b"this is not a capture at all" * 10)
        res = run(out)
        self.assertEqual(res.returncode, 2)
        self.assertIn("error", res.stderr)
        self.assertEqual(res.stdout, "")

    def test_missing_file(self):
        res = run(self.path("nope.pcap"))
        self.assertEqual(res.returncode, 2)
        self.assertIn("nope.pcap", res.stderr)
        self.assertEqual(res.stderr.count("nope.pcap"), 1, res.stderr)  # libpcap's own copy of the path dropped
        self.assertIn("No such file or directory", res.stderr)

    def test_empty_file(self):
        out = self.path("empty.pcap")
        pathlib.Path(out).write_bytes(b"")
        self.assertEqual(run(out).returncode, 2)

    def test_stdin(self):
        data = pathlib.Path(self.send).read_bytes()
        res = subprocess.run([UROCE, "dissect", "-"], input=data, capture_output=True, timeout=60)
        self.assertEqual(res.returncode, 0)
        self.assertEqual(res.stdout.decode(), run(self.send).stdout)

    def test_pcapng(self):
        out = self.path("send.pcapng")
        subprocess.run(["editcap", "-F", "pcapng", self.send, out], check=True)
        self.assertEqual(pathlib.Path(out).read_bytes()[:4], b"\x0a\x0d\x0d\x0a")
        self.assertEqual(run(out).stdout, run(self.send).stdout)

    def test_linux_cooked_capture(self):
        _, records = pcapfile.read(self.send)
        cooked = []
        for sec, usec, orig, frame in records:
            # SLL: packet type, ARPHRD_ETHER, address length, 8 address bytes, protocol = the ethertype.
            sll = bytes([0, 0, 0, 1, 0, 6]) + bytes(frame[6:12]) + b"\0\0" + bytes(frame[12:14])
            cooked.append((sec, usec, orig + 2, bytearray(sll) + frame[14:]))
        out = self.path("cooked.pcap")
        pcapfile.write(out, pcapfile.LINKTYPE_LINUX_SLL, cooked)
        rows = json_rows(out)
        roce = [r for r in rows if "bth" in r]
        self.assertEqual(len(roce), 100)
        self.assertTrue(all(r["icrc"]["ok"] for r in roce))

    def test_malformed_frames_are_reported_not_fatal(self):
        linktype, records = pcapfile.read(self.send)
        first = next(r for r in records if pcapfile.roce_offset(r[3]) is not None)
        bth = pcapfile.roce_offset(first[3])
        bad_tver = bytearray(first[3])
        bad_tver[bth + 1] |= 0x01
        unknown_op = bytearray(first[3])
        unknown_op[bth] = 0x80  # the InfiniBand CNP opcode, not valid on RoCEv2
        truncated = bytearray(first[3][:bth + 6])
        records = [(0, 0, len(f), f) for f in (bad_tver, unknown_op, truncated)] + records[:3]
        out = self.path("malformed.pcap")
        pcapfile.write(out, linktype, records)
        res = run(out)
        self.assertEqual(res.returncode, 0, res.stderr)
        lines = res.stdout.splitlines()
        self.assertIn("MALFORMED: BTH header version is not 0", lines[0])
        self.assertIn("MALFORMED: unknown BTH opcode", lines[1])
        self.assertIn("MALFORMED", lines[2])
        self.assertEqual(len(lines), 6)
        rows = json_rows(out)
        self.assertEqual(rows[0]["error"]["code"], "bad_tver")
        self.assertEqual(rows[1]["error"]["code"], "unknown_opcode")
        self.assertEqual(rows[2]["error"]["code"], "ip_length_mismatch")  # IP says more than was captured
        self.assertIn("3 malformed", res.stderr)

    def test_filters(self):
        rping = os.path.join(CAPTURES, "10-rdma-cm-rping.pcap")
        mads = json_rows("--qp", "1", rping)
        self.assertEqual([r["mad"]["attribute_name"] for r in mads][:3], ["REQ", "REP", "RTU"])
        self.assertTrue(all(r["bth"]["dest_qp"] == 1 for r in mads))
        rc_qp = json_rows("--qp", "0x11", rping)  # hex, as QP numbers are usually written
        self.assertGreater(len(rc_qp), 0)
        self.assertTrue(all(r["bth"]["dest_qp"] == 0x11 for r in rc_qp))
        acks = json_rows("--opcode", "RC_ACKNOWLEDGE", self.send)
        self.assertGreater(len(acks), 0)
        self.assertTrue(all(r["bth"]["opcode"] == 0x11 for r in acks))
        both = json_rows("--opcode", "SEND_FIRST", "--opcode", "0x11", self.send)
        self.assertEqual({r["bth"]["opcode"] for r in both}, {0x00, 0x11})
        self.assertEqual(len(json_rows("-c", "5", self.send)), 5)
        res = run("--opcode", "NOT_AN_OPCODE", self.send)
        self.assertNotEqual(res.returncode, 0)
        self.assertIn("unknown opcode", res.stderr)

    def test_verbose_tree_has_every_header(self):
        out = run("-V", "--opcode", "ATOMIC_ACKNOWLEDGE", "-c", "1", os.path.join(CAPTURES, "07-rc-atomic.pcap")).stdout
        for label in ("Ethernet II", "Internet Protocol Version 4", "User Datagram Protocol", "Base Transport Header",
                      "ACK Extended Transport Header", "Atomic Acknowledge Extended Transport Header",
                      "Invariant CRC", "Valid: True"):
            self.assertIn(label, out)

    def test_pfc_and_pause_agree_with_tshark(self):
        """PFC and PAUSE frames, one per interesting case, read field by field as tshark reads them."""
        switch, host = bytes.fromhex("02aabbccdd01"), bytes.fromhex("02aabbccdd02")
        frames = [pcapfile.pfc_frame(switch, 0x08, [0, 0, 0, 0xFFFF, 0, 0, 0, 0]),
                  pcapfile.pfc_frame(switch, 0x18, [9, 0, 0, 0, 0x100, 0, 0, 0x7777]),  # resume 3, pause 4
                  pcapfile.pfc_frame(switch, 0xFF, [1, 2, 3, 4, 5, 6, 7, 8]),
                  pcapfile.pfc_frame(switch, 0x01, [5, 0, 0, 0, 0, 0, 0, 0], reserved=1),
                  pcapfile.pause_frame(host, 0x2000), pcapfile.pause_frame(host, 0)]
        out = self.path("pfc.pcap")
        pcapfile.write(out, 1, [(1, 10 * i, 60, f) for i, f in enumerate(frames)])
        fields = ["macc.opcode", "macc.pause_time", "macc.cbfc.enbv"] + [f"macc.cbfc.pause_time.c{i}" for i in range(8)]
        tshark = subprocess.run(["tshark", "-r", out, "-T", "fields", "-E", "separator=\t", "-E", "occurrence=f",
                                 *[a for f in fields for a in ("-e", f)]], capture_output=True, text=True, timeout=60)
        self.assertEqual(tshark.returncode, 0, tshark.stderr)
        theirs = [line.split("\t") for line in tshark.stdout.splitlines()]
        ours = json_rows(out)
        self.assertEqual(len(theirs), len(frames))
        self.assertEqual(len(ours), len(frames))
        compared = 0
        for n, (t, o) in enumerate(zip(theirs, ours), 1):
            m = o["mac_control"]
            mine = [m["opcode"], m.get("pause_quanta"), m.get("class_enable")] + \
                   [m.get(f"priority{i}_quanta") for i in range(8)]
            for name, text, value in zip(fields, t, mine):
                with self.subTest(frame=n, field=name):
                    self.assertEqual(int(text, 0) if text else None, value)
                    compared += text != ""
        self.assertEqual(compared, 4 * 10 + 2 * 2)
        lines = run(out).stdout.splitlines()
        self.assertIn("PFC: pause priority 3 for 65535 quanta: 3.36 ms at 10 Gb/s", lines[0])
        self.assertIn("PFC: resume priority 3; pause priority 4 for 256 quanta", lines[1])
        self.assertIn("PAUSE: resume every priority", lines[5])
        res = run(out)
        self.assertIn("6 PFC/PAUSE", res.stderr)
        # Cut inside the PFC body: malformed, reported, never read beyond.
        pcapfile.write(out, 1, [(1, 0, 60, frames[0][:24])])
        res = run(out)
        self.assertEqual(res.returncode, 0, res.stderr)
        self.assertIn("MALFORMED: MAC Control frame shorter than its opcode's body at byte 14", res.stdout)

    def test_xrc_headers_are_read_and_agree_with_tshark(self):
        """XRC (opcodes 0xA0 + RC's): requests carry an XRCETH naming the target's XRC SRQ before any other
        extension header, responses are as RC's. Crafted frames, since no capture here has XRC traffic."""
        a, b = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])
        eth = bytes.fromhex("020000000002" "020000000001" "0800")
        back = bytes.fromhex("020000000001" "020000000002" "0800")
        xrceth = lambda srq: (srq & 0xFFFFFF).to_bytes(4, "big")
        reth = lambda va, rkey, n: va.to_bytes(8, "big") + rkey.to_bytes(4, "big") + n.to_bytes(4, "big")
        frames = [
            eth + roce(a, b, 0x11, 5, xrceth(0x123) + b"hello xrc world!", opcode=0xA4),           # SEND_ONLY
            back + roce(b, a, 0x12, 5, bytes.fromhex("1f000001"), opcode=0xB1),                    # ACK
            eth + roce(a, b, 0x11, 6, xrceth(0x456) + reth(0x1000, 0xABCD, 512) + b"w" * 256, opcode=0xA6),
            eth + roce(a, b, 0x11, 7, xrceth(0x456) + b"x" * 256, opcode=0xA8),                    # WRITE_LAST
            eth + roce(a, b, 0x11, 8, xrceth(0x456) + reth(0x2000, 0xABCD, 8), opcode=0xAC),      # READ request
            back + roce(b, a, 0x12, 8, bytes.fromhex("00000003") + b"readdata", opcode=0xB0),       # READ_RESPONSE_ONLY
        ]
        out = self.path("xrc.pcap")
        pcapfile.write(out, 1, [(1, i, len(f), bytearray(f)) for i, f in enumerate(frames)])
        rows = json_rows(out)
        self.assertEqual([r["bth"]["opcode"] for r in rows], [0xA4, 0xB1, 0xA6, 0xA8, 0xAC, 0xB0])
        self.assertEqual([r.get("xrceth", {}).get("xrc_srq") for r in rows], [0x123, None, 0x456, 0x456, 0x456, None])
        self.assertTrue(all(r["icrc"]["ok"] for r in rows), rows)
        self.assertEqual([r["payload_length"] for r in rows], [16, 0, 256, 256, 0, 8])
        self.assertEqual(rows[2]["reth"], {"va": 0x1000, "rkey": 0xABCD, "dma_length": 512})
        self.assertEqual(rows[4]["reth"]["dma_length"], 8)
        lines = run(out).stdout.splitlines()
        self.assertIn("XRC SEND_ONLY", lines[0])
        self.assertIn("xrcsrq 0x000123 len 16", lines[0])
        # tshark 4.0 names XRC opcodes but does not decode the XRCETH: the BTH must agree.
        tshark = subprocess.run(["tshark", "-r", out, "-T", "fields", "-E", "separator=\t", "-e", "infiniband.bth.opcode",
                                 "-e", "infiniband.bth.destqp", "-e", "infiniband.bth.psn"],
                                capture_output=True, text=True, timeout=60)
        self.assertEqual(tshark.returncode, 0, tshark.stderr)
        theirs = [tuple(int(x, 0) for x in line.split("\t")) for line in tshark.stdout.splitlines()]
        self.assertEqual(theirs, [(r["bth"]["opcode"], r["bth"]["dest_qp"], r["bth"]["psn"]) for r in rows])
        explain = subprocess.run([UROCE, "explain", out], capture_output=True, text=True, timeout=60)
        self.assertIn("XRC SEND of 16 bytes in 1 packet (psn 5), into a receive of the target's XRC SRQ 0x000123",
                      explain.stdout)
        self.assertIn("XRC RDMA WRITE of 512 bytes in 2 packets", explain.stdout)
        check = subprocess.run([UROCE, "check", out], capture_output=True, text=True, timeout=60)
        self.assertEqual(check.returncode, 0, check.stdout + check.stderr)
        self.assertIn("1 RC/UC/XRC request flows", check.stdout)
        # XRC requests are checked as RC's: a WRITE whose packets fall short of its DMA length is a violation.
        short = list(frames[:3]) + [eth + roce(a, b, 0x11, 7, xrceth(0x456) + b"x" * 252, opcode=0xA8)]
        pcapfile.write(out, 1, [(1, i, len(f), bytearray(f)) for i, f in enumerate(short)])
        check = subprocess.run([UROCE, "check", out], capture_output=True, text=True, timeout=60)
        self.assertEqual(check.returncode, 1, check.stdout + check.stderr)
        self.assertIn("write_length", check.stdout)
        # An XRC SEND cut inside its XRCETH is malformed, reported and not read beyond.
        cut = eth + roce(a, b, 0x11, 5, b"\x00\x01", opcode=0xA4)
        pcapfile.write(out, 1, [(1, 0, len(cut), bytearray(cut))])
        res = run(out)
        self.assertEqual(res.returncode, 0, res.stderr)
        self.assertIn("MALFORMED", res.stdout)

    def test_arp_is_shown_as_arp(self):
        lines = run(self.send).stdout.splitlines()
        self.assertIn("ARP who-has 10.77.0.11 tell 10.77.0.12", lines[0])
        self.assertIn("is-at", lines[1])


if __name__ == "__main__":
    UROCE, CAPTURES = sys.argv[1], sys.argv[2]
    unittest.main(argv=[sys.argv[0], "-v"])
