#!/usr/bin/env python3
"""uroced's throughput as the client library's own test program sees it, in the three setups of the
daemon tests: (a) one daemon's loopback port, (b) two daemons in two network namespaces over a veth pair,
(c) two daemons over memif (at MTU 1500 and 4200); beside memcpy of the same message size measured in the same run.

Usage: bench_daemon.py BUILD_DIR [--count N]
Prints a Markdown table. Needs root for (b); without it that row says so.
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from daemon_harness import SETUPS, is_root, run_pair, tempdir  # noqa: E402

CASES = [("write", 65536, 20000), ("read", 65536, 20000), ("send", 64, 200000), ("send", 4096, 100000)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply the message counts")
    args = ap.parse_args()
    uroced = os.path.join(args.build, "emulator", "uroced")
    tool = os.path.join(args.build, "emulator", "tools", "uroce-rdma-test")
    rows = []

    def memcpy(size, count):
        out = subprocess.run([tool, "--memcpy", "--size", str(size), "--count", str(count * 10)],
                             capture_output=True, text=True, check=True)
        return json.loads(out.stdout)["gbytes_per_s"]

    def measure(setup, server_socket, client_socket, work_dir):
        for op, size, count in CASES:
            count = max(100, int(count * args.scale))
            result, crc, src, err = run_pair(tool, work_dir, server_socket, client_socket, op, size, count, timeout=120)
            ref = memcpy(size, count)
            if crc != 0 or src != 0 or not result or not result["verified"]:
                rows.append((setup, op, size, count, "FAILED", "", f"{ref:.2f}", "", err.strip().splitlines()[-1:] or ""))
                continue
            rows.append((setup, op, size, count, f"{result['gbytes_per_s']:.3f}",
                         f"{result['messages_per_s'] / 1e6:.3f}", f"{ref:.2f}",
                         f"{result['gbytes_per_s'] / ref:.3f}", "verified"))

    with tempdir() as d:
        # (c) twice: at memif's ethdev MTU 1500 (path MTU 1024), and at --mtu 4200 (path MTU 4096).
        for label, setup, extra in (("(a) loopback", "loopback", ()), ("(b) veth, af_packet", "veth", ()),
                                    ("(c) memif", "memif", ()), ("(c) memif, --mtu 4200", "memif", ("--mtu", "4200"))):
            if setup == "veth" and not is_root():
                rows.append((label, "", "", "", "skipped: needs root", "", "", "", ""))
                continue
            with SETUPS[setup](uroced, d, extra) as (_, server_socket, client_socket):
                measure(label, server_socket, client_socket, d)

    header = ("setup", "operation", "bytes", "messages", "GB/s", "M msg/s", "memcpy GB/s (same size)", "ratio", "check")
    print("\n## uroced: uroce-rdma-test between two processes (every byte checked)\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for r in rows:
        print("| " + " | ".join(str(x) for x in r) + " |")


if __name__ == "__main__":
    main()
