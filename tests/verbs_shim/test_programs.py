#!/usr/bin/env python3
"""Debian's unmodified ibverbs-utils against a uroced, through the verbs shim (uroce-run).

Starts one uroced on its loopback port, then runs ibv_devices, ibv_devinfo (-v) and ibv_rc_pingpong
server + client (both on the loopback; their out-of-band exchange is TCP on localhost) with several sizes,
MTUs and event mode. Exits 0 only if every case passed; the daemon is stopped by its PID at the end.

  test_programs.py --uroced build/.../emulator/uroced --uroce-run build/.../verbs_shim/uroce-run
"""
import argparse
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from daemon_harness import Daemon  # noqa: E402
from server_client import run_server_client  # noqa: E402

TIMEOUT = 60
RESULT = re.compile(r"\d+ bytes in [\d.]+ seconds")


def run(uroce_run, socket, args, timeout=TIMEOUT):
    return subprocess.run([uroce_run, "--socket", socket, *args], capture_output=True, text=True, timeout=timeout)


def check_devices(uroce_run, socket):
    out = run(uroce_run, socket, ["ibv_devices"])
    assert out.returncode == 0, out.stderr
    assert re.search(r"^\s+uroce0\s+[0-9a-f]{16}$", out.stdout, re.M), out.stdout


def check_devinfo(uroce_run, socket, verbose):
    out = run(uroce_run, socket, ["ibv_devinfo", *(["-v"] if verbose else [])])
    assert out.returncode == 0, out.stdout + out.stderr
    for want in ("hca_id:\turoce0", "PORT_ACTIVE", "link_layer:\t\tEthernet"):
        assert want in out.stdout, f"{want!r} missing:\n{out.stdout}"
    if verbose:
        assert re.search(r"GID\[\s*0\]:\s+::ffff:\d+\.\d+\.\d+\.\d+, RoCE v2", out.stdout), out.stdout


def check_pingpong(uroce_run, socket, extra):
    port = str(random.randint(20000, 40000))
    command = ["ibv_rc_pingpong", "-p", port, "-d", "uroce0", "-g", "0", "-n", "200", *extra]
    r = run_server_client(uroce_run, socket, socket, command, " ".join(extra) or "default", TIMEOUT)
    r.assert_both_exited_0()
    assert RESULT.search(r.client.stdout) and RESULT.search(r.server_out), r.client.stdout + r.server_out


# --- perftest (Debian package perftest) ---------------------------------------------------------------
# Server and client of each test on the same daemon's loopback port; perftest's own out-of-band exchange is
# TCP on localhost (-p: a fresh port per case). Short iteration counts: a few seconds per case on 2 cores.
# perftest keeps uroce on classic ibv_post_send (its ibv_wr* API is only for an allowlist of vendor parts).
PERFTEST_TABLE = re.compile(r"^\s*#bytes\s.*\n\s*\d+\s+\d+\s+[\d.]+", re.M)
PERFTEST_CASES = [
    ("ib_write_bw", ["-n", "200"]),
    ("ib_send_bw", ["-n", "200"]),
    ("ib_read_bw", ["-n", "200"]),
    ("ib_write_lat", ["-n", "200"]),
    ("ib_send_lat", ["-n", "200"]),
    ("ib_read_lat", ["-n", "200"]),
    ("ib_atomic_bw", ["-n", "200"]),
    ("ib_atomic_lat", ["-n", "200"]),
    ("ib_send_bw", ["-e", "-n", "200"]),       # completion channel (ib_write_* refuse -e themselves)
    ("ib_send_lat", ["-e", "-n", "200"]),
    ("ib_send_bw", ["-b", "-n", "200"]),       # bidirectional
    ("ib_write_bw", ["-q", "4", "-n", "100"]),  # several QPs
]


def check_perftest(uroce_run, socket, program, extra):
    port = str(random.randint(20000, 40000))
    command = [program, "-d", "uroce0", "-x", "0", "-p", port, *extra]
    r = run_server_client(uroce_run, socket, socket, command, " ".join([program, *extra]), TIMEOUT)
    r.assert_both_exited_0()
    assert PERFTEST_TABLE.search(r.client.stdout), f"no results table ({r.what}):\n{r.client.stdout}"


def perftest_cases(uroce_run, socket):
    """The perftest cases, or none (with a note) when the package is not installed."""
    if not all(shutil.which(p) for p, _ in PERFTEST_CASES):
        print("perftest not installed (apt-get install perftest): its cases are skipped")
        return []
    return [(" ".join([p, *extra]), lambda p=p, extra=extra: check_perftest(uroce_run, socket, p, extra))
            for p, extra in PERFTEST_CASES]
# --- end of perftest ------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--uroced", required=True)
    ap.add_argument("--uroce-run", required=True)
    args = ap.parse_args()
    missing = [p for p in ("ibv_devices", "ibv_devinfo", "ibv_rc_pingpong") if not shutil.which(p)]
    if missing:
        print("missing programs (apt-get install ibverbs-utils):", " ".join(missing))
        return 1
    workdir = tempfile.mkdtemp(prefix="uroce-shim-")
    daemon = Daemon(args.uroced, workdir, "u")
    cases = [
        ("ibv_devices", lambda: check_devices(args.uroce_run, daemon.socket)),
        ("ibv_devinfo", lambda: check_devinfo(args.uroce_run, daemon.socket, False)),
        ("ibv_devinfo -v", lambda: check_devinfo(args.uroce_run, daemon.socket, True)),
    ]
    for extra in ([], ["-s", "1"], ["-s", "65536"], ["-m", "1024"], ["-m", "4096", "-s", "4096"], ["-e"],
                  ["-e", "-s", "65536"]):
        cases.append(("ibv_rc_pingpong " + " ".join(extra),
                      lambda extra=extra: check_pingpong(args.uroce_run, daemon.socket, extra)))
    cases += perftest_cases(args.uroce_run, daemon.socket)
    failed = 0
    try:
        for name, case in cases:
            try:
                case()
                print(f"PASS {name}")
            except (AssertionError, subprocess.TimeoutExpired) as e:
                failed += 1
                print(f"FAIL {name}: {e}")
    finally:
        rc = daemon.stop()
        if failed:
            print(daemon.read_log()[-4000:])
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    if rc not in (0, None):
        print(f"uroced exited with {rc}")
        failed += 1
    print(f"{len(cases) - failed}/{len(cases)} passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
