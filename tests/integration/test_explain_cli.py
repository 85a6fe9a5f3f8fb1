#!/usr/bin/env python3
"""End-to-end tests of `uroce explain` on the real rxe captures.

Usage: test_explain_cli.py UROCE_BINARY CAPTURE_DIR
"""
import os
import pathlib
import re
import socket
import struct
import subprocess
import sys
import tempfile
import unittest

import inject_frames
import pcapfile

UROCE = None
CAPTURES = None


def explain(path):
    res = subprocess.run([UROCE, "explain", path], capture_output=True, text=True, timeout=60)
    return res


def flow_rows(stdout):
    """The closing flow table as {flow letter: {column: int}}."""
    lines = stdout.split("Flows (one direction of one queue pair each):\n")[1].splitlines()
    numeric = ["packets", "bytes", "messages", "retrans", "missing", "ACKs", "NAKs", "RNR", "CNP", "bad ICRC"]
    assert lines[0].split()[-11:] == numeric[:-1] + ["bad", "ICRC"], lines[0]
    rows = {}
    for line in lines[1:]:
        if not line.strip():
            break  # the end of the table (the link-level pauses may follow)
        name = line[:4].strip()
        values = line.split()[-len(numeric):]
        rows[name] = dict(zip(numeric, map(int, values)))
    return rows


