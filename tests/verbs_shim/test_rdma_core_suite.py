#!/usr/bin/env python3
"""rdma-core's own test suite, as Debian's python3-pyverbs ships it (/usr/share/doc/rdma-core/tests, not one
line changed), run against a uroced of its own on the loopback port through uroce-run. It is what rdma-core's
developers run against every provider: 300 tests, most of them for mlx5 or EFA only, which skip themselves
on any other device. Exits 0 only if no test failed and every skip gave one of the reasons below, each a
hardware feature uroce does not model or something this machine lacks; a new reason (a capability uroce
stopped reporting, say) fails the run. The daemon is stopped by PID.

The suite's huge page tests (regions and a parent domain's allocator on 2 MiB pages) skip on a machine with
none reserved. Run as root, this script reserves a few for the run when there are none, and gives them back.

Its rdma_cm tests read the device's IP address from the device's kernel network interface, which uroce, a NIC
in user space, has not. Run as root, the suite runs in mount and network namespaces of its own in which one
says what uroced's port is (see NETDEV); otherwise those tests skip.

  test_rdma_core_suite.py --uroced build/.../emulator/uroced --uroce-run build/.../verbs_shim/uroce-run
"""
import argparse
import gzip
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from daemon_harness import Daemon, huge_pages_added  # noqa: E402

PYTHON = "/usr/bin/python3"  # Debian's pyverbs is built for it
SUITE = "/usr/share/doc/rdma-core/tests"
TIMEOUT = 600

# Skips that say nothing about uroce's verbs: devices, hardware and machines it is not. Each is (where, why):
# `where` is searched in "tests.module.Class.test", `why` must match the whole reason. Narrow on purpose: a
# reason a broken uroce could also give (an extended CQ or QP refused) is accepted only where the test asks
# for something uroce does not do.
NO_HUGE_PAGES = r"There are no huge pages of size 2M allocated"
NO_NETDEV = r"Device \S+ doesn't have net interface"
ACCEPTED_SKIPS = [
    (r"\.test_(mlx5|efa)", r"Can not run the test over non (MLX5|EFA) device"),
    (r"\.test_(mlx5|efa)", r"Could not open mlx5 context \(This is not an MLX5 device\)"),
    (r"\.test_(mlx5|efa)", r"(Converting timestamp to nanoseconds|Create Extended CQ) is not supported"),
    (r"\.test_(mlx5|efa)", r"PCI device must be passed by the user"),  # VFIO
    (r"", NO_HUGE_PAGES),  # accepted only when the machine has none (see main)
    (r"", r"Allocating dmabuf is not supported by /dev/dri/\S+"),  # no GPU here
    (r"", r"cuda-python 12\.0\+ must be installed to run CUDA tests"),
    # Accepted only when the suite could not run with NETDEV (not root): uroce has no kernel network device
    # for rdma_cm's tests to read an address from; rdma_cm is then covered by rping, ucmatose and friends.
    (r"\.test_(mlx5_)?rdmacm\.", NO_NETDEV),
]

PORT_ADDRESS = "192.0.2.1/24"  # uroced's, on its loopback port

# rdma-core's tests find the device's address as a kernel-bound device's: the interface named in
# /sys/class/infiniband/DEV/device/net/, then `ip -j addr show IF`. In namespaces of its own (so nothing is
# seen or left outside), the suite gets both: a tmpfs over /sys/class that keeps every class as a link to
# the real one and adds infiniband/uroce0/device/net/uroce0, and an interface uroce0 (one end of a veth, used
# for nothing but being read) holding the port's address. uroced stays outside: its port is its own, and the
# suite reaches it through the socket's path.
NETDEV = r"""
set -e
mkdir -p "$UROCE_WORK/sysclass"
mount --bind /sys/class "$UROCE_WORK/sysclass"
mount -t tmpfs uroce-sysclass /sys/class
for class in "$UROCE_WORK"/sysclass/*; do
  [ "${class##*/}" = infiniband ] || ln -s "$class" "/sys/class/${class##*/}"
done
mkdir -p /sys/class/infiniband/uroce0/device/net/uroce0
ip link add uroce0 type veth peer name uroce0-peer
ip addr add "$UROCE_ADDRESS" dev uroce0
ip link set uroce0 up
ip link set lo up
exec "$@"
"""


