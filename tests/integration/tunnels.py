"""Wraps Ethernet frames as a switch's port mirror or a tunnel sends them, for tests of `uroce` on such
captures: ERSPAN type I, II and III in GRE (draft-foschiano-erspan-03), GRE's transparent Ethernet bridging
and IP in GRE (RFC 2784, RFC 2890), VXLAN (RFC 7348); outer IPv4 or IPv6. tshark decodes every one of them,
which is what the tests compare against."""
import struct

OUTER_SRC_MAC = bytes.fromhex("02aa00000001")
OUTER_DST_MAC = bytes.fromhex("02aa00000002")


def ipv4_checksum(header):
    total = sum(struct.unpack(f">{len(header) // 2}H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def outer_ip(payload, protocol, v6=False, ident=1):
    """The outer Ethernet and IP headers around `payload` (protocol 47 GRE or 17 UDP)."""
    if v6:
        src = bytes.fromhex("fd0000000000000000000000000000a1")
        dst = bytes.fromhex("fd0000000000000000000000000000a2")
        ip = struct.pack(">IHBB", 6 << 28, len(payload), protocol, 64) + src + dst
        return OUTER_DST_MAC + OUTER_SRC_MAC + b"\x86\xdd" + ip + payload
    header = bytearray(struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), ident & 0xFFFF, 0x4000, 64,
                                   protocol, 0, bytes([10, 99, 0, 1]), bytes([10, 99, 0, 2])))
    header[10:12] = struct.pack(">H", ipv4_checksum(bytes(header)))
    return OUTER_DST_MAC + OUTER_SRC_MAC + b"\x08\x00" + bytes(header) + payload


def gre(protocol, payload, key=None, sequence=None, checksum=False):
    flags = (0x8000 if checksum else 0) | (0x2000 if key is not None else 0) | (0x1000 if sequence is not None else 0)
    out = struct.pack(">HH", flags, protocol)
    if checksum:
        out += b"\x00\x00\x00\x00"  # (its value is not checked: tshark reports it, uroce skips it)
    if key is not None:
        out += struct.pack(">I", key)
    if sequence is not None:
        out += struct.pack(">I", sequence)
    return out + payload


def erspan_i(frame, v6=False):
    return outer_ip(gre(0x88BE, frame), 47, v6)


def erspan_ii(frame, session, sequence, vlan=0, cos=0, encap=0, truncated=False, index=0, v6=False):
    word0 = 1 << 12 | vlan
    word1 = cos << 13 | encap << 11 | int(truncated) << 10 | session
    header = struct.pack(">HHI", word0, word1, index & 0xFFFFF)
    return outer_ip(gre(0x88BE, header + frame, sequence=sequence), 47, v6)


def erspan_iii(frame, session, sequence, timestamp, vlan=0, cos=0, bso=0, truncated=False, sgt=0, hw_id=0,
               egress=False, granularity=3, frame_type=0, platform=None, v6=False):
    word0 = 2 << 12 | vlan
    word1 = cos << 13 | bso << 11 | int(truncated) << 10 | session
    word5 = (1 if frame_type == 0 else 0) << 15 | frame_type << 10 | hw_id << 4 | int(egress) << 3 | \
        granularity << 1 | int(platform is not None)
    header = struct.pack(">HHIHH", word0, word1, timestamp, sgt, word5)
    if platform is not None:  # (platform ID, 58 bits of its own): here ID 3, a port index and upper time
        platform_id, rest = platform
        header += struct.pack(">Q", platform_id << 58 | rest)
    return outer_ip(gre(0x22EB, header + frame, sequence=sequence), 47, v6)


def gretap(frame, key=None, v6=False):
    return outer_ip(gre(0x6558, frame, key=key, checksum=True), 47, v6)


def ip_in_gre(frame, v6=False):
    """The frame's IP packet (its Ethernet header dropped) in GRE, as between two routers."""
    ethertype = struct.unpack(">H", frame[12:14])[0]
    return outer_ip(gre(ethertype, frame[14:]), 47, v6)


def vxlan(frame, vni, v6=False, source_port=49152):
    payload = struct.pack(">BBHI", 0x08, 0, 0, vni << 8) + frame
    udp = struct.pack(">HHHH", source_port, 4789, 8 + len(payload), 0) + payload
    return outer_ip(udp, 17, v6)
