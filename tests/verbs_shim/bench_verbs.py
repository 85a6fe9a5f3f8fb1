#!/usr/bin/env python3
"""Issue 5's speed table: Debian's unmodified perftest through uroce (uroce-run) in the three setups —
one uroced's loopback port, two uroced over memif, two uroced in two network namespaces over a veth pair —
beside the kernel's TCP on loopback (qperf tcp_bw/tcp_lat, iperf3) and memcpy, all in the same run.

  bench_verbs.py BUILD_DIR [--scale S] [--setup loopback|memif|veth ...]

Rates are computed from perftest's own message rate (MsgRate[Mpps] × size: decimal GB/s); latencies are
perftest's t_typical (median) and 99% percentile. perftest's and qperf's latencies are both one-way
(half the round trip), so they compare directly. Prints a Markdown table with the targets and whether each
is met; a failed run is a row that says FAILED (and the exit status is 1).
"""
import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from daemon_harness import SETUPS, huge_pages_added, is_root, stats, tempdir  # noqa: E402
from server_client import run_server_client  # noqa: E402

GB = 1e9
TIMEOUT = 180

# (program, size, extra options, what is measured)
PERFTEST = [
    ("ib_write_bw", 65536, [], "bw"),
    # Buffers on SysV shared memory of huge pages (shmget SHM_HUGETLB), which uroced maps itself
    # (emulator/daemon/shared_mappings.hpp); needs huge pages, reserved for the run as root.
    ("ib_write_bw", 65536, ["--use_hugepages"], "bw"),
    ("ib_send_bw", 64, [], "rate"),
    ("ib_write_bw", 64, [], "rate"),
    ("ib_send_lat", 2, [], "lat"),
    ("ib_send_lat", 2, ["-e"], "lat"),
    ("ib_write_lat", 2, [], "lat"),
]
ITERATIONS = {"bw": 5000, "rate": 200000, "lat": 5000}

# perftest's result line: after the "#bytes ..." header, the first line starting with a number.
BW_LINE = re.compile(r"^\s*#bytes\s+#iterations\s+BW peak.*\n\s*(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)", re.M)
LAT_LINE = re.compile(r"^\s*#bytes\s+#iterations\s+t_min.*\n\s*(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)"
                      r"\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)", re.M)


HUGE_PAGES_FOR_RUN = 64  # 2 MiB each: both perftest processes' buffers, with room to spare


def perftest(uroce_run, server_socket, client_socket, program, size, extra, kind, scale):
    iterations = max(200, int(ITERATIONS[kind] * scale))
    command = [program, "-d", "uroce0", "-x", "0", "-p", str(random.randint(20000, 40000)),
               "-s", str(size), "-n", str(iterations), *extra]
    r = run_server_client(uroce_run, server_socket, client_socket, command, " ".join(command), TIMEOUT)
    r.assert_both_exited_0()
    if kind == "lat":
        m = LAT_LINE.search(r.client.stdout)
        assert m, f"no latency table:\n{r.client.stdout}"
        return {"median_us": float(m.group(5)), "p99_us": float(m.group(8))}  # (7) is t_stdev
    m = BW_LINE.search(r.client.stdout)
    assert m, f"no bandwidth table:\n{r.client.stdout}"
    mpps = float(m.group(5))
    return {"msgs_per_s": mpps * 1e6, "gbytes_per_s": mpps * 1e6 * size / GB}


def qperf_tcp(seconds):
    """The kernel's TCP on loopback as qperf measures it: bandwidth (GB/s) and one-way latency (us)."""
    port = str(random.randint(20000, 40000))
    server = subprocess.Popen(["qperf", "-lp", port], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.3)
        out = subprocess.run(["qperf", "-lp", port, "-t", str(seconds), "-m", "65536", "localhost", "tcp_bw",
                              "-m", "2", "tcp_lat"], capture_output=True, text=True, timeout=TIMEOUT)
    finally:
        server.kill()
        server.wait()
    bw = re.search(r"bw\s*=\s*([\d.]+)\s*([KMG])B/sec", out.stdout)
    lat = re.search(r"latency\s*=\s*([\d.]+)\s*(us|ms|ns)", out.stdout)
    assert bw and lat, f"qperf printed no results:\n{out.stdout}{out.stderr}"
    scale = {"K": 1e3, "M": 1e6, "G": 1e9}[bw.group(2)]
    lat_us = float(lat.group(1)) * {"us": 1.0, "ms": 1e3, "ns": 1e-3}[lat.group(2)]
    return float(bw.group(1)) * scale / GB, lat_us


def iperf3_tcp(seconds):
    port = str(random.randint(20000, 40000))
    server = subprocess.Popen(["iperf3", "-s", "-1", "-p", port], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.3)
        out = subprocess.run(["iperf3", "-c", "127.0.0.1", "-p", port, "-t", str(seconds), "-J"],
                             capture_output=True, text=True, timeout=TIMEOUT)
    finally:
        server.kill()
        server.wait()
    return json.loads(out.stdout)["end"]["sum_received"]["bits_per_second"] / 8 / GB


