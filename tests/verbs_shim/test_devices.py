#!/usr/bin/env python3
"""Several uroce devices in one program: each uroced is one RDMA device, named by --device-name, and a
program sees those whose sockets UROCE_SOCKET lists (uroce-run --socket A --socket B), in that order, as a
host lists one device per NIC. Two daemons joined by memif (no root needed), named uroce0 and uroce1:

- ibv_devices lists both, in the order given (and the other way round when the order is); ibv_devinfo
  -d uroce1 shows the second daemon's port and address;
- one pyverbs process connects an RC QP on each device to the other and moves data both ways
  (pyverbs_two_devices.py);
- perftest's server on uroce0 and its client on uroce1, as on a host whose two ports are cabled together;
- rdma_cm works on the first device of each program's list: rping between the two daemons, each side
  with the other's device listed second;
- a third daemon that is also called uroce0 is left out of the list with a warning naming --device-name;
- uroced refuses a device name that is not 1 to 63 letters, digits, '_' or '-';
- the shim logs on the program's stderr, never its stdout, at $UROCE_LOG_LEVEL;
- as root: UCX's multi-rail over two devices on each side, four daemons on one bridge (check_ucx_two_rails).

  test_devices.py --uroced build/.../emulator/uroced --uroce-run build/.../verbs_shim/uroce-run \
                  --uroce build/.../pcap_tools/uroce
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from daemon_harness import Daemon, bridged_ports, is_root, memif_daemon, stats, tempdir  # noqa: E402
from server_client import run_server_client, server_client, socket_options  # noqa: E402

PYTHON = "/usr/bin/python3"  # Debian's, with python3-pyverbs
TIMEOUT = 120
ADDRESSES = ("10.78.0.1", "10.78.0.2")  # memif_daemon's


def run(uroce_run, sockets, argv):
    return subprocess.run([uroce_run, *socket_options(sockets), *argv], capture_output=True, text=True,
                          timeout=TIMEOUT)


def listed(out):
    """The device names ibv_devices printed, in order."""
    return re.findall(r"^\s+(\S+)\s+[0-9a-f]{16}\s*$", out, re.M)


def check_lists(uroce_run, a, b):
    both = run(uroce_run, [a.socket, b.socket], ["ibv_devices"])
    assert both.returncode == 0 and listed(both.stdout) == ["uroce0", "uroce1"], both
    assert both.stderr == "", both.stderr
    reversed_order = run(uroce_run, [b.socket, a.socket], ["ibv_devices"])
    assert listed(reversed_order.stdout) == ["uroce1", "uroce0"], reversed_order
    twice = run(uroce_run, [a.socket, b.socket, a.socket], ["ibv_devices"])  # one daemon, one device
    assert listed(twice.stdout) == ["uroce0", "uroce1"] and twice.stderr == "", twice
    info = run(uroce_run, [a.socket, b.socket], ["ibv_devinfo", "-v", "-d", "uroce1"])
    assert info.returncode == 0 and "hca_id:\turoce1" in info.stdout, info
    assert re.search(rf"GID\[\s*0\]:\s+::ffff:{re.escape(ADDRESSES[1])}, RoCE v2", info.stdout), info.stdout
    print("PASS ibv_devices and ibv_devinfo see both devices, in the order given")


def check_one_process(uroce_run, a, b):
    out = run(uroce_run, [a.socket, b.socket], [PYTHON, os.path.join(HERE, "pyverbs_two_devices.py"), "uroce0",
                                                "uroce1", *ADDRESSES])
    assert out.returncode == 0 and "two devices: ok" in out.stdout, out.stdout + out.stderr
    print("PASS one process: an RC QP on each device, connected to the other, WRITE 64 KiB and SEND")


def check_perftest_across(uroce_run, a, b):
    # A host's two ports cabled to each other: perftest's server on one device, its client on the other,
    # each process seeing both (the usual way to test a NIC without a second host).
    port = str(20000 + (os.getpid() + 2) % 20000)
    common = ["-x", "0", "-p", port, "-s", "65536", "-n", "500"]
    r = run_server_client(uroce_run, [a.socket, b.socket], [a.socket, b.socket],
                          ["ib_write_bw", "-d", "uroce0", *common], "ib_write_bw uroce0 <- uroce1", TIMEOUT,
                          client_command=["ib_write_bw", "-d", "uroce1", *common])
    r.assert_both_exited_0()
    result = re.search(r"^\s*65536\s+500\s+[\d.]+\s+([\d.]+)", r.client.stdout, re.M)
    assert result and float(result.group(1)) > 0, r.client.stdout
    print(f"PASS ib_write_bw from uroce1 to uroce0, one host: {result.group(1)} MB/s")


def check_rdma_cm(uroce_run, a, b):
    # The server lists its own device first, the client its own: rdma_cm on each side is on the first.
    # -V: the client checks that every ping came back intact.
    common = ["-a", ADDRESSES[0], "-p", str(20000 + os.getpid() % 20000), "-C", "3", "-V"]
    client_out, _ = server_client(uroce_run, [a.socket, b.socket], [b.socket, a.socket], ["rping", "-s", *common],
                                  ["rping", "-c", "-v", *common], "rping across two devices", retry_on=("REJECTED",),
                                  timeout=TIMEOUT)
    assert client_out.count("ping data:") == 3, client_out
    # The second device's address, with the first device first: refused, with the hint on stderr.
    wrong = run(uroce_run, [a.socket, b.socket], ["rping", "-s", "-a", ADDRESSES[1], "-p", "1", "-C", "1"])
    assert wrong.returncode != 0, wrong
    assert f"rdma_bind_addr {ADDRESSES[1]}: not an address of the first device's uroced" in wrong.stderr, wrong
    print("PASS rdma_cm on each program's first device: rping between the two daemons; a hint for another's")


def check_same_name(uroced, uroce_run, workdir, a):
    twin = Daemon(uroced, workdir, "twin", [])  # the loopback port, called uroce0 too
    try:
        out = run(uroce_run, [a.socket, twin.socket], ["ibv_devices"])
        assert out.returncode == 0 and listed(out.stdout) == ["uroce0"], out
        assert f"the uroced at {twin.socket} is also called uroce0: left out" in out.stderr, out.stderr
        assert "--device-name" in out.stderr, out.stderr
        assert "left out" not in out.stdout, "the shim's log on the program's stdout"
    finally:
        twin.stop()
    print("PASS a second device of the same name is left out, with a warning on stderr")


def check_log_level(uroce_run, workdir):
    # The shim's debug lines, on stderr, when asked for: here why a listed daemon gave no device.
    missing = os.path.join(workdir, "missing.sock")
    env = {**os.environ, "UROCE_LOG_LEVEL": "debug"}
    out = subprocess.run([uroce_run, "--socket", missing, "ibv_devices"], capture_output=True, text=True,
                         timeout=TIMEOUT, env=env)
    assert out.returncode == 0 and f"verbs shim: no device at {missing}" in out.stderr, out
    quiet = run(uroce_run, [missing], ["ibv_devices"])
    assert "no device at" not in quiet.stderr + quiet.stdout, quiet
    print("PASS UROCE_LOG_LEVEL=debug shows the shim's debug lines on stderr")


def check_bad_names(uroced, workdir):
    for name in ("", "a/b", "x" * 64, "uroce 0", "uröce"):
        out = subprocess.run([uroced, "--socket", os.path.join(workdir, "bad.sock"), "--device-name", name],
                             capture_output=True, text=True, timeout=TIMEOUT)
        assert out.returncode not in (0,) and out.returncode < 128, (name, out)
        assert "--device-name" in out.stderr, (name, out.stderr)
    print("PASS uroced refuses bad device names")


def check_ucx_two_rails(uroced, uroce_run, uroce, workdir):
    """UCX's multi-rail, on four daemons on one switch (bridged_ports): the server's program on uroce0 and
    uroce1 (daemons 0 and 1), the client's on its own uroce0 and uroce1 (daemons 2 and 3). UCP's tag_bw
    with 4 MiB messages splits each rendezvous over both rails (UCX_MAX_RNDV_RAILS, 2 by default), so each
    of the server's daemons must receive a good part of the frames: with one rail (UCX_MAX_RNDV_RAILS=1)
    one daemon got them all."""
    with bridged_ports(4) as (ns, ifaces):
        daemons = []
        try:
            for i, iface in enumerate(ifaces):
                options = ["--port", f"net_af_packet0,iface={iface}", "--ip", f"10.80.0.{i + 1}",
                           "--device-name", f"uroce{i % 2}"]
                daemons.append(Daemon(uroced, workdir, f"rail{i}", options, netns=ns))
            port = str(20000 + (os.getpid() + 1) % 20000)
            command = ["env", "UCX_TLS=rc_verbs,ud_verbs", "UCX_NET_DEVICES=uroce0:1,uroce1:1", "ucx_perftest", "-p",
                       port, "-t", "tag_bw", "-s", str(4 << 20), "-n", "50"]
            r = run_server_client(uroce_run, [daemons[0].socket, daemons[1].socket],
                                  [daemons[2].socket, daemons[3].socket], command, "ucx_perftest over two rails",
                                  TIMEOUT, not_listening=("connect() failed: Connection refused",))
            r.assert_both_exited_0()
            final = re.search(r"^Final:\s+(\d+)\s+\S+\s+\S+\s+\S+\s+\S+\s+([\d.]+)", r.client.stdout, re.M)
            assert final and final.group(1) == "50", r.client.stdout
            frames = [stats(uroce, d.socket)["device"]["rx_frames"] for d in daemons[:2]]
            assert min(frames) > 0.3 * sum(frames), f"the server's daemons received {frames} frames: one rail"
        finally:
            for d in daemons:
                d.stop()
    print(f"PASS UCX over two rails: tag_bw 4 MiB x 50, {final.group(2)} MB/s, frames per rail {frames}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--uroced", required=True)
    ap.add_argument("--uroce-run", required=True)
    ap.add_argument("--uroce", required=True, help="the uroce command line (stats)")
    args = ap.parse_args()
    with tempdir() as workdir:
        daemons = []
        try:
            for end in (0, 1):
                daemons.append(memif_daemon(args.uroced, workdir, end, ["--device-name", f"uroce{end}"]))
            a, b = daemons
            check_lists(args.uroce_run, a, b)
            check_one_process(args.uroce_run, a, b)
            check_perftest_across(args.uroce_run, a, b)
            check_rdma_cm(args.uroce_run, a, b)
            check_same_name(args.uroced, args.uroce_run, workdir, a)
            check_bad_names(args.uroced, workdir)
            check_log_level(args.uroce_run, workdir)
        finally:
            for d in daemons:  # both memif ends at once (daemon_harness._stopped_at_exit)
                d.request_stop()
            for d in daemons:
                d.stop()
        if is_root():
            assert shutil.which("ucx_perftest"), "no ucx_perftest: scripts/deps.sh installs ucx-utils"
            check_ucx_two_rails(args.uroced, args.uroce_run, args.uroce, workdir)
        else:
            print("SKIP UCX over two rails: needs root (a network namespace with a bridge)")
    print("all device checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
