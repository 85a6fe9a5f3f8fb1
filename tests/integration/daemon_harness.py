"""Real uroced daemons and real client processes for integration tests.

Everything a test creates is named after its pid (network namespaces, veth pairs, sockets under a
temporary directory) and removed by the test, also when it fails; processes are stopped by PID.
"""
import contextlib
import json
import os
import signal
import subprocess
import tempfile
import time
import unittest


class Daemon:
    """One uroced. `netns`: run it inside that network namespace. `interface`: the kernel interface its
    port is on, if any (for tests that act on the link)."""

    def __init__(self, uroced, workdir, name, args=(), netns=None, interface=None):
        self.netns = netns
        self.interface = interface
        self.socket = os.path.join(workdir, name + ".sock")
        self.log_path = os.path.join(workdir, name + ".log")
        cmd = [uroced, "--socket", self.socket, "--log-level", "debug", *args]
        if netns:
            cmd = ["ip", "netns", "exec", netns, *cmd]
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        self.stop_requested = False
        deadline = time.time() + 20
        while not os.path.exists(self.socket):
            if self.proc.poll() is not None:
                raise RuntimeError(f"uroced {name} exited with {self.proc.returncode}:\n{self.read_log()}")
            if time.time() > deadline:
                raise RuntimeError(f"uroced {name} did not start:\n{self.read_log()}")
            time.sleep(0.05)

    def read_log(self):
        with open(self.log_path) as f:
            return f.read()

    def alive(self):
        return self.proc.poll() is None

    def request_stop(self, sig=signal.SIGTERM):
        """Signals the daemon to stop, without waiting (stop() then waits and signals no more)."""
        if self.proc.poll() is None and not self.stop_requested:
            self.proc.send_signal(sig)
            self.stop_requested = True

    def stop(self, sig=signal.SIGTERM, timeout=20):
        """Stops the daemon by PID; returns its exit code."""
        if self.proc.poll() is None:
            self.request_stop(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode


def stats(uroce, socket):
    out = subprocess.run([uroce, "stats", "--socket", socket, "--json"], capture_output=True, text=True, timeout=20)
    if out.returncode != 0:
        raise RuntimeError("uroce stats failed: " + out.stderr)
    return json.loads(out.stdout)


def run_pair(tool, workdir, server_socket, client_socket, op, size, count, depth=16, timeout=60, extra=()):
    """Runs uroce-rdma-test as server and client; returns (client result dict or None, server rc, stderr)."""
    oob = os.path.join(workdir, f"oob-{op}-{time.monotonic_ns()}")
    common = ["--oob", oob, "--op", op, "--size", str(size), "--count", str(count), "--depth", str(depth),
              "--timeout", str(timeout), *extra]
    server = subprocess.Popen([tool, "--server", "--socket", server_socket, *common],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        client = subprocess.run([tool, "--client", "--socket", client_socket, *common],
                                capture_output=True, text=True, timeout=timeout + 30)
        _, server_err = server.communicate(timeout=timeout + 30)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    result = json.loads(client.stdout.strip().splitlines()[-1]) if client.stdout.strip() else None
    return result, client.returncode, server.returncode, client.stderr + server_err


def sh(*cmd, check=True):
    return subprocess.run(cmd, check=check, capture_output=True, text=True)


def daemon_side_link(netns, ifname):
    """Readies the interface `ifname` in `netns` for a uroced on it: no kernel address, ARP off and IPv6 off
    (the daemon does ARP and neighbour discovery itself, and the kernel neither answers for the daemon's
    address nor sends noise), MTU 4200 (a 4096-byte RoCE MTU), up; and the namespace's lo up."""
    sh("ip", "netns", "exec", netns, "sysctl", "-qw", f"net.ipv6.conf.{ifname}.disable_ipv6=1", check=False)
    sh("ip", "-n", netns, "link", "set", ifname, "arp", "off")
    sh("ip", "-n", netns, "link", "set", ifname, "mtu", "4200")
    sh("ip", "-n", netns, "link", "set", ifname, "up")
    sh("ip", "-n", netns, "link", "set", "lo", "up")


@contextlib.contextmanager
def two_namespaces_with_veth():
    """Two network namespaces joined by a veth pair, names unique to this process. The kernel side of
    each veth has no address, ARP off and IPv6 off: the daemon on it does ARP itself, and the kernel
    neither answers for the daemon's address nor sends noise."""
    tag = f"u{os.getpid()}"
    ns = [f"{tag}a", f"{tag}b"]
    veth = [f"{tag}va", f"{tag}vb"]
    try:
        for n in ns:
            sh("ip", "netns", "add", n)
        sh("ip", "link", "add", veth[0], "netns", ns[0], "type", "veth", "peer", "name", veth[1], "netns", ns[1])
        for n, v in zip(ns, veth):
            daemon_side_link(n, v)
        yield ns, veth
    finally:
        for n in ns:
            sh("ip", "netns", "del", n, check=False)


@contextlib.contextmanager
def bridged_ports(count):
    """One network namespace of this process's own holding a bridge (a switch) and `count` veth pairs, one
    end of each on the bridge and the other readied for a uroced (daemon_side_link): every daemon on one
    of them reaches every other, as NICs on one switch do. Yields (namespace, [interface names])."""
    ns = f"u{os.getpid()}br"
    ifaces = [f"ub{i}" for i in range(count)]
    try:
        sh("ip", "netns", "add", ns)
        sh("ip", "-n", ns, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", ns, "link", "set", "br0", "up")
        for iface in ifaces:
            sh("ip", "-n", ns, "link", "add", iface, "type", "veth", "peer", "name", iface + "p")
            sh("ip", "-n", ns, "link", "set", iface + "p", "master", "br0", "mtu", "4200", "up")
            daemon_side_link(ns, iface)
        yield ns, ifaces
    finally:
        sh("ip", "netns", "del", ns, check=False)


@contextlib.contextmanager
def interface_namespace(address, ifname):
    """A network namespace of this process's own in which the interface `ifname` (one end of a veth whose
    other end is there too; both up) holds `address`/24, as a RoCE NIC's netdev holds its port's address on
    a host; yields its name. For programs that find their device through a kernel interface (libfabric's
    FI_VERBS_IFACE), while uroced and its port stay outside. Deleted on exit, with everything in it."""
    ns = f"u{os.getpid()}if"
    try:
        sh("ip", "netns", "add", ns)
        sh("ip", "-n", ns, "link", "add", ifname, "type", "veth", "peer", "name", f"{ifname}-peer")
        sh("ip", "-n", ns, "addr", "add", f"{address}/24", "dev", ifname)
        for link in (ifname, f"{ifname}-peer", "lo"):
            sh("ip", "-n", ns, "link", "set", link, "up")
        yield ns
    finally:
        sh("ip", "netns", "del", ns, check=False)


def tshark(*args):
    """tshark's output lines (blank ones dropped); fails the test if tshark does."""
    out = subprocess.run(["tshark", *args], capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise AssertionError(f"tshark {' '.join(args)}: rc {out.returncode}\n{out.stderr}")
    return [line for line in out.stdout.splitlines() if line.strip()]


class DaemonTestCase(unittest.TestCase):
    """A test case with a temporary directory and the daemons it starts (self.daemons), all of them stopped
    by PID at the end: signalled together, then waited for."""

    def setUp(self):
        self.dir = tempdir()
        self.daemons = []

    def tearDown(self):
        for d in self.daemons:
            d.request_stop()
        for d in self.daemons:
            d.stop()
        self.dir.cleanup()


def is_root():
    return os.geteuid() == 0


def tempdir():
    return tempfile.TemporaryDirectory(prefix="uroce-daemon-test-")


HUGE_PAGES = "/proc/sys/vm/nr_hugepages"  # the pool of the default size: 2 MiB pages on x86-64


@contextlib.contextmanager
def huge_pages_added(count):
    """Grows the system's pool of huge pages by `count` for the block, as root, and gives them back after;
    yields how many pages the pool has (0: none, and none could be added)."""
    try:
        with open(HUGE_PAGES) as f:
            before = int(f.read())
    except OSError:
        yield 0
        return
    grown = False
    if is_root():
        with open(HUGE_PAGES, "w") as f:
            f.write(str(before + count))
        grown = True
    try:
        with open(HUGE_PAGES) as f:
            yield int(f.read())
    finally:
        if grown:
            with open(HUGE_PAGES, "w") as f:
                f.write(str(before))


# --- The three setups of the daemon and verbs tests --------------------------------------------------------
# Each is a context manager yielding (daemons, server_socket, client_socket): (a) one uroced on its internal
# loopback port, both sides through it; (b) two uroced in two network namespaces joined by a veth pair
# (net_af_packet; needs root); (c) two uroced joined by a memif. Daemons are stopped by PID on the way out.

@contextlib.contextmanager
def _stopped_at_exit(daemons):
    try:
        yield
    finally:
        # Both ends at once: a memif end that stops while its peer still polls can crash in DPDK 22.11's
        # memif driver (uroced pauses for a peer stopping with it; docs/daemon.md, known limitations).
        for d in daemons:
            d.request_stop()
        for d in daemons:
            d.stop()


@contextlib.contextmanager
def loopback_setup(uroced, workdir, extra=()):
    daemons = []
    with _stopped_at_exit(daemons):
        daemons.append(Daemon(uroced, workdir, "lo", list(extra)))
        yield daemons, daemons[0].socket, daemons[0].socket


@contextlib.contextmanager
def veth_setup(uroced, workdir, extra=(), ipv6=False, capture=False):
    """ipv6: each daemon also has an IPv6 address, fd00:77::1 and fd00:77::2 (GID 1, neighbour discovery).
    capture: each daemon writes what its port sends and receives to WORKDIR/va.pcap and WORKDIR/vb.pcap."""
    with two_namespaces_with_veth() as (ns, ifs):
        daemons = []
        with _stopped_at_exit(daemons):  # inside: the daemons stop before their namespaces go
            for i, name in enumerate(("va", "vb")):
                v6 = ["--ip", f"fd00:77::{i + 1}"] if ipv6 else []
                pcap = ["--capture", os.path.join(workdir, name + ".pcap")] if capture else []
                daemons.append(Daemon(uroced, workdir, name, ["--port", f"net_af_packet0,iface={ifs[i]}",
                                                              "--ip", f"10.77.0.{i + 1}", *v6, *pcap, *extra],
                                      netns=ns[i], interface=ifs[i]))
            yield daemons, daemons[0].socket, daemons[1].socket


@contextlib.contextmanager
def memif_setup(uroced, workdir, extra=()):
    daemons = []
    with _stopped_at_exit(daemons):
        for end in (0, 1):
            daemons.append(memif_daemon(uroced, workdir, end, extra))
        yield daemons, daemons[0].socket, daemons[1].socket


def memif_daemon(uroced, workdir, end, extra=()):
    """One end of the memif setup: 0 is the memif server (10.78.0.1), 1 its client (10.78.0.2). A port's link
    is up while both ends run."""
    name, role = (("ma", "server"), ("mb", "client"))[end]
    sock = os.path.join(workdir, "memif.sock")
    return Daemon(uroced, workdir, name, ["--port", f"net_memif0,role={role},socket={sock}",
                                          "--ip", f"10.78.0.{end + 1}", *extra])


SETUPS = {"loopback": loopback_setup, "veth": veth_setup, "memif": memif_setup}