def netdev_wrapper(workdir):
    """The command prefix that runs the suite with NETDEV, or [] when this machine cannot (not root, or no
    namespaces to be had)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("ip") is None:
        return []
    probe = subprocess.run(["unshare", "--mount", "--net", "true"], capture_output=True)
    if probe.returncode != 0:
        return []
    script = os.path.join(workdir, "netdev.sh")
    with open(script, "w") as f:
        f.write(NETDEV)
    return ["unshare", "--mount", "--net", "/bin/sh", script]

HUGE_PAGES_FOR_SUITE = 16  # of the default size, 2 MiB on x86-64, which the suite asks for


TEST_LINE = re.compile(r"^(test\w+) \(([\w.]+)\)")
OUTCOME = re.compile(r" \.\.\. (ok|FAIL|ERROR|skipped (.*)|expected failure|unexpected success)$")


def read_results(text):
    """{(class, test name): (outcome, skip reason)} from unittest's verbose output: a line naming the test,
    maybe its docstring's first line, and " ... outcome" at the end of the last of them."""
    results, current = {}, None
    for line in text.splitlines():
        m = TEST_LINE.match(line)
        if m:
            current = m.groups()
        o = OUTCOME.search(line)
        if o and current:
            results[(current[1], current[0])] = (o.group(1).split(" ")[0], (o.group(2) or "").strip("'\""))
            current = None
    return results


def unpack_suite(into):
    """A copy of the suite with its gzipped modules unpacked (Debian compresses the larger ones)."""
    shutil.copytree(SUITE, into)
    for name in os.listdir(into):
        if name.endswith(".gz"):
            path = os.path.join(into, name)
            with gzip.open(path, "rb") as src, open(path[:-3], "wb") as dst:
                shutil.copyfileobj(src, dst)
            os.unlink(path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--uroced", required=True)
    ap.add_argument("--uroce-run", required=True)
    args = ap.parse_args()
    if not os.path.isfile(os.path.join(SUITE, "run_tests.py")):
        print(f"FAIL: no rdma-core test suite at {SUITE}: install Debian's python3-pyverbs (scripts/deps.sh)")
        return 1
    workdir = tempfile.mkdtemp(prefix="uroce-rdma-core-tests-")
    suite = os.path.join(workdir, "tests")
    unpack_suite(suite)
    daemon = Daemon(args.uroced, workdir, "u", ["--ip", PORT_ADDRESS])
    wrapper = netdev_wrapper(workdir)
    if not wrapper:
        print("(not root: rdma_cm's tests will skip, having no network interface to read the address from)")
    try:
        with huge_pages_added(HUGE_PAGES_FOR_SUITE) as huge_pages:
            # Their skip is accepted only when the machine has none (not root, none reserved).
            accepted = [(w, r) for w, r in ACCEPTED_SKIPS
                        if (r != NO_HUGE_PAGES or huge_pages == 0) and (r != NO_NETDEV or not wrapper)]
            out = subprocess.run([*wrapper, os.path.abspath(args.uroce_run), "--socket", daemon.socket, PYTHON,
                                  "run_tests.py", "--dev", "uroce0", "-v"], cwd=suite, capture_output=True,
                                 text=True, timeout=TIMEOUT,
                                 env=dict(os.environ, PYTHONWARNINGS="ignore",  # "... ok" on its line
                                          UROCE_WORK=workdir, UROCE_ADDRESS=PORT_ADDRESS))
    except subprocess.TimeoutExpired as e:
        print(f"FAIL: the suite did not finish in {TIMEOUT} s\n{(e.stderr or b'')[-4000:]}")
        return 1
    finally:
        d_rc = daemon.stop()
    text = out.stderr
    with open(os.path.join(workdir, "suite.log"), "w") as f:
        f.write(out.stdout + text)
    results = read_results(text)
    summary = re.search(r"^Ran (\d+) tests? in", text, re.M)
    problems = []
    if summary is None or int(summary.group(1)) != len(results) or len(results) < 250:
        problems.append(f"could not read the results ({len(results)} parsed, summary {summary and summary.group(0)})")
    counts = {"ok": 0, "skipped": 0}
    for (where, name), (result, why) in sorted(results.items()):
        if result == "ok":
            counts["ok"] += 1
        elif result == "skipped":
            if not any(re.search(w, where) and re.fullmatch(r, why) for w, r in accepted):
                problems.append(f"{where}: skipped for a reason not accepted: {why}")
            counts["skipped"] += 1
        else:
            at = text.find(f"{result}: {name} ")
            problems.append(f"{where}: {result}\n{text[at:at + 2500] if at >= 0 else ''}")
    print(f"rdma-core's tests on uroce: {counts['ok']} passed, {counts['skipped']} skipped (accepted reasons), "
          f"{len(problems)} problem(s)")
    if d_rc != 0:
        problems.append(f"uroced exited with {d_rc}")
    for p in problems:
        print(f"FAIL: {p}")
    if problems:
        print(f"--- uroced log (tail)\n{daemon.read_log()[-3000:]}")
        print(f"(the suite's whole output: {os.path.join(workdir, 'suite.log')})")
        return 1
    shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
