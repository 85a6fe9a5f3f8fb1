#!/usr/bin/env python3
"""rsockets, librdmacm's socket API (rsocket, rbind, rlisten, raccept, rconnect, rsend, rrecv, rpoll, riomap,
riowrite, ...), through uroce's librdmacm.so.1: rdmacm-utils' unmodified rstream, riostream and rcopy through
uroce-run, and udpong (SOCK_DGRAM rsockets) with --dgram.

Setups: (a) loopback: one uroced on its internal loopback port (192.0.2.1 and fd00:79::1), server and client
both through it; (b) veth: two uroced in two network namespaces over a veth pair (root only), the server
through 10.77.0.1 / fd00:77::1, the client through 10.77.0.2 / fd00:77::2.

Cases, in each setup:
- rstream blocking (-T b); nonblocking (rstream's default) with 1 MiB transfers, twice the 512 KiB buffers
  rstream asks for, so every transfer waits for credits; async (-T a: nonblocking calls after rpoll with a
  zero timeout, raccept and the connection's completion too; see RPOLL_HUP below); async blocking (-T a
  -T b: rpoll sleeping until the CQ's channel wakes it); data verified (-T v) with 100000-byte
  transfers (not a divisor of the receive ring: writes wrap around it) and with 10-byte ones (inline sends);
  the same verified run over IPv6. Both sides must exit 0 and print rstream's result line with the size,
  transfer count and total asked for, a rate and a time per transfer; on the loopback also rstream's own
  table (no -S/-C: 64 B to 1 MiB, latency then bandwidth, on two connections in turn).
- riostream (riomap on one side, riowrite into it from the other, the last byte polled in memory):
  nonblocking, async (-T a, both sides) and blocking with data verified: the same checks.
- rcopy: a random file of 3 MiB + 17 bytes from the client to the server's rcopy, which writes it; the
  written file must have the same SHA-256 (IPv4 only: rcopy splits "server:file" at the first colon).
- rstream to a port nobody listens on: refused, as librdmacm reports a REJ ("Connection refused"), within
  10 s, with blocking and with nonblocking calls.
- the server SIGKILLed (by PID) in the middle of a long blocking rstream transfer, the client sending: its
  daemon sends a DREQ for the dead process's connection, and the client must exit with an error within
  10 s; the daemons must stay up and serve the next rstream.
- veth only: the server's end of the veth set down in the middle of such a transfer, with rstream -k 1
  (keepalive): no DREQ can arrive, and the client must exit with an error within 60 s, once a send (its
  data, or the keepalive write) has run out of retries; the link is set up again and the next rstream must
  run.
- with --hostile-peer (tests/verbs_shim/rsocket_peer/hostile_peer.c, a peer that breaks the protocol on
  purpose): an rstream -T b client against a server that answers with no rsocket data, with a version 2
  ConnData, with a data message longer than half the client's ring, or with more data messages than the
  client granted; an rstream -T b server against a client whose request has a version 2 ConnData. rstream
  must end within 15 s, not crash or hang, with the error librdmacm gives for the bad versions (ENOTSUP from
  rconnect, or raccept, which rejects the request) and EPROTO for the rest (where librdmacm would read past
  its ring or lose messages); the daemons must serve the next rstream.
- with --dgram: udpong (SOCK_DGRAM rsockets), echo mode (every datagram answered) and one-way, and echo mode
  with blocking calls over IPv6.
- with --datagram-check (tests/verbs_shim/rsocket_peer/datagram_check.c): datagram rsockets call by call
  against UDP's semantics, over IPv4 and IPv6.
- with --long, on the loopback: rstream -S all (every size from 64 B to 6 MiB, latency and bandwidth).

Every program runs under stdbuf -oL with its output in a file (at most 64 MB: a program that loops printing
errors is stopped by SIGXFSZ instead of filling the disk), and is stopped by PID. Exits 0 only if every case
passed.

  test_rsocket.py --uroced build/.../emulator/uroced --uroce-run build/.../verbs_shim/uroce-run
                  [--uroce UROCE] [--hostile-peer PROGRAM] [--setup loopback|veth]... [--dgram] [--long]
                  [--case SUBSTRING]...
"""
import argparse
import hashlib
import itertools
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from daemon_harness import SETUPS, is_root, stats  # noqa: E402

