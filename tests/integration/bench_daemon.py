#!/usr/bin/env python3
"""uroced's throughput as the client library's own test program sees it, in the three setups of the
daemon tests: (a) one daemon's loopback port, (b) two daemons in two network namespaces over a veth pair,
(c) two daemons over memif; beside memcpy of the same message size measured in the same run.

Usage: bench_daemon.py BUILD_DIR [--count N]
Prints a Markdown table. Needs root for (b); without it that row says so.
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from daemon_harness import Daemon, is_root, run_pair, tempdir, two_namespaces_with_veth  # noqa: E402

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
        lo = Daemon(uroced, d, "lo")
        try:
            measure("(a) loopback", lo.socket, lo.socket, d)
        finally:
            lo.stop()
        if is_root():
            with two_namespaces_with_veth() as (ns, veth):
                a = Daemon(uroced, d, "va", ["--port", f"net_af_packet0,iface={veth[0]}", "--ip", "10.77.0.1"], ns[0])
                b = Daemon(uroced, d, "vb", ["--port", f"net_af_packet0,iface={veth[1]}", "--ip", "10.77.0.2"], ns[1])
                try:
                    measure("(b) veth, af_packet", a.socket, b.socket, d)
                finally:
                    a.stop()
                    b.stop()
        else:
            rows.append(("(b) veth, af_packet", "", "", "", "skipped: needs root", "", "", "", ""))
        sock = os.path.join(d, "memif.sock")
        a = Daemon(uroced, d, "ma", ["--port", f"net_memif0,role=server,socket={sock}", "--ip", "10.78.0.1"])
        b = Daemon(uroced, d, "mb", ["--port", f"net_memif0,role=client,socket={sock}", "--ip", "10.78.0.2"])
        try:
            measure("(c) memif", a.socket, b.socket, d)
        finally:
            a.stop()
            b.stop()

    header = ("setup", "operation", "bytes", "messages", "GB/s", "M msg/s", "memcpy GB/s (same size)", "ratio", "check")
    print("\n## uroced: uroce-rdma-test between two processes (every byte checked)\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for r in rows:
        print("| " + " | ".join(str(x) for x in r) + " |")


if __name__ == "__main__":
    main()
