#!/usr/bin/env python3
"""Sends hand-made frames out of a kernel interface to a uroced on the other end, and reports what came
back: a neighbour's ARP request and ping (answered), and hostile RoCE traffic (dropped and counted).

Usage (inside the namespace of the interface): inject_frames.py IFACE OUR_IP DAEMON_IP
Prints one JSON object: {"arp_reply_mac": ..., "ping_replied": bool, "sent": {...}}
"""
import json
import os
import random
import socket
import struct
import sys
import time
import zlib

ETH_P_ALL = 0x0003
OUR_MAC = bytes.fromhex("020000000099")


def checksum(data):
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def ipv4(src, dst, proto, payload, ttl=64):
    h = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), 1, 0, ttl, proto, 0, src, dst)
    return h[:10] + struct.pack("!H", checksum(h)) + h[12:] + payload


def roce(src_ip, dst_ip, dst_qp, psn, payload=b"\0" * 16, opcode=0x04, corrupt=False):
    """An RC SEND_ONLY with a correct ICRC (or a corrupted one)."""
    bth = struct.pack("!BBHI I", opcode, 0x40, 0xFFFF, dst_qp & 0xFFFFFF, psn & 0xFFFFFF)
    udp_len = 8 + len(bth) + len(payload) + 4
    udp = struct.pack("!HHHH", 0xC000, 4791, udp_len, 0)
    ip = ipv4(src_ip, dst_ip, 17, udp + bth + payload + b"\0" * 4)[:20]
    # ICRC: CRC-32 over 8 bytes of 0xFF, the IP header with TOS, TTL and checksum masked, the UDP header
    # with its checksum masked, the BTH with its reserved byte masked, and the payload.
    m_ip = bytearray(ip)
    m_ip[1] = 0xFF
    m_ip[8] = 0xFF
    m_ip[10:12] = b"\xff\xff"
    m_udp = bytearray(udp)
    m_udp[6:8] = b"\xff\xff"
    m_bth = bytearray(bth)
    m_bth[4] = 0xFF
    icrc = zlib.crc32(b"\xff" * 8 + bytes(m_ip) + bytes(m_udp) + bytes(m_bth) + payload)
    if corrupt:
        icrc ^= 1
    return ip + udp + bth + payload + struct.pack("<I", icrc)


def main():
    iface, our_ip_text, daemon_ip_text = sys.argv[1:4]
    our_ip, daemon_ip = socket.inet_aton(our_ip_text), socket.inet_aton(daemon_ip_text)
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    s.bind((iface, 0))
    s.settimeout(0.2)
    bcast = b"\xff" * 6

    def send(dst_mac, ethertype, payload):
        s.send(dst_mac + OUR_MAC + struct.pack("!H", ethertype) + payload)

    def wait_for(pred, seconds=3.0):
        end = time.time() + seconds
        while time.time() < end:
            try:
                f = s.recv(65535)
            except socket.timeout:
                continue
            r = pred(f)
            if r is not None:
                return r
        return None

    result = {"sent": {}}
    # ARP: who has the daemon's address?
    arp = struct.pack("!HHBBH6s4s6s4s", 1, 0x0800, 6, 4, 1, OUR_MAC, our_ip, b"\0" * 6, daemon_ip)
    send(bcast, 0x0806, arp)
    mac = wait_for(lambda f: f[6:12].hex(":") if f[12:14] == b"\x08\x06" and f[20:22] == b"\x00\x02"
                   and f[28:32] == daemon_ip and f[32:38] == OUR_MAC else None)
    result["arp_reply_mac"] = mac
    daemon_mac = bytes.fromhex(mac.replace(":", "")) if mac else bcast

    # Ping.
    icmp = struct.pack("!BBHHH", 8, 0, 0, 0x1234, 1) + b"uroce ping"
    icmp = icmp[:2] + struct.pack("!H", checksum(icmp)) + icmp[4:]
    send(daemon_mac, 0x0800, ipv4(our_ip, daemon_ip, 1, icmp))
    result["ping_replied"] = wait_for(lambda f: True if f[12:14] == b"\x08\x00" and f[23] == 1 and f[34] == 0
                                      and f[38:40] == b"\x12\x34" else None) is True

    # Hostile RoCE and junk: nothing of this may crash the daemon; each kind has its counter.
    kinds = {
        "bad_icrc": [roce(our_ip, daemon_ip, 0x11, 5, corrupt=True) for _ in range(20)],
        "unknown_qp": [roce(our_ip, daemon_ip, 0xABCDE, 5) for _ in range(20)],
        "truncated_roce": [roce(our_ip, daemon_ip, 0x11, 5)[:n] for n in range(20, 48)],
        "junk": [bytes(random.getrandbits(8) for _ in range(random.randint(1, 200))) for _ in range(50)],
    }
    for kind, frames in kinds.items():
        for f in frames:
            send(daemon_mac, 0x0800, f)
        result["sent"][kind] = len(frames)
    time.sleep(0.3)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
