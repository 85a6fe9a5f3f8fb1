#!/usr/bin/env python3
"""Plays a switch that pauses one 802.1p priority: sends PFC frames out of a kernel interface, each
holding PRIORITY for 65535 quanta, every INTERVAL_MS for DURATION_MS, then one that releases it (XON).

Usage (inside the namespace of the interface): inject_pfc.py IFACE PRIORITY DURATION_MS [INTERVAL_MS]
Prints one JSON object: {"frames": n, "seconds": s}
"""
import json
import socket
import sys
import time

import pcapfile

SWITCH_MAC = bytes.fromhex("02000000fc01")


def pfc(priority, quanta):
    times = [0] * 8
    times[priority] = quanta
    return bytes(pcapfile.pfc_frame(SWITCH_MAC, 1 << priority, times))


def main():
    iface, priority, duration_ms = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    interval = (float(sys.argv[4]) if len(sys.argv) > 4 else 1.0) / 1000
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    s.bind((iface, 0))
    pause, xon = pfc(priority, 0xFFFF), pfc(priority, 0)
    start = time.monotonic()
    frames = 0
    while time.monotonic() - start < duration_ms / 1000:
        s.send(pause)
        frames += 1
        time.sleep(interval)
    s.send(xon)
    print(json.dumps({"frames": frames + 1, "seconds": time.monotonic() - start}))


if __name__ == "__main__":
    main()
