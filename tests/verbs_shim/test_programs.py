#!/usr/bin/env python3
"""Debian's unmodified ibverbs-utils that list and describe devices against a uroced, through the verbs shim
(uroce-run): ibv_devices, ibv_devinfo and ibv_devinfo -v, on one uroced's loopback port, uroce-run's
refusal of a bad command line or setting, and the engine's yield when ibv_rc_pingpong drains its receive
queue. As root, also ibv_asyncwatch hearing the port's link go down and come back, on a veth and on a
memif. (The server/client programs - pingpongs, perftest, qperf - are in
test_setups.py, in all three setups.) Exits 0 only if every case passed; the daemon is stopped by its PID at
the end.

  test_programs.py --uroced build/.../emulator/uroced --uroce-run build/.../verbs_shim/uroce-run \
                   --uroce build/.../pcap_tools/uroce
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from daemon_harness import Daemon, is_root, memif_daemon, sh, stats, veth_setup  # noqa: E402
from server_client import run_server_client  # noqa: E402

TIMEOUT = 60


def run(uroce_run, socket, args, timeout=TIMEOUT):
    return subprocess.run([uroce_run, "--socket", socket, *args], capture_output=True, text=True, timeout=timeout)


def check_devices(uroce_run, socket):
    out = run(uroce_run, socket, ["ibv_devices"])
    assert out.returncode == 0, out.stderr
    assert re.search(r"^\s+uroce0\s+[0-9a-f]{16}$", out.stdout, re.M), out.stdout


def check_devinfo(uroce_run, socket, verbose):
    out = run(uroce_run, socket, ["ibv_devinfo", *(["-v"] if verbose else [])])
    assert out.returncode == 0, out.stdout + out.stderr
    # port_lid: uroce's LID extension (verbs_shim/shim.hpp), the low 16 bits of 192.0.2.1: 0x0201.
    for want in ("hca_id:\turoce0", "PORT_ACTIVE", "link_layer:\t\tEthernet", "port_lid:\t\t513"):
        assert want in out.stdout, f"{want!r} missing:\n{out.stdout}"
    if verbose:
        assert re.search(r"GID\[\s*0\]:\s+::ffff:\d+\.\d+\.\d+\.\d+, RoCE v2", out.stdout), out.stdout


def check_bad_invocations(uroce_run, socket):
    """Each is refused with exit status 2 and a message that names the problem; the program never runs."""
    def invoke(args, env=None):
        return subprocess.run([uroce_run, *args], capture_output=True, text=True, timeout=TIMEOUT,
                              env={**os.environ, **(env or {})})
    for args, env, says in [
        ([], None, "usage: uroce-run"),
        (["--socket"], None, "--socket needs a path"),
        (["--socket", socket], None, "usage: uroce-run"),
        (["--socket", socket, "ibv_devices"], {"UROCE_POLL_YIELD": "sixty"}, "UROCE_POLL_YIELD must be a number"),
        (["--socket", socket, "ibv_devices"], {"UROCE_POLL_YIELD": "-1"}, "UROCE_POLL_YIELD must be a number"),
    ]:
        out = invoke(args, env)
        assert out.returncode == 2 and says in out.stderr and out.stdout == "", (args, env, out)
    # No daemon at the socket: a warning naming it, and the program runs (finding no device).
    missing = socket + ".missing"
    out = invoke(["--socket", missing, "ibv_devices"])
    assert out.returncode == 0 and "uroce0" not in out.stdout, out
    assert f"no uroced socket at {missing} (is uroced running?" in out.stderr, out
    # A path holding a pattern character is that path, not the files it would match.
    out = invoke(["ibv_devices"], {"UROCE_SOCKET": socket.rsplit("/", 1)[0] + "/*"})
    assert out.returncode == 0 and out.stderr.count("no uroced socket at") == 1 and "/*" in out.stderr, out
    # A list of only separators names no daemon: the default socket, as the shim takes it.
    out = invoke(["sh", "-c", 'echo "$UROCE_SOCKET"'], {"UROCE_SOCKET": ":"})
    assert out.returncode == 0 and out.stdout.strip() == "/run/uroce/uroced.sock", out
    for value in ("0", "1000", ""):  # never, rarely, the default
        out = invoke(["--socket", socket, "ibv_devices"], {"UROCE_POLL_YIELD": value})
        assert out.returncode == 0 and "uroce0" in out.stdout and out.stderr == "", (value, out)


def check_receive_queue_low(uroce_run, uroce, socket):
    """ibv_rc_pingpong posts 500 receives and reposts only when one is left: each side's queue falls past
    half of its peak, the transport reports it and the engine yields its core once (the remedy for RNR
    storms when a receiver waits for the engine's core, docs/daemon.md). No RNR NAK on the way."""
    before = stats(uroce, socket)
    command = ["ibv_rc_pingpong", "-g", "0", "-p", str(20000 + os.getpid() % 10000), "-n", "600"]
    r = run_server_client(uroce_run, socket, socket, command, "ibv_rc_pingpong -n 600", TIMEOUT)
    r.assert_both_exited_0()
    after = stats(uroce, socket)
    low = after["device"]["receive_queues_low"] - before["device"]["receive_queues_low"]
    yields = after["engine"]["starving_receiver_yields"] - before["engine"]["starving_receiver_yields"]
    assert low >= 2, (low, after["device"])  # one fall per side at least
    assert 1 <= yields <= low, (yields, low)
    assert after["device"]["rnr_naks_sent"] == before["device"]["rnr_naks_sent"], after["device"]


def check_xrc_over_loss(uroced, uroce_run, uroce, workdir):
    """ibv_xsrq_pingpong (XRC) on a daemon that drops 5% of what it receives: go-back-N recovers the
    initiators' messages into the targets' SRQs, through the real frame path (XRC opcodes, XRCETHs)."""
    lossy = Daemon(uroced, workdir, "lossy", ["--rx-loss", "0.05", "--loss-seed", "11"])
    try:
        command = ["ibv_xsrq_pingpong", "-g", "0", "-m", "1024", "-p", str(21000 + os.getpid() % 10000), "-n", "300",
                   "-s", "3000"]
        r = run_server_client(uroce_run, lossy.socket, lossy.socket, command, "ibv_xsrq_pingpong over 5% loss", TIMEOUT)
        r.assert_both_exited_0()
        assert "success" in r.client.stdout and "success" in r.server_out, (r.client.stdout, r.server_out)
        s = stats(uroce, lossy.socket)
        assert s["engine"]["rx_injected_loss"] > 0 and s["device"]["tx_retransmitted"] > 0, s
    finally:
        rc = lossy.stop()
    assert rc in (0, None), f"the lossy uroced exited with {rc}"


class AsyncWatch:
    """Debian's ibv_asyncwatch through uroce-run on `socket`: it prints every async event of the device until
    stopped (by its process group). Line-buffered by stdbuf, so that what it printed can be read while it
    runs."""

    def __init__(self, uroce_run, socket, log_path):
        self.log_path = log_path
        with open(log_path, "w") as log:
            self.proc = subprocess.Popen([uroce_run, "--socket", socket, "stdbuf", "-oL", "ibv_asyncwatch"],
                                         stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.wait_until(lambda text: "async event FD" in text, "ibv_asyncwatch to start")

    def output(self):
        with open(self.log_path) as f:
            return f.read()

    def events(self):
        """(event name, port) for each event it printed, in order."""
        return re.findall(r"event_type (IBV_EVENT_\w+) \(\d+\), port (\d+)", self.output())

    def wait_until(self, done, what, timeout=10):
        deadline = time.time() + timeout
        while not done(self.output()):
            assert self.proc.poll() is None, f"ibv_asyncwatch exited with {self.proc.returncode}:\n{self.output()}"
            assert time.time() < deadline, f"no {what} in {timeout} s:\n{self.output()}"
            time.sleep(0.05)

    def wait_for_events(self, count):
        self.wait_until(lambda _: len(self.events()) >= count, f"{count} events")
        time.sleep(0.3)  # three link watch periods: nothing more comes
        return self.events()

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
        self.proc.wait(10)


def port_state(uroce_run, socket):
    out = run(uroce_run, socket, ["ibv_devinfo"])
    assert out.returncode == 0, out.stdout + out.stderr
    return re.search(r"state:\s+(PORT_\w+)", out.stdout).group(1)


def check_link_events_veth(uroced, uroce_run, workdir):
    """Two uroced on a veth pair, each watched by ibv_asyncwatch. Daemon b's interface is set down, then up:
    b's port loses its interface, a's its carrier. Each hears IBV_EVENT_PORT_ERR then IBV_EVENT_PORT_ACTIVE
    for port 1, once each; ibv_devinfo says PORT_DOWN in between; and RDMA works again afterwards."""
    with veth_setup(uroced, workdir) as (daemons, socket_a, socket_b):
        b = daemons[1]
        watches = []
        try:
            for d in daemons:
                watches.append(AsyncWatch(uroce_run, d.socket, d.log_path + ".asyncwatch"))
            states = [port_state(uroce_run, d.socket) for d in daemons]
            assert states == ["PORT_ACTIVE"] * 2, states
            sh("ip", "-n", b.netns, "link", "set", b.interface, "down")
            for w in watches:
                assert w.wait_for_events(1) == [("IBV_EVENT_PORT_ERR", "1")], w.output()
            states = [port_state(uroce_run, d.socket) for d in daemons]
            assert states == ["PORT_DOWN"] * 2, states
            sh("ip", "-n", b.netns, "link", "set", b.interface, "up")
            for w in watches:
                assert w.wait_for_events(2) == [("IBV_EVENT_PORT_ERR", "1"), ("IBV_EVENT_PORT_ACTIVE", "1")], \
                    w.output()
            states = [port_state(uroce_run, d.socket) for d in daemons]
            assert states == ["PORT_ACTIVE"] * 2, states
            command = ["ibv_rc_pingpong", "-g", "0", "-p", str(22000 + os.getpid() % 10000), "-n", "100"]
            run_server_client(uroce_run, socket_a, socket_b, command, "ibv_rc_pingpong after the link came back",
                              TIMEOUT).assert_both_exited_0()
        finally:
            for w in watches:
                w.stop()
        for d in daemons:
            log = d.read_log()
            assert "link down" in log and "link up" in log, log[-2000:]


def check_link_events_memif(uroced, uroce_run, workdir):
    """A memif's link is up only while its peer is there: the server end's uroced starts alone (PORT_DOWN, no
    event for that), then its watcher hears IBV_EVENT_PORT_ACTIVE when the client end starts and
    IBV_EVENT_PORT_ERR when it stops."""
    server = memif_daemon(uroced, workdir, 0)
    client = None
    watch = None
    try:
        watch = AsyncWatch(uroce_run, server.socket, server.log_path + ".asyncwatch")
        assert port_state(uroce_run, server.socket) == "PORT_DOWN"
        client = memif_daemon(uroced, workdir, 1)
        assert watch.wait_for_events(1) == [("IBV_EVENT_PORT_ACTIVE", "1")], watch.output()
        assert port_state(uroce_run, server.socket) == "PORT_ACTIVE"
        assert client.stop() == 0
        assert watch.wait_for_events(2) == [("IBV_EVENT_PORT_ACTIVE", "1"), ("IBV_EVENT_PORT_ERR", "1")], \
            watch.output()
        assert port_state(uroce_run, server.socket) == "PORT_DOWN"
    finally:
        if watch:
            watch.stop()
        for d in (client, server):
            if d:
                d.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--uroced", required=True)
    ap.add_argument("--uroce-run", required=True)
    ap.add_argument("--uroce", required=True, help="the uroce tool (uroce stats)")
    args = ap.parse_args()
    missing = [p for p in ("ibv_devices", "ibv_devinfo") if not shutil.which(p)]
    if missing:
        print("missing programs (apt-get install ibverbs-utils):", " ".join(missing))
        return 1
    workdir = tempfile.mkdtemp(prefix="uroce-shim-")
    daemon = Daemon(args.uroced, workdir, "u")
    cases = [
        ("ibv_devices", lambda: check_devices(args.uroce_run, daemon.socket)),
        ("ibv_devinfo", lambda: check_devinfo(args.uroce_run, daemon.socket, False)),
        ("ibv_devinfo -v", lambda: check_devinfo(args.uroce_run, daemon.socket, True)),
        ("uroce-run refuses bad invocations", lambda: check_bad_invocations(args.uroce_run, daemon.socket)),
        ("a draining receive queue makes the engine yield",
         lambda: check_receive_queue_low(args.uroce_run, args.uroce, daemon.socket)),
        ("ibv_xsrq_pingpong (XRC) over 5% loss",
         lambda: check_xrc_over_loss(args.uroced, args.uroce_run, args.uroce, workdir)),
    ]
    if is_root():  # network namespaces and veth pairs
        cases += [
            ("ibv_asyncwatch: a veth's link goes down and comes back",
             lambda: check_link_events_veth(args.uroced, args.uroce_run, workdir)),
            ("ibv_asyncwatch: a memif's peer comes and goes",
             lambda: check_link_events_memif(args.uroced, args.uroce_run, workdir)),
        ]
    else:
        print("SKIP the link event cases: they need root (network namespaces)")
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
