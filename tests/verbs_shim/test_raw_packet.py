#!/usr/bin/env python3
"""Raw packet QPs and flow steering on a real uroced (its loopback port), through the verbs shim:
raw_packet_ops.py's checks (a pyverbs program: loopback to the port's own MAC, checksum offload, a sniffer
seeing RoCE, a rule trapping ARP from the port's responder, the default rules); the same program without
CAP_NET_RAW (setpriv drops it from the bounding set), which must be refused a raw packet QP with EPERM; and
a program killed while it holds rules of every kind and an RSS QP over work queues, after which the daemon
must hold no rule (`uroce stats`: flow_rules) and have logged no object it could not free. The daemon is
stopped by PID. Needs root (CAP_NET_RAW, as raw packet QPs do on a kernel device).

  test_raw_packet.py --uroced build/.../emulator/uroced --uroce-run build/.../verbs_shim/uroce-run
                     --uroce build/.../pcap_tools/uroce
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from daemon_harness import Daemon, is_root, stats  # noqa: E402

PYTHON = "/usr/bin/python3"  # Debian's pyverbs is built for it
OPS = os.path.join(HERE, "raw_packet_ops.py")
TIMEOUT = 120
PORT_IP = "192.0.2.1"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--uroced", required=True)
    ap.add_argument("--uroce-run", required=True)
    ap.add_argument("--uroce", required=True)
    args = ap.parse_args()
    if not is_root():
        print("FAIL: raw packet QPs need CAP_NET_RAW: run as root")
        return 1
    workdir = tempfile.mkdtemp(prefix="uroce-raw-packet-")
    daemon = Daemon(args.uroced, workdir, "u", ["--ip", f"{PORT_IP}/24"])
    problems = []
    try:
        m = re.search(r"engine running on port \S+ \(MAC ([0-9a-f:]{17})", daemon.read_log())
        deadline = time.monotonic() + 10
        while not m and time.monotonic() < deadline:
            time.sleep(0.05)
            m = re.search(r"engine running on port \S+ \(MAC ([0-9a-f:]{17})", daemon.read_log())
        if not m:
            raise RuntimeError("the daemon's log names no MAC for its port")
        program = [args.uroce_run, "--socket", daemon.socket, PYTHON, OPS, "--port-mac", m.group(1),
                   "--port-ip", PORT_IP]

        run = subprocess.run(program, capture_output=True, text=True, timeout=TIMEOUT)
        print(run.stdout, end="")
        if run.returncode != 0:
            problems.append(f"raw_packet_ops.py exited with {run.returncode}\n{run.stderr[-3000:]}")

        # Without CAP_NET_RAW. uroce-run execs the program, so the capability is gone from it as well.
        run = subprocess.run(["setpriv", "--bounding-set", "-net_raw", *program, "--check", "cap_net_raw"],
                             capture_output=True, text=True, timeout=TIMEOUT)
        print(run.stdout, end="")
        if run.returncode != 0:
            problems.append(f"cap_net_raw check exited with {run.returncode}\n{run.stderr[-3000:]}")

        # Killed while holding rules, an RSS QP, its table and work queues: all of it goes with the session.
        holder = subprocess.Popen([*program, "--check", "hold"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True)
        line = holder.stdout.readline()
        held = stats(args.uroce, daemon.socket)["device"]["flow_rules"]
        holder.kill()
        _, err = holder.communicate()
        if line.strip() != "holding" or held != 4:
            problems.append(f"the holder did not set up its rules (said {line!r}, {held} rules)\n{err[-3000:]}")
        deadline = time.monotonic() + 10
        while (left := stats(args.uroce, daemon.socket)["device"]["flow_rules"]) and time.monotonic() < deadline:
            time.sleep(0.05)
        if left:
            problems.append(f"{left} flow rules left after the holder was killed")
        else:
            print("PASS killed holder: its 4 rules, RSS QP, indirection table and work queues were freed")
    except (RuntimeError, subprocess.TimeoutExpired) as ex:
        problems.append(str(ex))
    finally:
        d_rc = daemon.stop()
    log = daemon.read_log()
    if d_rc != 0:
        problems.append(f"uroced exited with {d_rc}")
    for bad in re.findall(r".* (?:warning|error|critical) .*", log):
        if "not destroyed" in bad or "not deregistered" in bad or "not closed" in bad or "error" in bad:
            problems.append(f"daemon log: {bad}")
    for p in problems:
        print(f"FAIL: {p}")
    if problems:
        print(f"--- uroced log (tail)\n{log[-3000:]}")
        return 1
    shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