TIMEOUT = 60            # one program run
REFUSED_WAIT = 15       # how long a client is run again while its server does not listen yet
KILL_BOUND = 60         # how long a client may take to notice its peer is gone (its retries run out)
DREQ_BOUND = 10         # ... when the peer's daemon said so with a DREQ
OUTPUT_LIMIT = 64 << 20
REFUSED = "Connection refused"
SERVER_ADDRESSES = {"loopback": ("192.0.2.1", "fd00:79::1"), "veth": ("10.77.0.1", "fd00:77::1")}  # IPv4, IPv6
_ports = itertools.count(40000 + os.getpid() % 20000)
_jobs = itertools.count(1)


def port():
    return str(next(_ports))


# --- rstream's figures (librdmacm/examples/common.c: size_str, cnt_str, size_to_count) ---------------------

def size_str(n):
    for base, mag in ((1 << 30, "g"), (1 << 20, "m"), (1 << 10, "k"), (1, "")):
        if n >= base or base == 1:
            fraction = (n % base) * 10 // base if n // base < 10 else 0
            return f"{n // base}.{fraction}{mag}" if fraction else f"{n // base}{mag}"


def cnt_str(n):
    for div, suffix in ((10 ** 9, "b"), (10 ** 6, "m"), (10 ** 3, "k")):
        if n >= div:
            return f"{n // div}{suffix}"
    return str(n)


def size_to_count(size):
    return 100 if size >= 1 << 20 else 1000 if size >= 1 << 16 else 10000 if size >= 1 << 10 else 100000


# rstream's and riostream's test sizes: (size, option); option 0 runs by default, 1 only with -S all.
TEST_SIZES = [(1 << 6, 0)]
for _e in range(7, 23):
    TEST_SIZES += [(1 << _e, 0 if _e in (12, 16, 20) else 1), ((1 << _e) + (1 << (_e - 1)), 1)]
# "name bytes xfers iters total time Gb/sec usec/xfer", printf'd as %-10s%-8s%-8s%-8s%-8s%8.2fs%10.2f%11.2f
ROW = re.compile(r"^(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\d+\.\d\d)s\s+(\S+)\s+(\S+)\s*$", re.M)
# udpong: no iterations column
DGRAM_ROW = re.compile(r"^(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\d+\.\d\d)s\s+(\S+)\s+(\S+)\s*$", re.M)


def custom_rows(size, count):
    return [("custom", size, count, 1)]


def default_rows(size_option):
    """The rows rstream prints without -S/-C (size_option 0) or with -S all (1): latency, then bandwidth."""
    sizes = [s for s, option in TEST_SIZES if option <= size_option]
    return ([(f"{size_str(s)}_lat", s, 1, size_to_count(s)) for s in sizes] +
            [(f"{size_str(s)}_bw", s, size_to_count(s), 1) for s in sizes])


def check_table(out, expected, who):
    """Asserts OUT holds rstream's header and exactly the EXPECTED rows (name, size, count, iterations), in
    order, each with a finite rate and a positive time per transfer (the rate, two decimals in Gb/s, may
    print as 0.00 for small transfers); returns the rates in Gb/s."""
    assert re.search(r"^name\s+bytes\s+xfers\s+iters\s+total\s+time\s+Gb/sec\s+usec/xfer", out, re.M), \
        f"{who}: no result table header:\n{tail(out)}"
    rows = ROW.findall(out)
    want = [(name, size_str(size), cnt_str(count), cnt_str(iters), size_str(iters * count * size * 2))
            for name, size, count, iters in expected]
    got = [r[:5] for r in rows]
    assert got == want, f"{who}: result rows {got}, expected {want}:\n{tail(out)}"
    rates = []
    for r in rows:
        rate, usec = float(r[6]), float(r[7])
        assert 0 <= rate < float("inf") and 0 < usec < float("inf"), f"{who}: {r[6]} Gb/s, {r[7]} us/transfer"
        rates.append(rate)
    return rates


def tail(text, n=3000):
    return text if len(text) <= n else "[...]\n" + text[-n:]


# --- processes ---------------------------------------------------------------------------------------------

def _limit_output():
    resource.setrlimit(resource.RLIMIT_FSIZE, (OUTPUT_LIMIT, OUTPUT_LIMIT))


