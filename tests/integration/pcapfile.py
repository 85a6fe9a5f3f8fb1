"""Classic-pcap reading and writing for tests (so tests can craft damaged or unusual captures). The reader is
scripts/pcap_records.py's, which the interop harness uses too."""
import os
import struct
import sys
import zlib

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from pcap_records import read  # noqa: E402,F401 - pcapfile.read is the tests' name for it

LINKTYPE_ETHERNET = 1
LINKTYPE_LINUX_SLL = 113
LINKTYPE_RAW = 101


def write(path, linktype, records):
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, linktype))
        for sec, usec, origlen, frame in records:
            f.write(struct.pack("<IIII", sec, usec, len(frame), origlen))
            f.write(bytes(frame))


def mac_control_frame(src, opcode, body, dst=b"\x01\x80\xc2\x00\x00\x01"):
    """A MAC Control frame (ethertype 0x8808): the opcode, then `body`, zero-padded to 60 bytes."""
    f = dst + src + b"\x88\x08" + struct.pack(">H", opcode) + body
    return bytearray(f + b"\x00" * (60 - len(f)))


def pfc_frame(src, enabled, quanta, reserved=0):
    """PFC (802.1Qbb): the class-enable vector (`reserved` its upper byte), then eight times in quanta."""
    return mac_control_frame(src, 0x0101, struct.pack(">BB8H", reserved, enabled, *quanta))


def pause_frame(src, quanta):
    """PAUSE (802.3x): one time for the whole link."""
    return mac_control_frame(src, 0x0001, struct.pack(">H", quanta))


def roce_offset(frame):
    """Offset of the BTH in an untagged IPv4 Ethernet frame carrying UDP 4791, else None."""
    if len(frame) < 14 + 20 + 8 + 12 or frame[12:14] != b"\x08\x00" or frame[23] != 17:
        return None
    ihl = (frame[14] & 0x0F) * 4
    udp = 14 + ihl
    if struct.unpack(">H", frame[udp + 2:udp + 4])[0] != 4791:
        return None
    return udp + 8


def fix_icrc(frame):
    """Recomputes the ICRC of an untagged IPv4 RoCEv2 frame in place, after a test changed its bytes: CRC-32
    over 8 bytes of 0xFF, the IP header with TOS, TTL and checksum masked, the UDP header with its checksum
    masked, the BTH with its reserved byte masked, and everything after the BTH up to the ICRC."""
    bth = roce_offset(frame)
    assert bth is not None, "not an IPv4 RoCEv2 frame"
    ip = bytearray(frame[14:bth - 8])
    ip[1] = 0xFF
    ip[8] = 0xFF
    ip[10:12] = b"\xff\xff"
    udp = bytearray(frame[bth - 8:bth])
    udp[6:8] = b"\xff\xff"
    rest = bytearray(frame[bth:len(frame) - 4])
    rest[4] = 0xFF
    frame[-4:] = struct.pack("<I", zlib.crc32(b"\xff" * 8 + bytes(ip) + bytes(udp) + bytes(rest)))
