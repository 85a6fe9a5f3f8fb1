#!/usr/bin/env python3
"""`uroce` on mirrored and tunnelled captures: rxe's real captures with every frame wrapped as a switch's
port mirror sends it (ERSPAN types I, II and III in GRE), as an overlay carries it (GRE transparent Ethernet
bridging, VXLAN) or as routers do (IP in GRE), over outer IPv4 and IPv6, and tunnels inside tunnels (a
mirror of VXLAN traffic, an overlay in an overlay) (tunnels.py); and a capture Linux's
own tunnel drivers made (tests/data/interop/linux-mirror.pcap). Every command must see through the tunnel:
dissect shows the same lines with how each frame came at the end, check, explain and replay tell the same
story, each frame once however many mirror sessions carried it, and tshark, an independent decoder, agrees
with the tunnel's fields and with every RoCE field of the frames inside.

Usage: test_tunnels_cli.py UROCE_BINARY CAPTURE_DIR
"""
import json
import os
import re
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

# name: (wrap(frame, i) -> bytes, the tag dissect ends each line with)
VARIANTS = {
    "erspan1": (lambda f, i: tunnels.erspan_i(f), "ERSPAN type I"),
    "erspan2": (lambda f, i: tunnels.erspan_ii(f, session=100, sequence=i, vlan=5, cos=3, index=77),
                "ERSPAN type II session 100"),
    "erspan2_v6": (lambda f, i: tunnels.erspan_ii(f, session=7, sequence=i, v6=True), "ERSPAN type II session 7"),
    "erspan3": (lambda f, i: tunnels.erspan_iii(f, session=1023, sequence=i, timestamp=1000 + i, sgt=42, hw_id=9,
                                                egress=True), "ERSPAN type III session 1023"),
    "erspan3_platform": (lambda f, i: tunnels.erspan_iii(f, session=12, sequence=i, timestamp=i, vlan=100,
                                                         platform=(3, 0x1234)), "ERSPAN type III session 12"),
    "gretap": (lambda f, i: tunnels.gretap(f, key=0x10203), "GRE key 66051"),
    "ip_in_gre_v6": (lambda f, i: tunnels.ip_in_gre(f, v6=True), "GRE"),
    "vxlan": (lambda f, i: tunnels.vxlan(f, vni=5001), "VXLAN VNI 5001"),
    "vxlan_v6": (lambda f, i: tunnels.vxlan(f, vni=0xABCDEF, v6=True), "VXLAN VNI 11259375"),
    # Tunnels inside tunnels: a port mirror of an overlay's traffic, and an overlay carried in another.
    "erspan2_vxlan": (lambda f, i: tunnels.erspan_ii(tunnels.vxlan(f, vni=5001), session=100, sequence=i),
                      "ERSPAN type II session 100 / VXLAN VNI 5001"),
    "vxlan_v6_gretap": (lambda f, i: tunnels.vxlan(tunnels.gretap(f, key=7), vni=9, v6=True), "VXLAN VNI 9 / GRE key 7"),
}
CAPTURE_NAMES = ["01-rc-send-pingpong.pcap", "10-rdma-cm-rping.pcap", "11-rc-write-loss5.pcap"]


def uroce(*args):
    return subprocess.run([UROCE, *args], capture_output=True, text=True, timeout=120)


def dissect_lines(path):
    res = uroce("dissect", path)
    return res.returncode, res.stdout.splitlines()


def without_link_layer(lines):
    """Frames a tunnel carries as IP packets (IP in GRE) show IP addresses where ARP shows MACs: ARP is not IP
    and cannot be carried so; such lines are left out of the comparison."""
    return [l for l in lines if " ARP " not in l]


