#!/usr/bin/env python3
"""Posting and polling through the verbs shim touch only shared memory: no system call on the fast path.

Unmodified busy-polling perftest programs (ib_send_bw: post_send, post_recv and poll_cq on both sides;
ib_write_bw: post_send and poll_cq) run through uroce-run under
`strace -f -c`, each side counted on its own, twice: with FEW and with MANY iterations. Everything else they
do (opening the device, registering memory, connecting, the TCP exchange, printing) is the same in both runs,
so the counts may differ only by a small constant; one system call per operation would add at least
MANY - FEW. The test fails then, naming the calls that grew.

uroced runs with an idle back-off longer than the test (--spin-us): a client that posts while the engine
sleeps writes its wake eventfd (docs/daemon.md: a system call only when the NIC was idle, as with a NIC's
interrupt moderation), and whether the engine dozes off between two operations depends on scheduling, not
on the shim. With the engine awake the fast path must make no system call at all.

A thread whose polls keep finding nothing yields its CPU now and then (verbs_shim/idle_poll.hpp): that is
the idle path, and how often it runs depends on scheduling. So each program runs twice over: with
UROCE_POLL_YIELD=0 (no yields), where no call at all may grow, and as users run it, where only
sched_yield may.

  test_syscalls.py --uroced build/.../emulator/uroced --uroce-run build/.../verbs_shim/uroce-run
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from daemon_harness import Daemon  # noqa: E402
from program_matrix import (CLOCK_ATTEMPTS, PERFTEST_TABLE, clock_sampling_failed, clock_sampling_why,  # noqa: E402
                            tcp_port)
from server_client import run_again_while, run_server_client  # noqa: E402

FEW, MANY = 1000, 20000
SLACK = 50  # calls that may differ between two runs (allocator mmaps, a retried connect): far below MANY - FEW
PROGRAMS = [("ib_send_bw", ["-s", "64"]), ("ib_write_bw", ["-s", "64"])]
# (environment, calls that may grow): no yields and nothing may grow; the defaults, where idle polls yield.
VARIANTS = [(["UROCE_POLL_YIELD=0"], ()), ([], ("sched_yield",))]
TIMEOUT = 120
# A run in which perftest could not sample the CPU clock (program_matrix.clock_sampling_failed) says nothing
# about the system calls counted here: it is made again, as in the matrix.


def strace_counts(path):
    """{syscall: calls} from `strace -c`'s table, plus "total"."""
    counts = {}
    with open(path) as f:
        for line in f:
            fields = line.split()
            # "% time  seconds  usecs/call  calls  [errors]  syscall"
            if len(fields) >= 5 and fields[3].isdigit() and not fields[0].startswith("-"):
                counts[fields[-1]] = int(fields[3])
    if "total" not in counts:
        raise AssertionError(f"no strace summary in {path}:\n{open(path).read()}")
    return counts


def counted_run(uroce_run, socket, workdir, program, extra, iterations, env):
    """Server and client of `program` with -n `iterations`, each under strace with the environment
    settings `env` ("NAME=value" strings); their {syscall: calls}."""
    tag = "-".join(env).replace("=", "")
    out = {side: os.path.join(workdir, f"{program}-{iterations}{tag}-{side}.strace") for side in ("server", "client")}
    r = run_again_while(
        lambda: run_server_client(uroce_run, socket, socket,
                                  [program, "-d", "uroce0", "-x", "0", "-p", tcp_port(), "-n", str(iterations),
                                   *extra],
                                  f"{program} -n {iterations}", TIMEOUT,
                                  server_wrap=["env", *env, "strace", "-f", "-c", "-o", out["server"]],
                                  client_wrap=["env", *env, "strace", "-f", "-c", "-o", out["client"]]),
        clock_sampling_failed, CLOCK_ATTEMPTS, clock_sampling_why)
    r.assert_both_exited_0()
    assert PERFTEST_TABLE.search(r.client.stdout), f"no results table ({r.what}):\n{r.client.stdout}"
    return {side: strace_counts(path) for side, path in out.items()}


def check(uroce_run, socket, workdir, program, extra, env, idle_calls):
    """Fails if any call but those in `idle_calls` grows with the number of operations."""
    few = counted_run(uroce_run, socket, workdir, program, extra, FEW, env)
    many = counted_run(uroce_run, socket, workdir, program, extra, MANY, env)
    report = []
    for side in ("server", "client"):
        growth = {k: many[side].get(k, 0) - few[side].get(k, 0) for k in many[side] if k != "total"}
        grown = sum(d for k, d in growth.items() if k not in idle_calls)
        idle = sum(d for k, d in growth.items() if k in idle_calls)
        report.append(f"{side} {few[side]['total']} -> {many[side]['total']} calls"
                      + (f" ({idle:+} {'/'.join(idle_calls)})" if idle_calls else ""))
        worst = sorted(((d, k) for k, d in growth.items() if d > 0 and k not in idle_calls), reverse=True)[:5]
        assert grown <= SLACK, (f"{program} {side}: {grown} more system calls for {MANY - FEW} more operations "
                                f"({few[side]['total']} -> {many[side]['total']}); grew most: {worst}")
    return f"{' '.join(env) or 'defaults'}, -n {FEW} vs -n {MANY}: " + ", ".join(report)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--uroced", required=True)
    ap.add_argument("--uroce-run", required=True)
    args = ap.parse_args()
    missing = [p for p in ("strace", *(p for p, _ in PROGRAMS)) if not shutil.which(p)]
    if missing:
        print("missing programs (scripts/deps.sh installs them):", " ".join(missing))
        return 1
    workdir = tempfile.mkdtemp(prefix="uroce-syscalls-")
    # An engine that never sleeps during the test: 10 minutes of spinning before the first idle sleep.
    daemon = Daemon(args.uroced, workdir, "u", ["--spin-us", str(600_000_000)])
    failed = 0
    try:
        for program, extra in PROGRAMS:
            for env, idle_calls in VARIANTS:
                try:
                    print(f"PASS {program}: {check(args.uroce_run, daemon.socket, workdir, program, extra, env, idle_calls)}",
                          flush=True)
                except (AssertionError, subprocess.TimeoutExpired) as e:
                    failed += 1
                    print(f"FAIL {program} {' '.join(env)}: {e}", flush=True)
    finally:
        rc = daemon.stop()
    if rc not in (0, None):
        print(f"uroced exited with {rc}\n{daemon.read_log()[-3000:]}")
        failed += 1
    if failed:
        print(f"(strace summaries kept in {workdir})")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    total = len(PROGRAMS) * len(VARIANTS)
    print(f"{total - failed}/{total} passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
