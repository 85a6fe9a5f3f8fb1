#!/usr/bin/env python3
"""The extended verbs (ibv_qp_ex, ibv_cq_ex, ibv_resize_cq, ibv_create_ah_from_wc) through the verbs shim.

Starts one uroced on its loopback port with two addresses (GIDs 0 and 1: the UD reply must come from the
GID the datagram was sent to), runs ext_verbs_test (a C program built against the real libibverbs) under
uroce-run, and passes if it printed "ALL PASSED" and exited 0. The daemon is stopped by its PID.

  test_ext_verbs.py --uroced build/.../uroced --uroce-run build/.../uroce-run --program build/.../ext_verbs_test
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from daemon_harness import Daemon  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--uroced", required=True)
    ap.add_argument("--uroce-run", required=True)
    ap.add_argument("--program", required=True)
    args = ap.parse_args()
    workdir = tempfile.mkdtemp(prefix="uroce-ext-verbs-")
    daemon = Daemon(args.uroced, workdir, "x", args=["--ip", "192.0.2.1", "--ip", "192.0.2.2"])
    ok = False
    try:
        out = subprocess.run([args.uroce_run, "--socket", daemon.socket, args.program],
                             capture_output=True, text=True, timeout=180)
        print(out.stdout, end="")
        print(out.stderr, end="", file=sys.stderr)
        ok = out.returncode == 0 and "ALL PASSED" in out.stdout
        if not ok:
            print(f"ext_verbs_test exited with {out.returncode}")
    except subprocess.TimeoutExpired as e:
        print(f"ext_verbs_test timed out; its output so far:\n{e.stdout}\n{e.stderr}")
    finally:
        rc = daemon.stop()
        if not ok:
            print(daemon.read_log()[-4000:])
    if rc not in (0, None):
        print(f"uroced exited with {rc}")
        ok = False
    if ok:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