class TunnelledCaptures(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="uroce-tunnel-test-")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def original(self, name):
        return os.path.join(CAPTURES, name)

    def wrapped(self, name, variant, records=None):
        """The capture `name` with every frame wrapped as `variant` says (ARP too, except for IP in GRE)."""
        path = os.path.join(self.tmp, f"{variant}-{name}")
        if os.path.exists(path) and records is None:
            return path
        wrap, _ = VARIANTS[variant]
        _, recs = pcapfile.read(self.original(name))
        out = []
        for i, (sec, usec, _, frame) in enumerate(recs if records is None else records):
            if variant.startswith("ip_in_gre") and frame[12:14] not in (b"\x08\x00", b"\x86\xdd"):
                continue
            w = wrap(bytes(frame), i)
            out.append((sec, usec, len(w), w))
        pcapfile.write(path, pcapfile.LINKTYPE_ETHERNET, out)
        return path

    def test_dissect_shows_the_carried_frames_and_how_they_came(self):
        for name in CAPTURE_NAMES:
            status, plain = dissect_lines(self.original(name))
            self.assertEqual(status, 0)
            for variant, (_, tag) in VARIANTS.items():
                with self.subTest(capture=name, variant=variant):
                    status, lines = dissect_lines(self.wrapped(name, variant))
                    self.assertEqual(status, 0)
                    want = [f"{l}  [{tag}]" for l in plain]
                    if variant.startswith("ip_in_gre"):
                        want, lines = without_link_layer(want), without_link_layer(lines)
                        # frame numbers differ where the ARP frames were left out: compare from the addresses on
                        want = [l.split(None, 2)[2] for l in want]
                        lines = [l.split(None, 2)[2] for l in lines]
                    self.assertEqual(lines, want)
                    self.assertTrue(any("ICRC ok" in l for l in lines))

    def test_check_explain_and_replay_tell_the_same_story(self):
        for name in CAPTURE_NAMES:
            lossy = ["--lossy"] if "loss" in name else []
            for variant in ("erspan2", "erspan3_platform", "vxlan_v6", "gretap"):
                with self.subTest(capture=name, variant=variant):
                    path = self.wrapped(name, variant)
                    for cmd in (["check"], ["replay", "--side", "both", *lossy], ["explain"]):
                        plain, tunnelled = uroce(*cmd, self.original(name)), uroce(*cmd, path)
                        self.assertEqual(tunnelled.returncode, plain.returncode, cmd)
                        got = tunnelled.stdout.replace(path, "CAPTURE").splitlines()
                        want = plain.stdout.replace(self.original(name), "CAPTURE").splitlines()
                        if cmd == ["explain"]:
                            # explain says, under its first line, which tunnels the frames came through
                            _, tag = VARIANTS[variant]
                            self.assertRegex(got.pop(1), rf"^\d+ frames came through {tag} from \S+ to \S+$")
                        self.assertEqual(got, want, cmd)

    @unittest.skipIf(TSHARK is None, "tshark is not installed")
    def test_tshark_agrees_on_every_roce_field_inside(self):
        for name in CAPTURE_NAMES:
            for variant in VARIANTS:
                with self.subTest(capture=name, variant=variant):
                    tshark_compare.assert_agreement(self, UROCE, TSHARK, self.wrapped(name, variant))

    @unittest.skipIf(TSHARK is None, "tshark is not installed")
    def test_tshark_agrees_on_the_tunnel_fields(self):
        # (tshark field, uroce's "tunnel" member); tshark's first occurrence is the outer header's.
        erspan = [("erspan.spanid", "session"), ("erspan.vlan", "vlan"), ("erspan.cos", "cos"),
                  ("erspan.truncated", "truncated"), ("gre.sequence_number", "gre_sequence")]
        fields = {
            "erspan2": erspan + [("erspan.encap", "encap"), ("erspan.index", "index")],
            "erspan2_v6": erspan + [("erspan.index", "index"), ("ipv6.src", "src"), ("ipv6.dst", "dst")],
            "erspan3": erspan + [("erspan.bso", "bso"), ("erspan.timestamp", "timestamp"), ("erspan.sgt", "sgt"),
                                 ("erspan.hw", "hw_id"), ("erspan.direction", "direction"),
                                 ("erspan.gra", "granularity"), ("erspan.ft", "frame_type"),
                                 ("erspan.p", "pdu_frame")],
            "erspan3_platform": erspan + [("erspan.timestamp", "timestamp"), ("erspan.platid", "platform_id")],
            "gretap": [("gre.key", "gre_key"), ("ip.src", "src"), ("ip.dst", "dst")],
            "vxlan": [("vxlan.vni", "vni"), ("ip.src", "src")],
            "vxlan_v6": [("vxlan.vni", "vni"), ("ipv6.dst", "dst")],
        }
        for variant, pairs in fields.items():
            with self.subTest(variant=variant):
                path = self.wrapped(CAPTURE_NAMES[0], variant)
                cmd = [TSHARK, "-r", path, "-T", "fields", "-E", "occurrence=f", "-E", "separator=\t"]
                for f, _ in pairs:
                    cmd += ["-e", f]
                theirs = [l.split("\t") for l in subprocess.run(cmd, check=True, capture_output=True,
                                                                text=True).stdout.splitlines()]
                res = uroce("dissect", "--json", path)
                ours = [json.loads(l)["tunnel"] for l in res.stdout.splitlines()]
                self.assertEqual(len(theirs), len(ours))
                compared = 0
                for t_row, o in zip(theirs, ours):
                    for (f, key), text in zip(pairs, t_row):
                        mine = o[key]
                        if key == "direction":
                            mine = mine == "egress"
                        if isinstance(mine, bool):
                            self.assertEqual(text in ("1", "True", "true"), mine, f)
                        elif isinstance(mine, int):
                            self.assertEqual(int(text, 0), mine, f)
                        else:
                            self.assertEqual(text, mine, f)
                        compared += 1
                self.assertGreater(compared, len(ours))

    def test_explain_names_the_tunnels_inside_tunnels(self):
        name = CAPTURE_NAMES[0]
        path = self.wrapped(name, "erspan2_vxlan")
        got = uroce("explain", path).stdout.replace(path, "CAPTURE").splitlines()
        want = uroce("explain", self.original(name)).stdout.replace(self.original(name), "CAPTURE").splitlines()
        self.assertRegex(got.pop(1), r"^\d+ frames came through ERSPAN type II session 100 from \S+ to \S+, "
                                     r"in it VXLAN VNI 5001 from \S+ to \S+$")
        self.assertEqual(got, want)
        rows = [json.loads(l) for l in uroce("dissect", "--json", path).stdout.splitlines()]
        self.assertEqual({(r["tunnel"]["kind"], r["tunnel_2"]["kind"], r["tunnel_2"]["vni"]) for r in rows},
                         {("ERSPAN type II", "VXLAN", 5001)})

    def test_a_frame_mirrored_twice_is_told_once_and_retransmissions_stay(self):
        # rxe's lossy capture (go-back-N retransmissions, NAKs) as two mirror sessions saw it: every frame
        # twice, the second copy a microsecond after the first. Only the copies are left out. The IPv4
        # identification is made 0 throughout, as RFC 6864 lets a sender of unfragmentable datagrams do, so
        # that a retransmission is the very same packet again (as over IPv6): only the tunnel tells it from
        # a copy.
        name = "11-rc-write-loss5.pcap"
        _, recs = pcapfile.read(self.original(name))
        out = []
        for i, (sec, usec, _, frame) in enumerate(recs):
            if frame[12:14] == b"\x08\x00":
                ihl = (frame[14] & 0x0F) * 4
                frame[18:20] = frame[24:26] = b"\0\0"
                frame[24:26] = struct.pack(">H", tunnels.ipv4_checksum(bytes(frame[14:14 + ihl])))
                if pcapfile.roce_offset(frame) is not None:
                    pcapfile.fix_icrc(frame)  # (the ICRC covers the identification)
            first = tunnels.erspan_ii(bytes(frame), session=1, sequence=i)
            second = tunnels.erspan_iii(bytes(frame), session=2, sequence=i, timestamp=i, egress=True)
            out += [(sec, usec, len(first), first), (sec, usec + 1, len(second), second)]
        path = os.path.join(self.tmp, "twice.pcap")
        pcapfile.write(path, pcapfile.LINKTYPE_ETHERNET, out)
        n = len(recs)
        explain = uroce("explain", path).stdout.splitlines()
        self.assertIn(f"{n} frames came through ERSPAN type III session 2 from 10.99.0.1 to 10.99.0.2 "
                      "(all copies of frames another tunnel carried first)", explain)
        self.assertIn(f"Each frame is told once: {n} mirror copies are left out.", explain)
        plain = uroce("explain", self.original(name)).stdout.splitlines()
        flows = plain.index("Flows (one direction of one queue pair each):")
        self.assertEqual(explain[explain.index(plain[flows]):], plain[flows:])  # retransmissions counted as before
        self.assertRegex("\n".join(plain[flows:]), r"RC +\d+ +\d+ +\d+ +[1-9]")  # (there are some)
        check = uroce("check", path)
        self.assertEqual(check.returncode, 0)
        self.assertIn(f"{n} more frames left out as mirror copies", check.stdout)
        replay = uroce("replay", "--lossy", path)
        self.assertEqual(replay.returncode, 0, replay.stdout)
        plain_replay = uroce("replay", "--lossy", self.original(name)).stdout.splitlines()
        self.assertEqual(replay.stdout.splitlines()[3:], plain_replay[2:])
        lines = dissect_lines(path)[1]
        self.assertTrue(lines[1].endswith("[ERSPAN type III session 2, a copy of #1]"), lines[1])
        self.assertTrue(lines[0].endswith("[ERSPAN type II session 1]"), lines[0])

    def test_a_ce_mark_set_between_mirror_points_is_told(self):
        # rxe's WRITEs as two mirror sessions saw them, a switch between the two marking some packets CE
        # (IPv4 ECN 3; the ICRC leaves the TOS out). Frame 4 of the capture was marked after the first
        # mirror point: only its second copy carries the mark, which explain tells on that copy. Frame 6 was
        # marked before both: told once, on the first copy. Everything else is told as without marks.
        name = "05-rc-write.pcap"
        _, recs = pcapfile.read(self.original(name))

        def mirrored(marks):
            out = []
            for i, (sec, usec, _, frame) in enumerate(recs):
                copies = [bytearray(frame), bytearray(frame)]
                for c, marked in zip(copies, marks.get(i, (False, False))):
                    if marked:
                        c[15] |= 0x03
                        c[24:26] = b"\0\0"
                        c[24:26] = struct.pack(">H", tunnels.ipv4_checksum(bytes(c[14:34])))
                first = tunnels.erspan_ii(bytes(copies[0]), session=1, sequence=i)
                second = tunnels.erspan_iii(bytes(copies[1]), session=2, sequence=i, timestamp=i, egress=True)
                out += [(sec, usec, len(first), first), (sec, usec + 1, len(second), second)]
            path = os.path.join(self.tmp, f"ce-{len(marks)}.pcap")
            pcapfile.write(path, pcapfile.LINKTYPE_ETHERNET, out)
            return path

        self.assertTrue(pcapfile.roce_offset(recs[3][3]) and pcapfile.roce_offset(recs[5][3]))
        marked = uroce("explain", mirrored({3: (False, True), 5: (True, True)})).stdout.splitlines()
        unmarked = uroce("explain", mirrored({})).stdout.splitlines()
        told = [l for l in marked if "ECN Congestion Experienced" in l]
        self.assertEqual(len(told), 2, "\n".join(told))
        # Frame 4 is #7 and #8 in the mirrored capture, frame 6 #11 and #12.
        self.assertRegex(told[0], r"^ +#8 +A +this mirror copy of #7 carries ECN Congestion Experienced, which #7 "
                                  r"did not: a switch between the two mirror points marked it; the receiver should "
                                  r"answer with a CNP$")
        self.assertRegex(told[1], r"^ +#11 +A +this packet carries ECN Congestion Experienced")
        self.assertEqual([l for l in marked if l not in told][1:], unmarked[1:])

    def test_linux_mirrors(self):
        """Linux's own ERSPAN, gretap and VXLAN drivers mirrored rxe's traffic with uroce (tests/data/README.md):
        each tunnel carried every RoCE frame uroced captured directly, and the story is the same."""
        data = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "interop")
        mirror, direct = os.path.join(data, "linux-mirror.pcap"), os.path.join(data, "linux-mirror-direct.pcap")
        roce = lambda lines: [l.split(None, 2)[2] for l in lines if " psn " in l]  # noqa: E731
        status, lines = dissect_lines(mirror)
        self.assertEqual(status, 0)
        want = sorted(roce(dissect_lines(direct)[1]))
        self.assertEqual(len(want), 81)
        tags = ["ERSPAN type II session 100", "ERSPAN type III session 200", "ERSPAN type III session 300",
                "GRE key 400", "VXLAN VNI 5001"]
        for tag in tags:
            with self.subTest(tunnel=tag):
                carried = [l.rsplit("  [", 1)[0] for l in lines if f"[{tag}" in l]
                self.assertEqual(sorted(roce(carried)), want)
        self.assertTrue(all("ICRC ok" in l for l in lines if " psn " in l))
        self.assertNotIn("MALFORMED", "\n".join(lines))
        # The tunnels' fields as Linux set them (the interop script's ip link commands).
        rows = [json.loads(l) for l in uroce("dissect", "--json", mirror).stdout.splitlines()]
        # (the dummy interface's own IPv6 router solicitation is no tunnel's)
        tunnelled = [r["tunnel"] for r in rows if "tunnel" in r]
        self.assertEqual(len(tunnelled), len(rows) - 1)
        t = {r["kind"] + str(r.get("session", r.get("vni", r.get("gre_key")))): r for r in tunnelled}
        self.assertEqual(t["ERSPAN type II100"]["index"], 77)
        self.assertEqual((t["ERSPAN type III200"]["direction"], t["ERSPAN type III200"]["hw_id"]), ("egress", 9))
        self.assertEqual((t["ERSPAN type III300"]["direction"], t["ERSPAN type III300"]["hw_id"]), ("ingress", 3))
        self.assertEqual(t["ERSPAN type III300"]["src"], "fd00:200::1")
        self.assertEqual(t["GRE400"]["gre_key"], 400)
        self.assertIn("VXLAN5001", t)
        if TSHARK is not None:
            _, fields, problems = tshark_compare.compare(UROCE, TSHARK, mirror)
            self.assertEqual(problems, [])
            self.assertGreater(fields, 81 * 5)
        # explain, check and replay tell what the direct capture tells, each frame once.
        flows = "Flows (one direction of one queue pair each):"
        told, plain = uroce("explain", mirror).stdout, uroce("explain", direct).stdout
        self.assertEqual(told[told.index(flows):], plain[plain.index(flows):])
        self.assertIn("Each frame is told once: 380 mirror copies are left out.", told)
        # The story's lines of each flow, in their order (the two capture points see the two directions
        # interleaved differently, and number the frames differently).
        def by_flow(text):
            story = [re.match(r"^ +#[\d-]+ +([A-F]) +(.*)$", l) for l in text.splitlines()]
            return {f: [m.group(2) for m in story if m and m.group(1) == f] for f in "ABCDEF"}
        self.assertEqual(by_flow(told), by_flow(plain))
        self.assertEqual(len(by_flow(told)["A"]), 20)
        self.assertIn("81 RoCE", uroce("check", mirror).stdout)
        replay, replay_direct = uroce("replay", "--side", "both", mirror), uroce("replay", "--side", "both", direct)
        self.assertEqual(replay.returncode, 0, replay.stdout)
        self.assertEqual(replay.stdout.splitlines()[3:], replay_direct.stdout.splitlines()[2:])

    def test_frames_cut_short(self):
        _, recs = pcapfile.read(self.original(CAPTURE_NAMES[0]))
        big = next(bytes(r[3]) for r in recs if len(r[3]) > 1000)
        # The mirror cut the frame (its MTU) and said so with ERSPAN's T bit.
        cut = tunnels.erspan_ii(big[:200], session=3, sequence=0, truncated=True)
        # The collector's snaplen cut the whole packet: 150 of its bytes captured.
        whole = tunnels.erspan_ii(big, session=4, sequence=1)
        path = os.path.join(self.tmp, "cut.pcap")
        pcapfile.write(path, pcapfile.LINKTYPE_ETHERNET, [(1, 0, len(cut), cut), (1, 1, len(whole), whole[:150])])
        status, lines = dissect_lines(path)
        self.assertEqual(status, 0)
        self.assertEqual(len(lines), 2)
        self.assertIn("MALFORMED", lines[0])
        self.assertIn("(frame cut by the mirror)", lines[0])
        self.assertTrue(lines[0].endswith("[ERSPAN type II session 3]"), lines[0])
        self.assertIn("MALFORMED", lines[1])
        self.assertIn("(frame cut by the capture's snaplen)", lines[1])
        self.assertTrue(lines[1].endswith("[ERSPAN type II session 4]"), lines[1])
        self.assertIn("10.77.0.12 → 10.77.0.11", lines[1])  # the inner addresses were read

    def test_what_is_no_tunnel_is_shown_as_it_is(self):
        _, recs = pcapfile.read(self.original(CAPTURE_NAMES[0]))
        frame = next(bytes(r[3]) for r in recs if len(r[3]) > 1000)
        gre_v1 = tunnels.outer_ip(struct.pack(">HH", 0x2001, 0x880B) + b"\0" * 8 + frame, 47)  # PPTP's GRE
        routing = tunnels.outer_ip(struct.pack(">HH", 0x4000, 0x6558) + frame, 47)  # RFC 1701 routing
        other = tunnels.outer_ip(tunnels.gre(0x1234, frame), 47)
        short = tunnels.outer_ip(struct.pack(">HH", 0x3000, 0x88BE) + b"\0\0", 47)  # key and sequence announced
        no_vni = bytearray(tunnels.vxlan(frame, vni=1))
        no_vni[14 + 20 + 8] = 0  # the I flag cleared
        # An outer IP length past the frame that no snaplen explains: malformed, not looked through.
        bad_length = bytearray(tunnels.erspan_ii(frame, session=1, sequence=0))
        bad_length[16:18] = struct.pack(">H", len(bad_length))
        frames = [gre_v1, routing, other, short, bytes(no_vni), bytes(bad_length)]
        path = os.path.join(self.tmp, "not-tunnels.pcap")
        pcapfile.write(path, pcapfile.LINKTYPE_ETHERNET, [(1, i, len(f), f) for i, f in enumerate(frames)])
        status, lines = dissect_lines(path)
        self.assertEqual(status, 0)
        for line in lines[:4]:
            self.assertIn("IP protocol 47 (not RoCE)", line)
        self.assertIn("UDP 49152 → 4789 (not RoCE)", lines[4])
        self.assertIn("MALFORMED", lines[5])
        self.assertNotIn("[", "".join(lines))
        res = uroce("dissect", "--json", path)
        self.assertTrue(all("tunnel" not in json.loads(l) for l in res.stdout.splitlines()))


def main():
    global UROCE, CAPTURES
    UROCE, CAPTURES = sys.argv[1], sys.argv[2]
    unittest.main(argv=[sys.argv[0], "-v"])


if __name__ == "__main__":
    main()
