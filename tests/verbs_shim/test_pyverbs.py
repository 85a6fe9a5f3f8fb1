#!/usr/bin/env python3
"""pyverbs_ops.py (a pyverbs program: requester and responder processes) through the verbs shim against a
uroced of its own on the loopback port. Debian's python3-pyverbs is for Debian's /usr/bin/python3, so the
two processes run that interpreter (this script may run under any python3). Exits 0 only if every check
passed; the daemon and anything left running are stopped by PID.

  test_pyverbs.py --uroced build/.../emulator/uroced --uroce-run build/.../verbs_shim/uroce-run
"""
import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from daemon_harness import Daemon  # noqa: E402

PYTHON = "/usr/bin/python3"
TIMEOUT = 120


def pyverbs_problem():
    """Why PYTHON cannot run pyverbs, or None."""
    if not os.access(PYTHON, os.X_OK):
        return "no such interpreter"
    probe = subprocess.run([PYTHON, "-c", "import pyverbs.device"], capture_output=True, text=True)
    return (probe.stderr.strip().splitlines() or ["import failed"])[-1] if probe.returncode else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--uroced", required=True)
    ap.add_argument("--uroce-run", required=True)
    args = ap.parse_args()
    problem = pyverbs_problem()
    if problem:
        print(f"FAIL: {PYTHON} cannot import pyverbs ({problem}): install Debian's python3-pyverbs "
              "(apt-get install python3-pyverbs, or scripts/deps.sh)")
        return 1
    workdir = tempfile.mkdtemp(prefix="uroce-pyverbs-")
    # A subnet, so that an address off it has no route (the port has no gateway): the loopback port takes
    # any destination as on its link otherwise.
    daemon = Daemon(args.uroced, workdir, "u", ["--ip", "192.0.2.1/24"])
    procs = []
    rc = 1
    try:
        ends = socket.socketpair()
        for role, end in zip(("responder", "requester"), ends):
            cmd = [args.uroce_run, "--socket", daemon.socket, PYTHON, os.path.join(HERE, "pyverbs_ops.py"),
                   "--role", role, "--fd", str(end.fileno())]
            procs.append(subprocess.Popen(cmd, pass_fds=[end.fileno()], stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True))
            end.close()  # each process holds its own end; the responder sees EOF when the requester ends
        responder, requester = procs
        out, _ = requester.communicate(timeout=TIMEOUT)
        print(out, end="")
        rc = requester.returncode
        # The last check kills the responder (SIGKILL); if it did not run, EOF ends the responder.
        r_out, _ = responder.communicate(timeout=10)
        if responder.returncode not in (0, -signal.SIGKILL) or rc:
            print(f"--- responder (exit {responder.returncode})\n{r_out}")
            rc = rc or 1
    except subprocess.TimeoutExpired as ex:
        print(f"FAIL: {ex}")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                print(p.communicate()[0])
        d_rc = daemon.stop()
        if d_rc not in (0, None):
            print(f"FAIL: uroced exited with {d_rc}")
            rc = 1
        if rc:
            print(f"--- uroced log (tail)\n{daemon.read_log()[-4000:]}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return 1 if rc else 0


if __name__ == "__main__":
    sys.exit(main())