class Job:
    """A program through uroce-run on SOCKET, line-buffered, its output (stdout and stderr) in a file."""

    def __init__(self, t, socket, argv, name):
        self.path = os.path.join(t.work, f"{next(_jobs):03d}-{name}.out")
        with open(self.path, "w") as out:
            self.proc = subprocess.Popen([t.uroce_run, "--socket", socket, "stdbuf", "-oL", "-eL", *argv],
                                         stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         preexec_fn=_limit_output)

    def wait(self, timeout, stop=True):
        """Its exit status, or None if it had not ended within TIMEOUT seconds (then stopped, if STOP)."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            if stop:
                self.stop()
            return None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()  # by PID: uroce-run and stdbuf exec the program
            self.proc.wait()

    def output(self):
        with open(self.path, errors="replace") as f:
            f.seek(max(0, os.path.getsize(self.path) - 200_000))
            return f.read()

    def status(self, rc):
        if rc is None:
            return "did not end (stopped)"
        if rc == -signal.SIGXFSZ:
            return f"wrote more than {OUTPUT_LIMIT >> 20} MB of output (stopped)"
        return f"rc {rc}"


def run_pair(t, server_argv, client_argv, what):
    """The server in the background, then the client, run again while it is refused (the server does not
    listen yet: uroced's CM answers the REQ with a REJ, which librdmacm reports as ECONNREFUSED). Both must
    exit 0; returns their outputs."""
    server = Job(t, t.server_socket, server_argv, "server")
    client = None
    try:
        deadline = time.monotonic() + REFUSED_WAIT
        while True:
            client = Job(t, t.client_socket, client_argv, "client")
            rc = client.wait(TIMEOUT)
            if (rc != 0 and REFUSED in client.output() and server.proc.poll() is None and
                    time.monotonic() < deadline):
                time.sleep(0.2)
                continue
            break
        s_rc = server.wait(TIMEOUT if rc == 0 else 5)
    finally:
        server.stop()
        if client:
            client.stop()
    c_out, s_out = client.output(), server.output()
    assert rc == 0, f"{what}: client {client.status(rc)}:\n{tail(c_out)}\nserver:\n{tail(s_out, 1500)}"
    assert s_rc == 0, f"{what}: server {server.status(s_rc)}:\n{tail(s_out)}\nclient:\n{tail(c_out, 1500)}"
    return c_out, s_out


class Setup:
    """What the cases of one setup need."""

    def __init__(self, args, name, daemons, server_socket, client_socket, work):
        self.uroce_run, self.uroce, self.name = args.uroce_run, args.uroce, name
        self.hostile_peer = args.hostile_peer
        self.daemons, self.server_socket, self.client_socket, self.work = daemons, server_socket, client_socket, work
        self.server_ip, self.server_ip6 = SERVER_ADDRESSES[name]
        # veth: the server's daemon's namespace and interface, from its command line (ip netns exec NS uroced
        # ... --port net_af_packet0,iface=IF ...)
        argv = daemons[0].proc.args
        self.server_link = (argv[3], argv[argv.index("--port") + 1].split("iface=")[1]) if argv[0] == "ip" else None

    def counters(self):
        """RoCE frames the server's daemon has received, ACK timeouts and resent packets of the client's
        (None without the uroce tool)."""
        if not self.uroce:
            return None
        server, client = (stats(self.uroce, s)["device"] for s in (self.server_socket, self.client_socket))
        return {"rx_frames": server["rx_frames"], "timeouts": client["timeouts"],
                "tx_retransmitted": client["tx_retransmitted"]}


# --- the cases ---------------------------------------------------------------------------------------------

def stream(t, program, options, size=None, count=None, ipv6=False, rows=None):
    """PROGRAM (rstream or riostream) with OPTIONS on both sides, -S SIZE -C COUNT if given (else ROWS, the
    table it prints by itself); over IPv6 the server binds to its address (its default, 0.0.0.0, is IPv4's)."""
    p = port()
    server_ip = t.server_ip6 if ipv6 else t.server_ip
    sizes = ["-S", str(size), "-C", str(count)] if size else []
    bind = ["-b", server_ip] if ipv6 else []
    what = " ".join([program, *options, *sizes])
    c_out, s_out = run_pair(t, [program, "-p", p, *bind, *options, *sizes],
                            [program, "-s", server_ip, "-p", p, *options, *sizes], what)
    expected = rows if rows is not None else custom_rows(size, count)
    rates = []
    for who, out in (("client", c_out), ("server", s_out)):
        assert "verification failed" not in out, f"{what}: {who}:\n{tail(out)}"
        rates += check_table(out, expected, f"{what}: {who}")
    if len(expected) == 1:
        name, size, count, iters = expected[0]
        return (f"{size_str(size)} x {cnt_str(count)} each way, "
                f"{size_str(iters * count * size * 2)} in all: {rates[0]:.2f} Gb/s")
    return f"{len(expected)} rows each side, {min(rates):.2f} to {max(rates):.2f} Gb/s"


def rcopy(t):
    size = (3 << 20) + 17
    src = os.path.join(t.work, "rcopy-source.bin")
    dst = os.path.join(t.work, f"rcopy-written-{t.name}.bin")
    with open(src, "wb") as f:
        f.write(os.urandom(size))
    p = port()
    server = Job(t, t.server_socket, ["rcopy", "-p", p], "rcopy-server")  # serves until stopped
    client = None
    try:
        deadline = time.monotonic() + REFUSED_WAIT
        while True:
            client = Job(t, t.client_socket, ["rcopy", src, f"{t.server_ip}:{dst}", "-p", p], "rcopy-client")
            rc = client.wait(TIMEOUT)
            if rc != 0 and REFUSED in client.output() and time.monotonic() < deadline:
                time.sleep(0.2)
                continue
            break
        out = client.output()
        assert rc == 0, f"rcopy client {client.status(rc)}:\n{tail(out)}\nserver:\n{tail(server.output(), 1500)}"
        m = re.search(r"^(\d+) bytes in ([\d.]+) seconds = ([\d.]+) Gb/sec", out, re.M)
        assert m and int(m.group(1)) == size, f"rcopy: no '{size} bytes in' line:\n{tail(out)}"
        assert "closing...done" in out, f"rcopy client:\n{tail(out)}"
        # The server answered the CLOSE after it had received every byte into the mapped file.
        deadline = time.monotonic() + 10
        while "closing...done" not in server.output() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert server.proc.poll() is None, f"rcopy server {server.status(server.proc.returncode)}:\n{server.output()}"
        assert f"{dst}, transferring...{size} bytes...closing...done" in server.output(), tail(server.output())
    finally:
        server.stop()
        if client:
            client.stop()
    digests = []
    for path in (src, dst):
        with open(path, "rb") as f:
            digests.append(hashlib.sha256(f.read()).hexdigest())
    assert digests[0] == digests[1], f"rcopy: the written file differs (sha256 {digests[1]} != {digests[0]}, " \
                                     f"{os.path.getsize(dst)} bytes)"
    return f"{size} bytes, sha256 {digests[0][:16]}... equal, {float(m.group(3)):.2f} Gb/s"


def nobody_listens(t, options):
    start = time.monotonic()
    job = Job(t, t.client_socket, ["rstream", "-s", t.server_ip, "-p", port(), *options, "-S", "4096", "-C", "10"],
              "refused")
    rc = job.wait(30)
    elapsed = time.monotonic() - start
    out = job.output()
    assert rc is not None and rc != 0, f"rstream to nobody: {job.status(rc)}:\n{tail(out)}"
    assert REFUSED in out, f"rstream to nobody: no '{REFUSED}':\n{tail(out)}"
    assert elapsed < 10, f"refused only after {elapsed:.1f} s"
    line = next(line for line in out.splitlines() if REFUSED in line)
    return f"'{line.strip()}', rc {rc}, after {elapsed:.1f} s"


def transfer_broken(t, what, keepalive, break_it, mend=lambda: None, bound=KILL_BOUND):
    """A long blocking rstream transfer, the client sending (64 GB each way: far longer than this runs), -k 1
    if KEEPALIVE; then BREAK_IT(server job) ends the server's side. The client must fail within BOUND s with
    an rsend/rrecv/rpoll error; the daemons stay up and, after MEND(), serve the next rstream."""
    p = port()
    options = ["-T", "b", *(["-k", "1"] if keepalive else []), "-S", "65536", "-C", "1000000"]
    server = Job(t, t.server_socket, ["rstream", "-p", p, *options], "broken-server")
    client = None
    try:
        deadline = time.monotonic() + REFUSED_WAIT
        while True:
            client = Job(t, t.client_socket, ["rstream", "-s", t.server_ip, "-p", p, *options], "broken-client")
            rc = client.wait(2, stop=False)
            if rc is None:  # still running after 2 s: connected, sending
                break
            assert REFUSED in client.output() and time.monotonic() < deadline, \
                f"client ended before {what} ({client.status(rc)}):\n{tail(client.output())}\n" \
                f"server:\n{tail(server.output(), 1500)}"
            time.sleep(0.2)
        before = t.counters()
        time.sleep(1)
        during = t.counters()
        if before:
            assert during["rx_frames"] > before["rx_frames"] + 100, f"no transfer under way: {before} -> {during}"
        assert server.proc.poll() is None, f"server {server.status(server.proc.returncode)}:\n{server.output()}"
        break_it(server)
        broken = time.monotonic()
        rc = client.wait(bound)
        elapsed = time.monotonic() - broken
        out = client.output()
        assert rc is not None, f"the client still ran {bound} s after {what}:\n{tail(out)}"
        assert rc != 0, f"the client exited 0 after {what}:\n{tail(out)}"
        assert not keepalive or "Keepalive: ON" in out, f"rstream -k 1 did not turn keepalive on:\n{tail(out)}"
        errors = re.findall(r"^(?:rsend|rrecv|rpoll)[^\n]*$", out, re.M)
        assert errors, f"the client (rc {rc}) printed no rsend/rrecv/rpoll error:\n{tail(out)}"
        after = t.counters()
    finally:
        mend()
        server.stop()
        if client:
            client.stop()
    dead = [d for d in t.daemons if not d.alive()]
    assert not dead, "a uroced died:\n" + "\n".join(tail(d.read_log()) for d in dead)
    moved = f"{during['rx_frames'] - before['rx_frames']} frames/s before; " if before else ""
    retries = (f"client's daemon since: {after['timeouts'] - during['timeouts']} ACK timeouts, "
               f"{after['tx_retransmitted'] - during['tx_retransmitted']} packets resent; " if after else "")
    following = stream(t, "rstream", ["-T", "b"], 4096, 200)
    return f"{moved}client '{errors[0]}', rc {rc}, {elapsed:.1f} s after {what}; {retries}next rstream: {following}"


def server_killed(t):
    """The server SIGKILLed by PID: its daemon sends a DREQ for its connection, as Linux's CM does for a
    process that dies, and uroce's rsocket takes the DISCONNECTED that follows at once (docs/daemon.md,
    rsockets; librdmacm would learn of it only from a failed send): the client fails within DREQ_BOUND s,
    far sooner than its retries would run out. No keepalive."""
    def kill(server):
        server.proc.send_signal(signal.SIGKILL)
        server.proc.wait()
    return transfer_broken(t, "the kill", False, kill, bound=DREQ_BOUND)


def link_cut(t):
    """The server's end of the veth set down: nothing reaches either side any more and no DREQ can come, so
    the client learns of it only from a send that runs out of retries: its data, or (-k 1) the keepalive
    write that a client waiting for credits has in flight too. The link is set up again afterwards."""
    ns, iface = t.server_link

    def link(state):
        subprocess.run(["ip", "-n", ns, "link", "set", iface, state], check=True, capture_output=True)
    return transfer_broken(t, "the link cut", True, lambda _server: link("down"), mend=lambda: link("up"))


def udpong(t, echo, ipv6=False, blocking=False):
    """SOCK_DGRAM rsockets. The server (it serves until stopped) binds to the daemon's address: udpong's
    default is the kernel's loopback address. The client retries its login every second until answered.
    The first datagram to the server finds its QPN by SIDR through the daemons (verbs_shim/rsocket/datagram.cpp);
    the server answers the address its datagrams carry."""
    p = port()
    count, size = 100, 1024
    ip = t.server_ip6 if ipv6 else t.server_ip
    mode = ["-T", "b"] if blocking else []
    server = Job(t, t.server_socket, ["udpong", "-b", ip, "-p", p, *mode], "udpong-server")
    try:
        client = Job(t, t.client_socket, ["udpong", "-s", ip, "-p", p, "-C", str(count), "-S", str(size), *mode,
                                          *(["-T", "e"] if echo else [])], "udpong-client")
        rc = client.wait(TIMEOUT)
        out = client.output()
        assert server.proc.poll() is None, f"udpong server {server.status(server.proc.returncode)}:\n{server.output()}"
    finally:
        server.stop()
    assert rc == 0, f"udpong client {client.status(rc)}:\n{tail(out)}"
    rows = DGRAM_ROW.findall(out)
    assert len(rows) == 1 and rows[0][:2] == ("custom", size_str(size)), f"udpong: no result row:\n{tail(out)}"
    assert "client login from" in server.output(), tail(server.output())
    if echo:  # every datagram answered: both ways counted
        assert rows[0][2:4] == (cnt_str(2 * count), size_str(2 * count * size)), f"udpong -T e: {rows[0]}:\n{out}"
    else:  # the server says how many it received; over UD some may be dropped, but not all
        assert rows[0][2] != "0", f"udpong: the server received nothing: {rows[0]}"
    return f"{rows[0][2]} datagrams of {rows[0][1]} counted, {rows[0][5]} Gb/s"


def datagram_check(t, program, ip):
    """tests/verbs_shim/rsocket_peer/datagram_check.c: three datagram rsockets of one process through the
    server's daemon, each call checked against UDP's semantics (addresses, ports, boundaries, MSG_PEEK and
    MSG_TRUNC, EMSGSIZE, a port nobody is bound to, a nonblocking first contact, 2000 datagrams in a row)."""
    job = Job(t, t.server_socket, [program, ip], "datagram-check")
    rc = job.wait(TIMEOUT)
    out = job.output()
    assert rc == 0, f"datagram_check {job.status(rc)}:\n{tail(out)}"
    checks = out.count("ok: ")
    assert "datagram checks passed" in out and checks >= 30, f"datagram_check: {checks} checks:\n{tail(out)}"
    at_once = re.search(r"ok: rsendto an address on no host: sent at once \(([0-9.]+ s)\)", out)
    error = re.search(r"ok: and SO_ERROR says so later: (.*)", out)
    return (f"{checks} checks passed; nonblocking, to an address on no host: returned in {at_once.group(1)}, "
            f"to a port nobody is bound to: SO_ERROR '{error.group(1).strip()}'")


# --- a peer that breaks the protocol (tests/verbs_shim/rsocket_peer/hostile_peer.c) ------------------------

HOSTILE_BOUND = 15  # how long a victim may take to give up on a hostile peer
ENOTSUP_TEXT, EPROTO_TEXT = "Operation not supported", "Protocol error"


def after_hostile(t, what):
    """The daemons are up and serve the next (well-behaved) rstream."""
    dead = [d for d in t.daemons if not d.alive()]
    assert not dead, f"a uroced died after {what}:\n" + "\n".join(tail(d.read_log()) for d in dead)
    return stream(t, "rstream", ["-T", "b"], 4096, 200)


def hostile_server(t, mode, call, error):
    """hostile_peer MODE serves; an rstream -T b client connects to it and must end within HOSTILE_BOUND s
    with a non-zero status and '<CALL>: <ERROR>' (perror's line for the call that failed), not crash or hang.
    The peer must have carried out its misbehaviour and then seen the client's connection end."""
    p = port()
    peer = Job(t, t.server_socket, [t.hostile_peer, mode, t.server_ip, p], f"hostile-{mode}")
    client = None
    try:
        deadline = time.monotonic() + REFUSED_WAIT
        while True:
            start = time.monotonic()
            client = Job(t, t.client_socket, ["rstream", "-s", t.server_ip, "-p", p, "-T", "b", "-S", "16",
                                              "-C", "100"], f"victim-of-{mode}")
            rc = client.wait(HOSTILE_BOUND)
            elapsed = time.monotonic() - start
            out = client.output()
            if rc != 0 and REFUSED in out and peer.proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
                continue
            break
        peer_rc = peer.wait(HOSTILE_BOUND)
    finally:
        peer.stop()
        if client:
            client.stop()
    peer_out = peer.output()
    context = f"\nrstream:\n{tail(out, 1500)}\nhostile peer:\n{tail(peer_out, 1500)}"
    assert rc is not None, f"{mode}: rstream still ran {HOSTILE_BOUND} s after connecting{context}"
    assert rc != 0, f"{mode}: rstream exited 0{context}"
    assert rc > 0, f"{mode}: rstream died of signal {-rc}{context}"
    expected = f"{call}: {error}"
    assert expected in out, f"{mode}: no '{expected}' from rstream ({client.status(rc)}){context}"
    assert peer_rc == 0 and "victim disconnected" in peer_out, \
        f"{mode}: the hostile peer did not see it through ({peer.status(peer_rc)}){context}"
    did = [line for line in peer_out.splitlines() if line.startswith(("sent", "posted"))]
    return (f"{'; '.join(did) + ': ' if did else ''}rstream '{expected}', rc {rc}, after {elapsed:.1f} s; "
            f"next rstream: {after_hostile(t, mode)}")


def hostile_client(t):
    """An rstream -T b server; hostile_peer connects with a ConnData of version 2. librdmacm's raccept
    rejects such a request and fails with ENOTSUP, and rstream exits with that error: so must uroce's."""
    p = port()
    server = Job(t, t.server_socket, ["rstream", "-p", p, "-T", "b", "-S", "16", "-C", "100"], "victim-server")
    peer = None
    try:
        deadline = time.monotonic() + REFUSED_WAIT
        while True:  # until the server listens (before that, uroced's CM rejects the request itself)
            peer = Job(t, t.client_socket, [t.hostile_peer, "bad-request", t.server_ip, p], "hostile-client")
            peer_rc = peer.wait(HOSTILE_BOUND)
            # stop=False: a server still running here has not listened yet, and must live on for the next try
            rc = server.wait(1 if peer_rc == 0 else 0.1, stop=False)
            if rc is None and peer_rc == 0 and time.monotonic() < deadline:
                time.sleep(0.2)
                continue
            break
        if rc is None:
            rc = server.wait(HOSTILE_BOUND)
    finally:
        server.stop()
        if peer:
            peer.stop()
    out, peer_out = server.output(), peer.output()
    context = f"\nrstream server:\n{tail(out, 1500)}\nhostile peer:\n{tail(peer_out, 1500)}"
    assert peer_rc == 0 and "rejected" in peer_out, f"bad request not rejected ({peer.status(peer_rc)}){context}"
    assert rc is not None and rc > 0, f"rstream server {server.status(rc)} after the bad request{context}"
    expected = f"raccept: {ENOTSUP_TEXT}"
    assert expected in out, f"no '{expected}' from the rstream server{context}"
    return f"request rejected; rstream server '{expected}', rc {rc}; next rstream: {after_hostile(t, 'bad-request')}"


# RPOLL_HUP: rstream's client ends receiving, and its server shuts down as soon as it has posted its last
# transfer; rstream's do_poll takes POLLHUP for an error. librdmacm's rpoll reports POLLHUP as soon as the
# peer's disconnect message is in, even while received data still waits to be read (rs_poll_rs), so there a
# client running -T a that is behind at the end fails with POLLHUP (exit status 16) after its server passed
# (10 runs in 10 of -S 4096 -C 1000 on the loopback with an rpoll that did so). uroce's rpoll reports POLLHUP only
# once that data has been read, as poll(2) does for a TCP socket whose peer sent FIN (docs/daemon.md,
# rsockets): these cases check that.
def cases(t, args):
    s = lambda *a, **k: lambda: stream(t, *a, **k)  # noqa: E731
    c = [
        ("rstream -T b", s("rstream", ["-T", "b"], 4096, 10000)),
        ("rstream (nonblocking), 1 MiB transfers", s("rstream", [], 1 << 20, 50)),
        ("rstream -T a (rpoll)", s("rstream", ["-T", "a"], 4096, 10000)),  # see RPOLL_HUP
        ("rstream -T a -T b (blocking rpoll)", s("rstream", ["-T", "a", "-T", "b"], 65536, 1000)),
        ("rstream -T v, 100000 B", s("rstream", ["-T", "v"], 100000, 1000)),
        ("rstream -T v -T b, 10 B (inline)", s("rstream", ["-T", "v", "-T", "b"], 10, 20000)),
        ("rstream -T v -T b over IPv6", s("rstream", ["-T", "v", "-T", "b"], 4096, 5000, ipv6=True)),
        ("riostream", s("riostream", [], 65536, 1000)),
        ("riostream -T a (rpoll)", s("riostream", ["-T", "a"], 4096, 10000)),
        ("riostream -T v -T b", s("riostream", ["-T", "v", "-T", "b"], 100000, 500)),
        ("rcopy 3 MiB + 17 B", lambda: rcopy(t)),
        ("rstream -T b, nobody listening", lambda: nobody_listens(t, ["-T", "b"])),
        ("rstream (nonblocking), nobody listening", lambda: nobody_listens(t, [])),
        ("rstream, server killed mid-transfer", lambda: server_killed(t)),
    ]
    if t.name == "veth":
        c.append(("rstream -k 1, link cut mid-transfer", lambda: link_cut(t)))
    if t.hostile_peer:
        h = lambda *a: lambda: hostile_server(t, *a)  # noqa: E731
        c += [
            ("hostile server: no rsocket data in its REP", h("no-conn-data", "rconnect", ENOTSUP_TEXT)),
            ("hostile server: ConnData of version 2", h("bad-version", "rconnect", ENOTSUP_TEXT)),
            ("hostile server: a data message longer than half the ring", h("oversized", "rrecv", EPROTO_TEXT)),
            ("hostile server: more data messages than receives granted", h("flood", "rsend", EPROTO_TEXT)),
            ("hostile client: ConnData of version 2", lambda: hostile_client(t)),
        ]
    if args.dgram:
        c += [("udpong -T e", lambda: udpong(t, True)), ("udpong", lambda: udpong(t, False)),
              ("udpong -T e -T b over IPv6", lambda: udpong(t, True, ipv6=True, blocking=True))]
    if args.datagram_check:
        c += [("datagram rsockets call by call", lambda: datagram_check(t, args.datagram_check, t.server_ip)),
              ("datagram rsockets call by call, IPv6", lambda: datagram_check(t, args.datagram_check, t.server_ip6))]
    if t.name == "loopback":
        c.append(("rstream's own size table", s("rstream", [], rows=default_rows(0))))
        if args.long:
            c.append(("rstream -S all", s("rstream", ["-S", "all"], rows=default_rows(1))))
    return c


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--uroced", required=True)
    ap.add_argument("--uroce-run", required=True)
    ap.add_argument("--uroce", help="the uroce tool, for the daemons' counters (default: in uroced's build)")
    ap.add_argument("--setup", action="append", choices=["loopback", "veth"])
    ap.add_argument("--dgram", action="store_true", help="also udpong (SOCK_DGRAM rsockets)")
    ap.add_argument("--datagram-check", help="tests/verbs_shim/rsocket_peer/datagram_check.c, built (its cases "
                    "are skipped without it)")
    ap.add_argument("--long", action="store_true", help="also rstream -S all, on the loopback")
    ap.add_argument("--hostile-peer", help="tests/verbs_shim/rsocket_peer/hostile_peer.c, built (its cases are "
                    "skipped without it)")
    ap.add_argument("--case", action="append", help="only the cases whose names contain this")
    a = ap.parse_args()
    if not a.uroce:
        guess = os.path.join(os.path.dirname(os.path.abspath(a.uroced)), "..", "pcap_tools", "uroce")
        a.uroce = guess if os.path.exists(guess) else None
    needed = ["rstream", "riostream", "rcopy", "stdbuf"] + (["udpong"] if a.dgram else [])
    missing = [p for p in needed if shutil.which(p) is None]
    if missing:
        print("SKIP: not installed: " + " ".join(missing))
        return 0
    passed = 0
    failures = []  # named again at the end: CI shows a long run's head and tail only
    for name in a.setup or ["loopback", "veth"]:
        if name == "veth" and not is_root():
            print("SKIP veth: needs root for network namespaces")
            continue
        with tempfile.TemporaryDirectory(prefix="uroce-rsocket-") as work:
            try:
                if name == "loopback":
                    v4, v6 = SERVER_ADDRESSES[name]
                    setup = SETUPS["loopback"](a.uroced, work, ["--ip", v4, "--ip", v6])
                else:
                    setup = SETUPS["veth"](a.uroced, work, ipv6=True)
                with setup as (daemons, server_socket, client_socket):
                    t = Setup(a, name, daemons, server_socket, client_socket, work)
                    for what, case in cases(t, a):
                        if a.case and not any(c in what for c in a.case):
                            continue
                        start = time.monotonic()
                        try:
                            result = case()
                            passed += 1
                            print(f"PASS {name}: {what}: {result} ({time.monotonic() - start:.1f} s)", flush=True)
                        except Exception as e:  # noqa: BLE001 - every case reports, the run goes on
                            first = str(e).splitlines()[0][:300] if str(e) else type(e).__name__
                            failures.append(f"{name}: {what}: {first}")
                            print(f"FAIL {name}: {what} ({time.monotonic() - start:.1f} s): {e}", flush=True)
                        dead = [d for d in daemons if not d.alive()]
                        if dead:
                            failures.append(f"{name}: a uroced died")
                            print(f"FAIL {name}: a uroced died:\n" + "\n".join(tail(d.read_log()) for d in dead))
                            break
            except RuntimeError as e:  # a daemon did not start
                failures.append(f"{name}: {e}")
                print(f"FAIL {name}: {e}", flush=True)
    print(f"rsocket tests: {passed} passed, {len(failures)} failed")
    for failure in failures:
        print(f"  failed: {failure}")
    return 1 if failures or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
