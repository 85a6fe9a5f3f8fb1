#!/usr/bin/env python3
"""Several uroce devices in one program: each uroced is one RDMA device, named by --device-name, and a
program sees those whose sockets UROCE_SOCKET lists (uroce-run --socket A --socket B), in that order, as a
host lists one device per NIC. Two daemons joined by memif (no root needed), named uroce0 and uroce1:

- ibv_devices lists both, in the order given (and the other way round when the order is); ibv_devinfo
  -d uroce1 shows the second daemon's port and address;
- one pyverbs process connects an RC QP on each device to the other and moves data both ways
  (pyverbs_two_devices.py);
- perftest's server on uroce0 and its client on uroce1, as on a host whose two ports are cabled together;
- rdma_cm places IDs on the devices their addresses name: a wildcard listener hears both, a client bound
  to its second device's address connects from there (check_rdma_cm); as root, a client that names only
  its destination goes out through the device whose subnet holds it (check_rdma_cm_routes);
- a third daemon that is also called uroce0 is left out of the list with a warning naming --device-name;
- a device whose uroced stops gives its rdma_cm IDs DEVICE_REMOVAL (rping's listener exits);
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
import signal
import subprocess
import sys
import time

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


def cm_mads(uroce, daemon):
    c = stats(uroce, daemon.socket)["cm"]
    return c["tx_mads"], c["rx_mads"]


def check_rdma_cm(uroce_run, uroce, a, b):
    """rdma_cm places each ID on the device its addresses name, as Linux binds an ID to a netdev:
    - a wildcard listener hears every device, here the server's second (uroce0, daemon a), and its one event
      channel carries both daemons' events;
    - a client bound to the second device's address (rping -I) connects from that device: its REQ leaves
      daemon b and reaches daemon a over memif;
    - a server bound to the second device's address listens there, and a client listing both devices reaches
      it through that device, whose own address it is (a connection within one device, as Linux's)."""
    port = 20000 + os.getpid() % 20000
    tx_b, _ = cm_mads(uroce, b)
    _, rx_a = cm_mads(uroce, a)
    # -V: the client checks that every ping came back intact.
    common = ["-p", str(port), "-C", "3", "-V"]
    client_out, _ = server_client(uroce_run, [b.socket, a.socket], [a.socket, b.socket],
                                  ["rping", "-s", "-a", "0.0.0.0", *common],
                                  ["rping", "-c", "-v", "-I", ADDRESSES[1], "-a", ADDRESSES[0], *common],
                                  "rping: a wildcard listener, a client bound to its second device",
                                  retry_on=("REJECTED",), timeout=TIMEOUT)
    assert client_out.count("ping data:") == 3, client_out
    # REQ, RTU and DREQ (or DREP) at least: from b's port, into a's.
    assert cm_mads(uroce, b)[0] >= tx_b + 3 and cm_mads(uroce, a)[1] >= rx_a + 3, (cm_mads(uroce, a), cm_mads(uroce, b))
    common = ["-a", ADDRESSES[1], "-p", str(port + 1), "-C", "3", "-V"]
    client_out, _ = server_client(uroce_run, [a.socket, b.socket], [a.socket, b.socket], ["rping", "-s", *common],
                                  ["rping", "-c", "-v", *common], "rping on the second device's address",
                                  retry_on=("REJECTED",), timeout=TIMEOUT)
    assert client_out.count("ping data:") == 3, client_out
    # rsockets: rstream's server on the wildcard; the client, listing b first, reaches a's address through a,
    # whose own address it is, so the request comes to the server's twin listener on its second device.
    # (rstream -b binds the client to the server's port, which the wildcard listener holds on b: EADDRINUSE,
    # as in one Linux host.) Verified data (-T v), 64 KiB x 100 each way.
    common = ["-p", str(port + 3), "-S", "65536", "-C", "100", "-T", "v"]
    client_out, server_out = server_client(uroce_run, [b.socket, a.socket], [b.socket, a.socket],
                                           ["rstream", *common], ["rstream", "-s", ADDRESSES[0], *common],
                                           "rstream: a wildcard listener, a client through its second device",
                                           retry_on=("Connection refused",), timeout=TIMEOUT)
    for out in (client_out, server_out):
        assert "verification failed" not in out and re.search(r"^custom\s+64k\s+100\s+1\s", out, re.M), out
    # UD: udaddy's server on the wildcard (port 7174, its own), the client bound to its second device: SIDR
    # from b to the server's twin on a, then 10 datagrams each way per ID.
    client_out, server_out = server_client(uroce_run, [b.socket, a.socket], [a.socket, b.socket],
                                           ["udaddy", "-c", "2", "-C", "10"],
                                           ["udaddy", "-s", ADDRESSES[0], "-b", ADDRESSES[1], "-c", "2", "-C", "10"],
                                           "udaddy: a wildcard listener, a client bound to its second device",
                                           retry_on=("UNREACHABLE",), timeout=TIMEOUT)
    for out in (client_out, server_out):
        assert "test complete" in out and "receiving data transfers" in out, out
    check_listener_port_taken(uroce_run, uroce, a, b, port + 2)
    print("PASS rdma_cm across devices: a wildcard listener on both, a client bound to its second device (rping, "
          "udaddy), rstream through the second devices, a listener on the second device's address; a device "
          "whose port is taken is left out with a warning")


def check_listener_port_taken(uroce_run, uroce, a, b, port):
    """A wildcard listener whose port another program holds on one of the devices listens on the others, and
    says which device it left out (Linux has one port space for all devices; uroce has one per daemon)."""
    def rping_server(sockets, address):
        return subprocess.Popen([uroce_run, *socket_options(sockets), "rping", "-s", "-a", address, "-p", str(port)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ids = stats(uroce, b.socket)["cm"]["ids"]
    holder = rping_server([b.socket], ADDRESSES[1])
    try:
        # rping says nothing when it listens: its ID on b shows it (bind and listen follow within microseconds).
        deadline = time.time() + 10
        while stats(uroce, b.socket)["cm"]["ids"] == ids and holder.poll() is None and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)
        wildcard = rping_server([a.socket, b.socket], "0.0.0.0")
        time.sleep(1)
        if wildcard.poll() is None:
            wildcard.kill()
        _, err = wildcard.communicate()
        assert "rdma_listen on port" in err and "not listening on uroce1" in err, err
        assert wildcard.returncode == -9, "the wildcard listener did not keep listening on uroce0"
        assert holder.poll() is None, "the program holding the port on uroce1 stopped"
    finally:
        holder.kill()
        holder.communicate()


def check_rdma_cm_routes(uroced, uroce_run, uroce, workdir):
    """A client that names only its destination goes out through the device whose subnet holds it, as Linux's
    route lookup picks the netdev; an on-link device beats the first one's gateway. Three daemons on one
    switch (bridged_ports), two subnets: the server's program lists uroce1 (10.81.2.1/24, gateway
    10.81.2.254, which no one answers for) and then uroce0 (10.81.1.1/24), and listens on both; the client's
    lists that same uroce1 and then its own uroce2 (10.81.1.2/24), and connects to 10.81.1.1."""
    with bridged_ports(3) as (ns, ifaces):
        daemons = []
        try:
            for i, (ip, extra) in enumerate([("10.81.1.1/24", []), ("10.81.2.1/24", ["--gateway", "10.81.2.254"]),
                                             ("10.81.1.2/24", [])]):
                options = ["--port", f"net_af_packet0,iface={ifaces[i]}", "--ip", ip, "--device-name", f"uroce{i}",
                           *extra]
                daemons.append(Daemon(uroced, workdir, f"route{i}", options, netns=ns))
            before = cm_mads(uroce, daemons[2])[0]
            common = ["-p", str(20000 + (os.getpid() + 3) % 20000), "-C", "3", "-V"]
            client_out, _ = server_client(uroce_run, [daemons[1].socket, daemons[0].socket],
                                          [daemons[1].socket, daemons[2].socket],
                                          ["rping", "-s", "-a", "0.0.0.0", *common],
                                          ["rping", "-c", "-v", "-a", "10.81.1.1", *common],
                                          "rping through the device on the destination's subnet",
                                          retry_on=("REJECTED",), timeout=TIMEOUT)
            assert client_out.count("ping data:") == 3, client_out
            assert cm_mads(uroce, daemons[2])[0] >= before + 3, "the client's REQ did not leave its uroce2"
            check_listener_outlives_a_device(uroce_run, daemons, common)
        finally:
            for d in daemons:
                d.stop()
    print("PASS rdma_cm picks the device on the destination's subnet over the first device's gateway; a "
          "wildcard listener goes on when one of its devices' daemons stops")


def check_listener_outlives_a_device(uroce_run, daemons, common):
    """The daemon of one of a wildcard listener's devices stops: the listener's events keep coming from the
    other, whose connection then works (the event channel passes over the daemon that has gone)."""
    def stop_uroce0():
        time.sleep(1)  # listening on both
        assert daemons[0].stop() == 0, "uroce0's daemon did not stop cleanly"
    # The client to uroce1's own address, from that device.
    client_out, _ = server_client(uroce_run, [daemons[1].socket, daemons[0].socket],
                                  [daemons[1].socket, daemons[2].socket], ["rping", "-s", "-a", "0.0.0.0", *common],
                                  ["rping", "-c", "-v", "-a", "10.81.2.1", *common],
                                  "rping after one of the listener's daemons stopped", retry_on=("REJECTED",),
                                  timeout=TIMEOUT, server_started=stop_uroce0)
    assert client_out.count("ping data:") == 3, client_out


def check_device_removal(uroced, uroce_run, uroce, workdir):
    """A device goes away under a program (its uroced stops, or is killed): rping's listener, bound to the
    device's address, gets RDMA_CM_EVENT_DEVICE_REMOVAL, as from Linux's rdma_cm when a NIC is removed, and
    exits instead of waiting for ever. A wildcard listener on several devices gets none when one goes
    (check_rdma_cm_routes)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        removed = Daemon(uroced, workdir, "removed", ["--no-device-node"])  # the loopback port, 192.0.2.1
        server = None
        try:
            ids = stats(uroce, removed.socket)["cm"]["ids"]
            server = subprocess.Popen([uroce_run, "--socket", removed.socket, "rping", "-s", "-a", "192.0.2.1", "-p",
                                       str(20000 + (os.getpid() + 4) % 20000)],
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            deadline = time.time() + 10
            while stats(uroce, removed.socket)["cm"]["ids"] == ids and server.poll() is None and \
                    time.time() < deadline:
                time.sleep(0.05)
            time.sleep(0.2)  # bound and listening
            assert removed.stop(sig) == (0 if sig == signal.SIGTERM else -sig), "uroced did not stop as told"
            out, _ = server.communicate(timeout=10)
        finally:
            removed.stop()
            if server is not None and server.poll() is None:
                server.kill()
                server.communicate()
        assert "cma detected device removal" in out, (sig, out)
    print("PASS a device's uroced stops or is killed: rping's listener on it gets DEVICE_REMOVAL and exits")


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
            check_rdma_cm(args.uroce_run, args.uroce, a, b)
            check_same_name(args.uroced, args.uroce_run, workdir, a)
            check_device_removal(args.uroced, args.uroce_run, args.uroce, workdir)
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
            check_rdma_cm_routes(args.uroced, args.uroce_run, args.uroce, workdir)
        else:
            print("SKIP UCX over two rails and rdma_cm's routes: need root (a network namespace with a bridge)")
    print("all device checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
