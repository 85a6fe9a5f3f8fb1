#!/usr/bin/env python3
"""End-to-end tests of `uroce replay`: rxe's captured requests fed into uroce's responder, its answers set
beside rxe's (the same replay as tests/unit/transport/test_capture_replay.cpp, through the command line),
and with --side requester the work requests behind rxe's requests posted to uroce's requester, its
requests and completions set beside rxe's (tests/unit/transport/test_requester_replay.cpp), on the real
captures and on copies changed on purpose.

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
import socket
import unittest

import inject_frames
import pcapfile

UROCE = None
CAPTURES = None
LOSSY = "11-rc-write-loss5.pcap"
SUMMARY = re.compile(r"^(\d+) of (\d+) connections answered as captured$", re.M)
REQUESTER_SUMMARY = re.compile(
    r"^(\d+) of (\d+) connections sent and completed as captured \(requester side\)(?:, (\d+) skipped: .*)?$", re.M)
RC_WRITE_ONLY = 0x0a


def replay(*args, stdin=None):
    return subprocess.run([UROCE, "replay", *args], capture_output=True, input=stdin, timeout=120)


def text(res):
    return res.stdout.decode(errors="replace")


class ReplayCli(unittest.TestCase):
    def capture(self, name):
        return os.path.join(CAPTURES, name)

    def clean_rc_captures(self):
        return [name for name in sorted(os.listdir(CAPTURES))
                if name.endswith(".pcap") and not name.startswith("03-") and name != LOSSY]  # 03: UD only

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

    def test_coalesced_acknowledgements(self):
        """A responder that acknowledges several requests with one ACK (as uroced does): rxe's capture with
        every ACK but the last of each connection taken out. Compared exactly it differs, and the output
        says that uroce only acknowledged more often; --coalesced passes it, and still replays the
        requester side (the last ACK acknowledges everything); a changed remaining ACK still fails."""
        linktype, records = pcapfile.read(self.capture("05-rc-write.pcap"))
        is_ack = [pcapfile.roce_offset(r[3]) is not None and r[3][pcapfile.roce_offset(r[3])] == 0x11 for r in records]
        last_ack = {}
        for i, r in enumerate(records):
            if is_ack[i]:
                bth = pcapfile.roce_offset(r[3])
                last_ack[bytes(r[3][bth + 5:bth + 8])] = i  # per connection: the requester's QP
        kept = [r for i, r in enumerate(records) if not is_ack[i] or i in last_ack.values()]
        self.assertLess(len(kept), len(records) - 2)
        with tempfile.TemporaryDirectory() as tmp:
            coalesced = os.path.join(tmp, "coalesced.pcap")
            pcapfile.write(coalesced, linktype, kept)
            exact = replay(coalesced)
            self.assertEqual(exact.returncode, 1, text(exact))
            self.assertIn("a responder that coalesces acknowledgements (--coalesced)", text(exact))
            rows = [json.loads(line) for line in text(replay("--json", coalesced)).splitlines()]
            self.assertTrue(rows and all(row["only_more_acks"] for row in rows), rows)
            res = replay("--coalesced", "--side", "both", coalesced)
            self.assertEqual(res.returncode, 0, text(res))
            self.assertEqual(SUMMARY.search(text(res)).group(1, 2), ("2", "2"))
            self.assertEqual(REQUESTER_SUMMARY.search(text(res)).group(1, 2), ("2", "2"), text(res))
            # The one ACK left of a connection says another MSN: --coalesced does not hide that.
            frame = next(r[3] for r in kept if pcapfile.roce_offset(r[3]) is not None
                         and r[3][pcapfile.roce_offset(r[3])] == 0x11)
            aeth = pcapfile.roce_offset(frame) + 12
            frame[aeth + 3] ^= 0x01
            pcapfile.fix_icrc(frame)
            pcapfile.write(coalesced, linktype, kept)
            res = replay("--coalesced", coalesced)
            self.assertEqual(res.returncode, 1, text(res))
            self.assertNotIn("(--coalesced)", text(res))

    def test_default_side_is_the_responder(self):
        out = text(replay(self.capture("06-rc-read.pcap")))
        self.assertIn("Connection 1, responder side:", out)
        self.assertNotIn("requester side", out)

    def test_requester_side_sends_as_rxe_did(self):
        """The work requests behind rxe's requests, posted to uroce's requester with rxe's answers fed back:
        uroce sends the same requests and completes every work request as rxe's answers say."""
        connections = 0
        for name in self.clean_rc_captures():
            res = replay("--side", "requester", self.capture(name))
            out = text(res)
            self.assertEqual(res.returncode, 0, f"{name}:\n{out}\n{res.stderr.decode()}")
            same, total, skipped = REQUESTER_SUMMARY.search(out).groups()
            self.assertEqual(int(same), int(total), f"{name}:\n{out}")
            self.assertIsNone(skipped, f"{name}:\n{out}")
            self.assertNotIn("differ", out)
            self.assertNotIn("responder side", out)
            self.assertRegex(out, r"uroce sent (\d+) requests, the capture shows \1: the same, in order")
            connections += int(total)
        self.assertGreaterEqual(connections, 11)

    def changed_request_capture(self, tmp):
        """A copy of 05-rc-write.pcap whose third 64-byte WRITE to QP 0x11 has its AckReq bit cleared (ICRC
        fixed); returns the path and that request's place among the connection's requests."""
        linktype, records = pcapfile.read(self.capture("05-rc-write.pcap"))
        writes = [r[3] for r in records if pcapfile.roce_offset(r[3]) is not None
                  and r[3][pcapfile.roce_offset(r[3])] == RC_WRITE_ONLY
                  and r[3][pcapfile.roce_offset(r[3]) + 5:pcapfile.roce_offset(r[3]) + 8] == b"\x00\x00\x11"]
        frame = writes[2]
        bth = pcapfile.roce_offset(frame)
        self.assertTrue(frame[bth + 8] & 0x80, "rxe asks for an ACK of every WRITE")
        frame[bth + 8] &= 0x7f
        pcapfile.fix_icrc(frame)
        path = os.path.join(tmp, "changed-request.pcap")
        pcapfile.write(path, linktype, records)
        return path, 2

    def test_changed_request_is_the_one_difference(self):
        with tempfile.TemporaryDirectory() as tmp:
            changed, index = self.changed_request_capture(tmp)
            res = replay("--side", "requester", "--json", changed)
            text_res = replay("--side", "requester", changed)
        self.assertEqual(res.returncode, 1, res.stderr)
        rows = [json.loads(line) for line in text(res).splitlines()]
        self.assertEqual([row["side"] for row in rows], ["requester", "requester"])
        diffs = [d for row in rows for d in row["differences"] + row["completion_differences"]]
        self.assertEqual(len(diffs), 1, rows)
        self.assertEqual(diffs[0]["index"], index)
        self.assertEqual(diffs[0]["uroce"]["ack_req"], True)
        self.assertEqual(diffs[0]["captured"]["ack_req"], False)
        self.assertEqual(diffs[0]["differs_in"], "AckReq (uroce 1, captured 0)")
        self.assertEqual([row["outcome"] for row in rows], ["different", "same"])
        out = text(text_res)
        self.assertEqual(text_res.returncode, 1, out)
        self.assertIn("1 of 2 connections sent and completed as captured (requester side)", out)
        self.assertRegex(out, rf"request {index}: uroce RC RDMA_WRITE_ONLY psn \d+ A .* \| captured RC RDMA_WRITE_ONLY "
                              r"psn \d+ qp .* -- AckReq \(uroce 1, captured 0\)")

    def test_atomic_write_both_sides(self):
        """An ATOMIC WRITE (IBTA 1.5, Linux 6.2's rxe; none in this project's rxe captures, so made here as
        rxe sends it) and its answer, an empty READ RESPONSE ONLY: uroce's requester sends the same request
        for the work request behind it and completes it on that answer; uroce's responder answers the same."""
        a, b = socket.inet_aton("192.0.2.1"), socket.inet_aton("192.0.2.2")
        a_to_b = bytes.fromhex("020000000002020000000001" "0800")
        b_to_a = bytes.fromhex("020000000001020000000002" "0800")
        request = bytearray(a_to_b + inject_frames.roce(a, b, 0x12, 100, struct.pack("!QII", 0x1000, 0x201, 8)
                                                        + bytes(range(1, 9)), opcode=0x1D))
        request[pcapfile.roce_offset(request) + 8] |= 0x80  # AckReq
        pcapfile.fix_icrc(request)
        answer = bytearray(b_to_a + inject_frames.roce(b, a, 0x11, 100, struct.pack("!I", 0x1F000001), opcode=0x10))
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "atomic-write.pcap")
            pcapfile.write(path, pcapfile.LINKTYPE_ETHERNET, [(1, 0, len(request), request), (1, 1, len(answer), answer)])
            res = replay("--side", "both", path)
        out = text(res)
        self.assertEqual(res.returncode, 0, f"{out}\n{res.stderr.decode()}")
        self.assertIn("uroce sent 1 requests, the capture shows 1: the same, in order", out)
        self.assertIn("uroce completed 1 work requests, the capture's answers complete 1: the same", out)
        self.assertIn("uroce answered with 1 packets, the capture shows 1: the same, in order", out)

    def test_both_sides(self):
        res = replay("--side", "both", self.capture("06-rc-read.pcap"))
        out = text(res)
        self.assertEqual(res.returncode, 0, out)
        self.assertIn("2 of 2 connections answered as captured", out)
        self.assertIn("2 of 2 connections sent and completed as captured (requester side)", out)
        sides = re.findall(r"^Connection \d+, (\w+) side:", out, re.M)
        self.assertEqual(sides, ["responder", "responder", "requester", "requester"])
        self.assertLess(SUMMARY.search(out).start(), out.index("Connection 1, requester side"))

        res = replay("--side", "both", "--json", self.capture("06-rc-read.pcap"))
        self.assertEqual(res.returncode, 0, res.stderr)
        rows = [json.loads(line) for line in text(res).splitlines()]
        self.assertEqual([row["side"] for row in rows], ["responder", "responder", "requester", "requester"])
        self.assertTrue(all(row["same"] and row["outcome"] == "same" for row in rows), rows)

    def test_requester_json_rows(self):
        res = replay("--side", "requester", "--json", self.capture("08-rc-imm-zerolen-read-atomic.pcap"))
        self.assertEqual(res.returncode, 0, res.stderr)
        rows = [json.loads(line) for line in text(res).splitlines()]
        self.assertEqual(len(rows), 1)
        row = rows[0]
        self.assertEqual(row["side"], "requester")
        self.assertEqual(row["outcome"], "same")
        self.assertTrue(row["same"])
        self.assertEqual(row["matched"], row["captured_requests"])
        self.assertEqual(row["uroce_requests"], row["captured_requests"])
        self.assertGreater(row["work_requests"], 0)
        self.assertEqual(row["captured_completions"], row["work_requests"])
        self.assertEqual(row["matched_completions"], row["captured_completions"])
        self.assertEqual(row["differences"], [])
        self.assertEqual(row["completion_differences"], [])

    def test_requester_side_skips_the_lossy_capture(self):
        """Retransmissions depend on timers and on what was lost: the requester side says it cannot replay
        them, which is neither a pass nor a failure."""
        for args in ([], ["--lossy"]):
            res = replay("--side", "requester", *args, self.capture(LOSSY))
            out = text(res)
            self.assertEqual(res.returncode, 0, out)
            same, total, skipped = REQUESTER_SUMMARY.search(out).groups()
            self.assertEqual((int(same), int(total), int(skipped)), (0, 1, 1), out)
            self.assertRegex(out, r"\n  skipped: .*(not in the capture|retransmission|--lossy)")
        self.assertIn("skipped: --lossy:", out)
        res = replay("--side", "requester", "--json", self.capture(LOSSY))
        row = json.loads(text(res))
        self.assertEqual(row["outcome"], "skipped")
        self.assertFalse(row["same"])
        self.assertIn("a replay cannot reproduce", row["skipped"])
        # Both sides: the responder's exact comparison still fails this capture, so the status is 1.
        self.assertEqual(replay("--side", "both", self.capture(LOSSY)).returncode, 1)
        self.assertEqual(replay("--side", "both", "--lossy", self.capture(LOSSY)).returncode, 0)

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
            self.assertEqual(replay("--side", "both", damaged).returncode, 2)
        res = replay(os.path.join(CAPTURES, "no-such-file.pcap"))
        self.assertEqual(res.returncode, 2)
        # A bad command line is exit status 2 as well (not CLI11's 105), with the reason on stderr.
        res = replay("--mtu", "1000", self.capture("05-rc-write.pcap"))
        self.assertEqual(res.returncode, 2)
        self.assertIn("--mtu", res.stderr.decode())
        self.assertEqual(replay("--side", "neither", self.capture("05-rc-write.pcap")).returncode, 2)
        self.assertEqual(replay("--help").returncode, 0)


if __name__ == "__main__":
    UROCE, CAPTURES = sys.argv[1], sys.argv[2]
    unittest.main(argv=[sys.argv[0], "-v"])
