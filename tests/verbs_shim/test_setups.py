#!/usr/bin/env python3
"""Unmodified server/client verbs programs from Debian's packages through the verbs shim (uroce-run) in the
three setups of tests/integration/daemon_harness.py:

  (a) loopback: one uroced on its internal loopback port, server and client both through it;
  (b) veth: two uroced in two network namespaces joined by a veth pair (net_af_packet), the server through
      one, the client through the other. Both program processes run in the root namespace: they reach
      their daemon through its Unix socket (which crosses namespaces), and their out-of-band TCP exchange
      goes over the root namespace's localhost (the veth's kernel sides have no address and ARP off);
  (c) memif: two uroced joined by a memif, server through one, client through the other.

The programs (program_matrix.py): the ibverbs-utils pingpongs, perftest (its raw Ethernet programs too),
qperf's RDMA tests, UCX's ucx_perftest, libfabric's fi_pingpong, NetPIPE under two MPIs, fio's rdma
engine and DAPL's dtest, dtestx, dtestcm, dtestsrq and dapltest; QEMU's live migration over RDMA (qemu_migration.py); and iSCSI over RDMA between tgt's target
daemon and libiscsi's initiator (iser_storage.py). By default
the CI subset of each (short iteration counts); --long runs the full matrix: every program with every option
in every setup, and ibv_rc_pingpong at every size from 1 B to 64 KiB at every MTU. Exits 0 only if every
case passed; daemons and programs are stopped by PID.

  test_setups.py --uroced build/.../emulator/uroced --uroce-run build/.../verbs_shim/uroce-run
                 [--family pingpong|perftest|raw_ethernet|qperf|ucx|libfabric|mpi|fio|dapl|qemu|iser]... [--setup loopback|veth|memif]... [--long]
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from daemon_harness import SETUPS, is_root  # noqa: E402
from program_matrix import FAMILIES, HELPERS, active_mtu  # noqa: E402
from iser_storage import Iser  # noqa: E402
from qemu_migration import Qemu  # noqa: E402

FAMILIES = {**FAMILIES, Qemu.name: Qemu, Iser.name: Iser}


def run_setup(args, setup_name, families, workdir):
    """Runs every case of `families` in one setup; returns (cases run, cases failed)."""
    total = failed = 0
    daemons = []
    try:
        with SETUPS[setup_name](args.uroced, workdir) as (daemons, server_socket, client_socket):
            mtu = min(active_mtu(args.uroce_run, s) for s in (server_socket, client_socket))
            for family in families:
                cases = family.full(setup_name, mtu) if args.long else family.ci(setup_name, mtu)
                with family.session(args.uroce_run, server_socket, client_socket, workdir, mtu) as run:
                    for program, extra in cases:
                        name = f"{setup_name}: {program} {' '.join(extra)}".rstrip()
                        total += 1
                        t0 = time.monotonic()
                        try:
                            result = run(program, extra)
                            print(f"PASS {name} ({result}; {time.monotonic() - t0:.1f} s)", flush=True)
                        except (AssertionError, subprocess.TimeoutExpired) as e:
                            failed += 1
                            print(f"FAIL {name} ({time.monotonic() - t0:.1f} s): {e}", flush=True)
                        if not all(d.alive() for d in daemons):
                            print(f"FAIL {setup_name}: a daemon died", flush=True)
                            return total, failed + 1
    except (RuntimeError, AssertionError) as e:  # a daemon did not start, or ibv_devinfo failed
        print(f"FAIL {setup_name}: {e}", flush=True)
        return total + 1, failed + 1
    finally:
        for d in daemons:
            rc = d.stop()  # stopped already on the way out of the setup; this gives its exit code
            if rc not in (0, None):
                failed += 1
                print(f"FAIL {setup_name}: uroced exited with {rc}\n{d.read_log()[-3000:]}", flush=True)
            elif failed:
                print(f"--- {d.log_path} (tail)\n{d.read_log()[-3000:]}")
    return total, failed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--uroced", required=True)
    ap.add_argument("--uroce-run", required=True)
    ap.add_argument("--family", action="append", choices=list(FAMILIES), help="only these programs (default: all)")
    ap.add_argument("--setup", action="append", choices=list(SETUPS), help="only these setups (default: all)")
    ap.add_argument("--long", action="store_true", help="the full matrix instead of the CI subset")
    ap.add_argument("--ucp-sockaddr-check", help="tests/verbs_shim/ucx_sockaddr's program (the ucx family)")
    args = ap.parse_args()
    if args.ucp_sockaddr_check:
        HELPERS["ucp_sockaddr_check"] = os.path.abspath(args.ucp_sockaddr_check)
    elif any(f == "ucx" for f in (args.family or FAMILIES)):
        print("the ucx family needs --ucp-sockaddr-check")
        return 1
    families = [FAMILIES[f] for f in (args.family or FAMILIES)]
    missing = [p for f in families for p in f.programs if not shutil.which(p)]
    if missing:
        print("missing programs (scripts/deps.sh installs them):", " ".join(missing))
        return 1
    workdir = tempfile.mkdtemp(prefix="uroce-shim-setups-")
    total = failed = 0
    for setup_name in args.setup or SETUPS:
        if setup_name == "veth" and not is_root():
            print("SKIP veth: needs root for network namespaces")
            continue
        t, f = run_setup(args, setup_name, families, workdir)
        total += t
        failed += f
    if not failed:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"{total - failed}/{total} passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
