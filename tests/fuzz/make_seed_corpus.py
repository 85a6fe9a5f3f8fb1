#!/usr/bin/env python3
"""Writes every frame of the given pcap files into SEED_DIR, one file each, and a PFC and a PAUSE frame:
the fuzzer's seed corpus.
With --sequences SEQ_WORK_DIR SEQ_DIR, also each capture's frames as one file in SEQ_DIR, each frame a
2-byte little-endian length and its bytes (at most 64 KiB per file: the first frames that fit), for
fuzz_capture_tools.

Usage: make_seed_corpus.py --work WORK_DIR [--sequences SEQ_WORK_DIR SEQ_DIR] SEED_DIR CAPTURE...
The work directories (where libFuzzer keeps what it finds) are created too, since libFuzzer requires them.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "integration"))
import pcapfile  # noqa: E402
import tunnels  # noqa: E402
from inject_frames import roce  # noqa: E402

SEQUENCE_LIMIT = 64 * 1024
args = sys.argv[1:]
assert args[0] == "--work", __doc__
os.makedirs(args[1], exist_ok=True)
args = args[2:]
sequences = None
if args[0] == "--sequences":
    os.makedirs(args[1], exist_ok=True)
    sequences = args[2]
    os.makedirs(sequences, exist_ok=True)
    args = args[3:]
out = args[0]
os.makedirs(out, exist_ok=True)
n = 0
for path in args[1:]:
    _, records = pcapfile.read(path)
    if sequences:
        seq = bytearray()
        for _, _, _, frame in records:
            if len(seq) + 2 + len(frame) > SEQUENCE_LIMIT:
                break
            seq += len(frame).to_bytes(2, "little") + frame
        with open(os.path.join(sequences, os.path.basename(path)), "wb") as f:
            f.write(bytes(seq))
    for i, (_, _, _, frame) in enumerate(records):
        with open(os.path.join(out, f"{os.path.basename(path)}-{i:04d}"), "wb") as f:
            f.write(bytes(frame))
        n += 1
# No capture here holds link-level flow control: a PFC and a PAUSE frame, so the fuzzers start inside the
# MAC Control parser too.
switch = bytes.fromhex("02aabbccdd01")
for name, frame in (("pfc", pcapfile.pfc_frame(switch, 0x18, [0, 0, 0, 0xFFFF, 0, 0, 0, 0])),
                    ("pause", pcapfile.pause_frame(switch, 0x2000))):
    with open(os.path.join(out, f"mac-control-{name}"), "wb") as f:
        f.write(bytes(frame))
    n += 1
# Nor XRC: an XRC SEND_ONLY (with its XRCETH) and an XRC ACK, so the fuzzers start at those headers too.
eth = bytes.fromhex("020000000002" "020000000001" "0800")
a, b = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])
for name, frame in (("xrc-send-only", eth + roce(a, b, 0x11, 5, (0x123).to_bytes(4, "big") + b"x" * 16, opcode=0xA4)),
                    ("xrc-ack", eth + roce(b, a, 0x12, 5, bytes.fromhex("1f000001"), opcode=0xB1))):
    with open(os.path.join(out, name), "wb") as f:
        f.write(frame)
    n += 1
# Nor tunnels: one RoCE frame as a port mirror (ERSPAN II, ERSPAN III with its platform subheader) and
# overlays (GRE, VXLAN over IPv6) carry it, so the fuzzers start inside the tunnel headers too.
inner = eth + roce(a, b, 0x11, 5, b"y" * 32)
for name, frame in (("erspan-ii", tunnels.erspan_ii(inner, session=100, sequence=1)),
                    ("erspan-iii", tunnels.erspan_iii(inner, session=5, sequence=2, timestamp=3, platform=(3, 1))),
                    ("gretap", tunnels.gretap(inner, key=9)),
                    ("vxlan-v6", tunnels.vxlan(inner, vni=5001, v6=True)),
                    ("erspan-ii-vxlan", tunnels.erspan_ii(tunnels.vxlan(inner, vni=7), session=3, sequence=4))):
    with open(os.path.join(out, f"tunnel-{name}"), "wb") as f:
        f.write(frame)
    n += 1
# Nor QinQ: the frame under an 802.1ad service tag and an 802.1Q customer tag.
with open(os.path.join(out, "qinq"), "wb") as f:
    f.write(inner[:12] + bytes.fromhex("88a8a0c8" "81006064") + inner[12:])
n += 1
# Nor IPv6 router discovery: a Router Advertisement from fe80::2 to all-nodes with its link-layer option, an
# autonomous /64 (SLAAC forms an address under it) and an on-link-only prefix, its checksum right, so the
# fuzzers start inside the advertisement's options and SLAAC's rules too.


def ones_complement_sum(data):
    data += bytes(len(data) % 2)
    total = sum(int.from_bytes(data[i:i + 2], "big") for i in range(0, len(data), 2))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return total


def prefix_option(prefix, flags, valid, preferred):
    return bytes([3, 4, 64, flags]) + valid.to_bytes(4, "big") + preferred.to_bytes(4, "big") + bytes(4) + prefix


router, all_nodes = bytes.fromhex("fe800000000000000000000000000002"), bytes.fromhex("ff020000000000000000000000000001")
message = (bytes([134, 0, 0, 0, 64, 0]) + (1800).to_bytes(2, "big") + bytes(8) +
           bytes([1, 1]) + bytes.fromhex("020000000002") +
           prefix_option(bytes.fromhex("fd810001000000000000000000000000"), 0xC0, 86400, 14400) +
           prefix_option(bytes.fromhex("fd810002000000000000000000000000"), 0x80, 3600, 0))
pseudo = router + all_nodes + len(message).to_bytes(4, "big") + bytes([0, 0, 0, 58])
checksum = 0xFFFF - ones_complement_sum(pseudo + message)
message = message[:2] + checksum.to_bytes(2, "big") + message[4:]
ipv6 = bytes([0x60, 0, 0, 0]) + len(message).to_bytes(2, "big") + bytes([58, 255]) + router + all_nodes
with open(os.path.join(out, "router-advertisement"), "wb") as f:
    f.write(bytes.fromhex("333300000001" "020000000002" "86dd") + ipv6 + message)
n += 1
print(f"{n} seed frames in {out}")