def rnr_naks_sent(uroce, socket):
    """RNR NAKs the server's daemon has sent: a receiver that fell behind (each costs its sender the RNR
    timer, 0.64 ms for perftest), shown beside the message rates."""
    return stats(uroce, socket)["device"]["rnr_naks_sent"]


def memcpy_gbps(tool, size):
    out = subprocess.run([tool, "--memcpy", "--size", str(size), "--count", "200000"], capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout)["gbytes_per_s"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply iteration counts and durations")
    ap.add_argument("--setup", action="append", choices=list(SETUPS), help="only these setups (default: all)")
    args = ap.parse_args()
    uroced = os.path.join(args.build, "emulator", "uroced")
    uroce_run = os.path.join(args.build, "verbs_shim", "uroce-run")
    tool = os.path.join(args.build, "emulator", "tools", "uroce-rdma-test")
    uroce = os.path.join(args.build, "pcap_tools", "uroce")
    missing = [p for p in ("ib_write_bw", "qperf", "iperf3") if not shutil.which(p)]
    if missing:
        print("missing programs (scripts/deps.sh installs them):", " ".join(missing))
        return 1

    seconds = max(1, round(3 * args.scale))
    tcp_bw, tcp_lat = qperf_tcp(seconds)
    iperf_bw = iperf3_tcp(seconds)
    copy = memcpy_gbps(tool, 65536)
    rows, failed = [], 0
    results = {}
    with tempdir() as d, huge_pages_added(HUGE_PAGES_FOR_RUN) as huge_pages:
        have_huge_pages = huge_pages > 0
        for setup in args.setup or ["loopback", "memif", "veth"]:
            if setup == "veth" and not is_root():
                rows.append((setup, "(all)", "", "skipped: needs root", "", ""))
                continue
            with SETUPS[setup](uroced, d) as (_, server_socket, client_socket):
                for program, size, extra, kind in PERFTEST:
                    name = " ".join([program, *extra])
                    if "--use_hugepages" in extra and not have_huge_pages:
                        rows.append((setup, name, size, "skipped: no huge pages (needs root)", "", ""))
                        continue
                    try:
                        before = rnr_naks_sent(uroce, server_socket)
                        results[(setup, name, size)] = r = perftest(uroce_run, server_socket, client_socket,
                                                                    program, size, extra, kind, args.scale)
                        r["rnr_naks"] = rnr_naks_sent(uroce, server_socket) - before
                    except (AssertionError, subprocess.TimeoutExpired) as e:
                        failed += 1
                        rows.append((setup, name, size, "FAILED", "", str(e).splitlines()[0][:120]))
                        continue
                    rows.append(row(setup, name, size, kind, r, tcp_bw, tcp_lat))

    print("\n## Verbs programs through uroce (perftest via uroce-run) beside the kernel's TCP and memcpy\n")
    print(f"Reference, same run: TCP on loopback {tcp_bw:.2f} GB/s (qperf tcp_bw 64 KiB), {iperf_bw:.2f} GB/s "
          f"(iperf3); TCP one-way latency {tcp_lat:.1f} us (qperf tcp_lat 2 B, half the round trip); "
          f"memcpy 64 KiB {copy:.1f} GB/s.\n")
    header = ("setup", "test", "bytes", "result", "target", "met")
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for r in rows:
        print("| " + " | ".join(str(x) for x in r) + " |")
    return 1 if failed else 0


def row(setup, name, size, kind, r, tcp_bw, tcp_lat):
    """One table row with its target (issue 5: targets apply to the loopback port)."""
    on_loopback = setup == "loopback"
    if kind == "bw":
        target = "≥ 4 GB/s and > TCP" if on_loopback else ""
        met = (r["gbytes_per_s"] >= 4 and r["gbytes_per_s"] > tcp_bw) if on_loopback else None
        text = f"{r['gbytes_per_s']:.2f} GB/s ({r['gbytes_per_s'] / tcp_bw:.2f} × TCP)"
    elif kind == "rate":
        target = "≥ 1.5 M msg/s" if on_loopback else ""
        met = r["msgs_per_s"] >= 1.5e6 if on_loopback else None
        text = f"{r['msgs_per_s'] / 1e6:.2f} M msg/s"
        if name == "ib_send_bw":
            text += f" ({r['rnr_naks']} RNR NAKs)"
    else:
        target = f"< TCP ({tcp_lat:.1f} us)"
        met = r["median_us"] < tcp_lat
        text = f"median {r['median_us']:.1f} us, p99 {r['p99_us']:.1f} us"
    return (setup, name, size, text, target, "" if met is None else ("yes" if met else "no"))


if __name__ == "__main__":
    sys.exit(main())