class ExplainCli(unittest.TestCase):
    def capture(self, name):
        return os.path.join(CAPTURES, name)

    def test_clean_captures_have_no_loss(self):
        for name in ("01-rc-send-pingpong.pcap", "05-rc-write.pcap", "06-rc-read.pcap", "07-rc-atomic.pcap",
                     "08-rc-imm-zerolen-read-atomic.pcap", "10-rdma-cm-rping.pcap"):
            res = explain(self.capture(name))
            self.assertEqual(res.returncode, 0, res.stderr)
            self.assertNotIn("retransmitted", res.stdout, name)
            self.assertNotIn("missing", res.stdout.split("Flows")[0], name)
            for flow, row in flow_rows(res.stdout).items():
                self.assertEqual((row["retrans"], row["missing"], row["NAKs"], row["bad ICRC"]), (0, 0, 0, 0),
                                 f"{name} flow {flow}")

    def test_atomic_write_answer_told_from_a_zero_length_read(self):
        """An ATOMIC WRITE (0x1D) and a zero-length READ are both answered by an empty READ RESPONSE ONLY:
        the PSN says which request each answers."""
        a, b = socket.inet_aton("192.0.2.1"), socket.inet_aton("192.0.2.2")
        a_to_b = bytes.fromhex("020000000002020000000001" "0800")
        b_to_a = bytes.fromhex("020000000001020000000002" "0800")
        aeth_ack = lambda msn: struct.pack("!I", msn)  # noqa: E731 - syndrome 0: ACK
        frames = [
            a_to_b + inject_frames.roce(a, b, 0x12, 100, struct.pack("!QII", 0x1000, 0x201, 8) + bytes(range(8)),
                                        opcode=0x1D),
            b_to_a + inject_frames.roce(b, a, 0x11, 100, aeth_ack(1), opcode=0x10),
            a_to_b + inject_frames.roce(a, b, 0x12, 101, struct.pack("!QII", 0x2000, 0x201, 0), opcode=0x0C),
            b_to_a + inject_frames.roce(b, a, 0x11, 101, aeth_ack(2), opcode=0x10),
        ]
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "atomic-write.pcap")
            pcapfile.write(path, pcapfile.LINKTYPE_ETHERNET, [(1, i, len(f), f) for i, f in enumerate(frames)])
            res = explain(path)
        self.assertEqual(res.returncode, 0, res.stderr)
        story = res.stdout.split("Flows")[0]
        self.assertRegex(story, r"#1\s+A\s+RC ATOMIC WRITE of 8 bytes in 1 packet \(psn 100\) to va 0x1000 R_Key 0x201")
        self.assertRegex(story, r"#2\s+B\s+RC RDMA READ response of 0 bytes .*: answers the ATOMIC WRITE at psn 100 ")
        self.assertRegex(story, r"#4\s+B\s+RC RDMA READ response of 0 bytes .*: answers the READ request at psn 101")

    def test_pfc_pauses_beside_roce(self):
        """PFC frames a switch sent into a WRITE: a run of identical pauses is one line where the run began,
        a resume another; the RoCE story and flow table are those of the capture without them, and a table
        counts the pauses per sender and priority."""
        linktype, records = pcapfile.read(self.capture("05-rc-write.pcap"))
        switch = bytes.fromhex("02aabbccdd01")
        pause = pcapfile.pfc_frame(switch, 0x08, [0, 0, 0, 0xFFFF, 0, 0, 0, 0])
        resume = pcapfile.pfc_frame(switch, 0x08, [0] * 8)
        mixed = []
        for i, r in enumerate(records):
            mixed.append(r)
            if i in (0, 2, 4):
                mixed.append((r[0], r[1], 60, pause))
            elif i == 6:
                mixed.append((r[0], r[1], 60, resume))
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "pfc.pcap")
            pcapfile.write(path, linktype, mixed)
            res = explain(path)
        self.assertEqual(res.returncode, 0, res.stderr)
        plain = explain(self.capture("05-rc-write.pcap")).stdout
        self.assertEqual(flow_rows(res.stdout), flow_rows(plain))
        story = res.stdout.split("Flows")[0]
        self.assertRegex(story, r"#2-8\s+PFC from 02:aa:bb:cc:dd:01: pause priority 3 for 65535 quanta: 3\.36 ms at "
                                r"10 Gb/s, 336 µs at 100 Gb/s \(.*\) \(3 alike\)")
        self.assertRegex(story, r"#11\s+PFC from 02:aa:bb:cc:dd:01: resume priority 3 \(XON: the held frames may go")
        self.assertLess(story.index("pause priority 3"), story.index("resume priority 3"))
        self.assertEqual(len(re.findall("PFC from", story)), 2)
        table = res.stdout.split("Link-level pauses (PFC per priority; PAUSE stops all):\n")[1].splitlines()
        self.assertEqual(table[0].split(), ["sender", "priority", "pauses", "resumes", "quanta"])
        self.assertEqual(table[1].split(), ["02:aa:bb:cc:dd:01", "3", "3", "1", str(3 * 65535)])
        self.assertNotIn("Link-level pauses", plain)

    def test_rdma_cm_handshake(self):
        out = explain(self.capture("10-rdma-cm-rping.pcap")).stdout
        self.assertRegex(out, r"CM REQ: 10\.77\.0\.12 asks to connect its QP 0x000011 \(starting PSN 14977723, "
                              r"path MTU 1024.*rdma_cm port 7174 \(TCP port space\)")
        self.assertIn("CM REP: 10.77.0.11 accepts with its QP 0x000011 (starting PSN 10914491)", out)
        for step in ("CM RTU", "CM DREQ", "CM DREP"):
            self.assertIn(step, out)
        self.assertLess(out.index("CM REQ"), out.index("CM REP"))
        self.assertLess(out.index("CM RTU"), out.index("RC SEND"))

    def test_cm_message_that_does_not_decode(self):
        # rping's REQ with its MAD class version changed from 2 to 1 (the ICRC recomputed): named, with why
        # it was not decoded, and the rest of the capture is explained as before.
        with tempfile.TemporaryDirectory() as tmp:
            linktype, records = pcapfile.read(self.capture("10-rdma-cm-rping.pcap"))
            frame = records[2][3]
            mad = pcapfile.roce_offset(frame) + 12 + 8  # after the BTH and the DETH
            self.assertEqual(frame[mad + 1:mad + 4], b"\x07\x02\x03")  # class CM, version 2, method Send
            frame[mad + 2] = 1
            pcapfile.fix_icrc(frame)
            changed = os.path.join(tmp, "cm-v1.pcap")
            pcapfile.write(changed, linktype, records)
            res = explain(changed)
            self.assertEqual(res.returncode, 0, res.stderr)
            self.assertIn("#3  A  CM REQ (not decoded: bad class version)", res.stdout)
            self.assertNotIn("BAD ICRC", res.stdout)
            self.assertIn("CM REP: 10.77.0.11 accepts with its QP 0x000011", res.stdout)

    def test_operations_are_told(self):
        out = explain(self.capture("08-rc-imm-zerolen-read-atomic.pcap")).stdout
        self.assertIn("RC SEND of 3000 bytes in 3 packets", out)
        self.assertIn("with immediate data 0x22222222", out)
        self.assertIn("RC RDMA WRITE of 0 bytes in 1 packet", out)
        self.assertIn("RDMA READ request psn 15104888: asks for 3000 bytes", out)
        self.assertIn("RC RDMA READ response of 3000 bytes in 3 packets (psn 15104888..15104890)", out)
        self.assertRegex(out, r"FETCH_ADD psn \d+: add 5 to the 8 bytes")
        self.assertIn("ATOMIC ACK psn 15104891 (MSN 9): the value at the address was 1000 before", out)
        self.assertRegex(out, r"COMPARE_SWAP psn \d+: if the 8 bytes at .* equal 1005, replace them with 11259375")

    def test_loss_and_go_back_n(self):
        res = explain(self.capture("11-rc-write-loss5.pcap"))
        out = res.stdout
        self.assertEqual(res.returncode, 0)
        rows = flow_rows(out)
        self.assertEqual(rows["B"]["NAKs"], 8)
        self.assertEqual(out.count("NAK PSN sequence error"), 8)
        self.assertGreater(rows["A"]["retrans"], 0)
        self.assertGreater(rows["A"]["missing"], 0)
        self.assertIn("is missing: it was lost before the capture point", out)
        self.assertIn("retransmitted RC RDMA WRITE", out)
        # Every NAK is followed, later, by a retransmission starting at the NAKed PSN.
        for psn in re.findall(r"NAK PSN sequence error at psn (\d+)", out):
            after = out.split(f"NAK PSN sequence error at psn {psn}")[1]
            self.assertRegex(after, rf"retransmitted RC RDMA WRITE of \d+ bytes in \d+ packets? \(psn {psn}\b")
        # Only a resend resumes a message part-way; a message whose first packet was lost (frames 130-136:
        # psn 12751827 never appears, and is not resent in the capture) says so instead.
        for line in out.splitlines():
            if "go-back-N restarts" in line:
                self.assertIn("retransmitted RC RDMA WRITE", line)
        self.assertRegex(out, r"#130-136 .*RC RDMA WRITE of \d+ bytes in 7 packets \(psn 12751828\.\.12751834\); "
                              r"psn 12751827 is missing: .*; the message began in what was lost")

    def test_capture_starting_inside_a_message(self):
        with tempfile.TemporaryDirectory() as tmp:
            linktype, records = pcapfile.read(self.capture("05-rc-write.pcap"))
            cut = os.path.join(tmp, "cut.pcap")
            rc_write_middle = 0x07
            first_middle = next(i for i, r in enumerate(records)
                                if pcapfile.roce_offset(r[3]) is not None and r[3][pcapfile.roce_offset(r[3])] == rc_write_middle)
            pcapfile.write(cut, linktype, records[first_middle:])
            out = explain(cut).stdout
            self.assertIn("the capture starts part-way through this message", out)
            self.assertNotIn("go-back-N restarts", out)

    def test_bad_icrc_and_damaged_file(self):
        with tempfile.TemporaryDirectory() as tmp:
            linktype, records = pcapfile.read(self.capture("01-rc-send-pingpong.pcap"))
            frame = records[2][3]
            frame[pcapfile.roce_offset(frame) + 20] ^= 0x40
            flipped = os.path.join(tmp, "flipped.pcap")
            pcapfile.write(flipped, linktype, records)
            out = explain(flipped).stdout
            self.assertIn("has a BAD ICRC", out)
            self.assertEqual(flow_rows(out)["A"]["bad ICRC"], 1)
            damaged = os.path.join(tmp, "damaged.pcap")
            pathlib.Path(damaged).write_bytes(pathlib.Path(flipped).read_bytes()[:5000])
            res = explain(damaged)
            self.assertEqual(res.returncode, 2)
            self.assertIn("damaged capture", res.stderr)


if __name__ == "__main__":
    UROCE, CAPTURES = sys.argv[1], sys.argv[2]
    unittest.main(argv=[sys.argv[0], "-v"])
