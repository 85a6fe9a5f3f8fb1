#!/usr/bin/env python3
"""The control path's cost: verbs calls that go to uroced over its control socket (query_port, reg_mr and
dereg_mr, create_qp and destroy_qp, alloc_pd and dealloc_pd, which also run on the engine; and reg_mr of
regions kept, the first ones and past a few thousand, which must cost the same), timed from a
pyverbs program through uroce-run on one uroced's loopback port, beside the floor of such a design
measured in the same run and the same Python: a request and its reply between two processes over an
AF_UNIX SOCK_SEQPACKET socket pair (100 B out, 600 B back: query_port's sizes), with nothing done in
between.

  bench_control.py BUILD_DIR [--scale S]

The program runs on the CPUs other than the engine's (its --core, 0), as an application should, which is
also where uroced's control thread runs (docs/daemon.md, "Threads and CPUs"); on a machine with one CPU
it shares that one. Prints a Markdown table; there is no target (no issue sets one): the ratios are there
to see where the time goes and to catch a regression.
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

SYSTEM_PYTHON = "/usr/bin/python3"  # Debian's, which has pyverbs (python3-pyverbs)
ROUNDS = 5
ENGINE_CORE = 0


def per_call_us(fn, calls):
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def socket_round_trip(calls):
    """Medians over ROUNDS of one request/reply between this process and a forked echo."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pid = os.fork()
    if pid == 0:  # the echo: answers each request with 600 B until the pair closes
        ours.close()
        reply = b"r" * 600
        while theirs.recv(65536):
            theirs.send(reply)
        os._exit(0)
    theirs.close()
    request = b"q" * 100

    def call():
        ours.send(request)
        ours.recv(65536)
    try:
        return [per_call_us(call, calls) for _ in range(ROUNDS)]
    finally:
        ours.close()
        os.waitpid(pid, 0)


def worker(scale):
    """Runs under uroce-run: prints {call: [us per call, one per round]} as JSON."""
    import pyverbs.enums as e
    from pyverbs.cq import CQ
    from pyverbs.device import Context
    from pyverbs.mr import MR
    from pyverbs.pd import PD
    from pyverbs.qp import QP, QPCap, QPInitAttr

    n = max(50, int(2000 * scale))
    ctx = Context(name="uroce0")
    pd = PD(ctx)
    cq = CQ(ctx, 16)

    def reg_dereg():
        MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE).close()

    def create_destroy_qp():
        QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=QPCap(16, 16, 1, 1))).close()

    calls = {"ibv_query_port": (lambda: ctx.query_port(1), n),
             "ibv_alloc_pd + ibv_dealloc_pd": (lambda: PD(ctx).close(), n // 2),
             "ibv_reg_mr + ibv_dereg_mr (4 KiB)": (reg_dereg, n // 2),
             "ibv_create_qp + ibv_destroy_qp (RC)": (create_destroy_qp, n // 5)}
    results = {"socket round trip": socket_round_trip(n)}
    for name, (fn, count) in calls.items():
        fn()  # warm: first-use costs (the shared pages' first mapping) are not the steady state
        results[name] = [per_call_us(fn, count) for _ in range(ROUNDS)]
    # Registrations kept, as an application that registers many buffers keeps them (libiscsi's iSER
    # initiator: about 300 at login): each moved region is a mapping of the process's own, and a cost that
    # grows with them shows as the second row above the first.
    kept, many = [], max(300, int(3000 * scale))

    def reg_kept():
        kept.append(MR(pd, 8192, e.IBV_ACCESS_LOCAL_WRITE))
    results["ibv_reg_mr (8 KiB, kept), the first 100"] = [per_call_us(reg_kept, 20) for _ in range(ROUNDS)]
    while len(kept) < many:
        reg_kept()
    results[f"ibv_reg_mr (8 KiB, kept), past {many} kept"] = [per_call_us(reg_kept, 20) for _ in range(ROUNDS)]
    print(json.dumps(results))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply the call counts")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.scale)
        return 0
    from daemon_harness import Daemon, tempdir
    uroced = os.path.join(args.build, "emulator", "uroced")
    uroce_run = os.path.join(args.build, "verbs_shim", "uroce-run")
    cpus = sorted(os.sched_getaffinity(0) - {ENGINE_CORE}) or [ENGINE_CORE]
    with tempdir() as d:
        daemon = Daemon(uroced, d, "control", ["--core", str(ENGINE_CORE)])
        try:
            out = subprocess.run(["taskset", "-c", ",".join(map(str, cpus)), uroce_run, "--socket", daemon.socket,
                                  SYSTEM_PYTHON, os.path.abspath(__file__), args.build, "--worker",
                                  "--scale", str(args.scale)], capture_output=True, text=True, timeout=600)
        finally:
            daemon.stop()
    if out.returncode != 0:
        print(f"\n## The control path\n\nFAILED (exit {out.returncode}):\n\n```\n{out.stderr[-2000:]}\n```")
        return 1
    results = json.loads(out.stdout.strip().splitlines()[-1])
    floor = statistics.median(results["socket round trip"])
    print("\n## The control path: verbs calls that go to uroced\n")
    print(f"pyverbs through uroce-run on one uroced's loopback port (engine on CPU {ENGINE_CORE}, the program "
          f"on CPU {','.join(map(str, cpus))}); per call, the median of {ROUNDS} rounds and their range. "
          f"Reference, same run and same Python: a 100 B request and a 600 B reply between two processes over "
          f"an AF_UNIX SOCK_SEQPACKET pair, {floor:.1f} us.\n")
    print("| call | µs per call | range | × socket round trip |")
    print("|---|---|---|---|")
    for name, samples in results.items():
        median = statistics.median(samples)
        print(f"| {name} | {median:.1f} | {min(samples):.1f}-{max(samples):.1f} | {median / floor:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
