#!/usr/bin/env python3
"""Debian's unmodified ibverbs-utils pingpongs through the verbs shim (uroce-run), in the three setups of
tests/integration/test_daemon.py:

  (a) loopback: one uroced on its internal loopback port, server and client both through it;
  (b) veth: two uroced in two network namespaces joined by a veth pair (net_af_packet), the server through
      one, the client through the other. Both pingpong processes run in the root namespace: they reach
      their daemon through its Unix socket (which crosses namespaces), and their out-of-band TCP exchange
      goes over the root namespace's localhost (the veth's kernel sides have no address and ARP off);
  (c) memif: two uroced joined by a memif, server through one, client through the other.

In each: ibv_rc_pingpong (default, -s 65536, -e), ibv_uc_pingpong, ibv_ud_pingpong, ibv_srq_pingpong,
each with -d uroce0 -g 0 and a small -n. A case passes when both processes exit 0 and print their
"bytes in ... seconds" line. Exits 0 only if every case passed; daemons are stopped by PID.

  test_setups.py --uroced build/.../emulator/uroced --uroce-run build/.../verbs_shim/uroce-run
"""
import argparse
import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from daemon_harness import Daemon, is_root, two_namespaces_with_veth  # noqa: E402
from server_client import run_server_client  # noqa: E402

TIMEOUT = 30
RESULT = re.compile(r"\d+ bytes in [\d.]+ seconds")
PROGRAMS = ("ibv_rc_pingpong", "ibv_uc_pingpong", "ibv_ud_pingpong", "ibv_srq_pingpong")
CASES = [
    ("ibv_rc_pingpong", []),
    ("ibv_rc_pingpong", ["-s", "65536"]),
    ("ibv_rc_pingpong", ["-e"]),
    ("ibv_uc_pingpong", []),
    ("ibv_ud_pingpong", []),
    ("ibv_srq_pingpong", []),
]
ITERS = "200"
_next_port = [20000 + os.getpid() % 20000]


def tcp_port():
    _next_port[0] += 1
    return str(_next_port[0])


def pingpong(uroce_run, server_socket, client_socket, program, extra):
    """Server through server_socket, client through client_socket; the client connects to localhost."""
    command = [program, "-p", tcp_port(), "-d", "uroce0", "-g", "0", "-n", ITERS, *extra]
    r = run_server_client(uroce_run, server_socket, client_socket, command, " ".join([program, *extra]), TIMEOUT,
                          retry_pause=0.1)
    r.assert_both_exited_0()
    assert RESULT.search(r.client.stdout), f"client ({r.what}) printed no result:\n{r.client.stdout}"
    assert RESULT.search(r.server_out), f"server ({r.what}) printed no result:\n{r.server_out}"
    return RESULT.search(r.client.stdout).group(0)


@contextlib.contextmanager
def loopback(uroced, workdir):
    d = Daemon(uroced, workdir, "lo")
    yield [d], d.socket, d.socket


@contextlib.contextmanager
def veth(uroced, workdir):
    with two_namespaces_with_veth() as (ns, ifs):
        daemons = []
        try:
            daemons.append(Daemon(uroced, workdir, "va", ["--port", f"net_af_packet0,iface={ifs[0]}",
                                                          "--ip", "10.77.0.1"], netns=ns[0]))
            daemons.append(Daemon(uroced, workdir, "vb", ["--port", f"net_af_packet0,iface={ifs[1]}",
                                                          "--ip", "10.77.0.2"], netns=ns[1]))
            yield daemons, daemons[0].socket, daemons[1].socket
        finally:
            for d in daemons:  # before the namespaces go
                d.stop()


@contextlib.contextmanager
def memif(uroced, workdir):
    sock = os.path.join(workdir, "memif.sock")
    daemons = [Daemon(uroced, workdir, "ma", ["--port", f"net_memif0,role=server,socket={sock}", "--ip", "10.78.0.1"])]
    try:
        daemons.append(Daemon(uroced, workdir, "mb", ["--port", f"net_memif0,role=client,socket={sock}",
                                                      "--ip", "10.78.0.2"]))
    except Exception:
        daemons[0].stop()
        raise
    yield daemons, daemons[0].socket, daemons[1].socket


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--uroced", required=True)
    ap.add_argument("--uroce-run", required=True)
    ap.add_argument("--setup", action="append", choices=["loopback", "veth", "memif"],
                    help="run only these setups (default: all)")
    args = ap.parse_args()
    missing = [p for p in PROGRAMS if not shutil.which(p)]
    if missing:
        print("missing programs (apt-get install ibverbs-utils):", " ".join(missing))
        return 1
    setups = [("loopback", loopback), ("veth", veth), ("memif", memif)]
    if args.setup:
        setups = [s for s in setups if s[0] in args.setup]
    workdir = tempfile.mkdtemp(prefix="uroce-shim-setups-")
    total = failed = 0
    for setup_name, setup in setups:
        if setup is veth and not is_root():
            print("SKIP veth: needs root for network namespaces")
            continue
        daemons = []
        try:
            with setup(args.uroced, workdir) as (daemons, server_socket, client_socket):
                for program, extra in CASES:
                    name = f"{setup_name}: {program} {' '.join(extra)}".rstrip()
                    total += 1
                    t0 = time.monotonic()
                    try:
                        result = pingpong(args.uroce_run, server_socket, client_socket, program, extra)
                        print(f"PASS {name} ({result}; {time.monotonic() - t0:.1f} s)", flush=True)
                    except (AssertionError, subprocess.TimeoutExpired) as e:
                        failed += 1
                        print(f"FAIL {name}: {e}", flush=True)
                    if not all(d.alive() for d in daemons):
                        failed += 1
                        print(f"FAIL {setup_name}: a daemon died", flush=True)
                        break
        except RuntimeError as e:  # a daemon did not start
            total += 1
            failed += 1
            print(f"FAIL {setup_name}: {e}", flush=True)
        finally:
            for d in daemons:
                rc = d.stop()
                if rc not in (0, None):
                    failed += 1
                    print(f"FAIL {setup_name}: uroced exited with {rc}\n{d.read_log()[-3000:]}", flush=True)
                elif failed:
                    print(f"--- {d.log_path} (tail)\n{d.read_log()[-3000:]}")
    if not failed:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"{total - failed}/{total} passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
