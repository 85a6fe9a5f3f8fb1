"""The programs of the interop matrix: for each, the server's and the client's command line on a given
side (uroce through uroce-run, or rxe in the VM: device and GID index differ), how long it may take, and
how to read its throughput from the output. Unmodified Debian binaries, plus pyverbs_peer.py."""
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))

PINGPONG = re.compile(r"(\d+) bytes in ([\d.]+) seconds = ([\d.]+) Mbit/sec")
PERF_BW = re.compile(r"^\s*(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$", re.M)
QPERF = re.compile(r"^\s*(bw|latency)\s+=\s+([\d.]+ \S+)", re.M)
PYVERBS = re.compile(r"^pyverbs_peer: all (\d+) checks passed", re.M)
RPING = re.compile(r"^ping data: ", re.M)
# rstream's and riostream's result line with -S/-C: name bytes xfers iters total time Gb/sec usec/xfer
RSOCKET = re.compile(r"^custom\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+([\d.]+)s\s+([\d.]+)\s+([\d.]+)\s*$", re.M)
RSOCKETS = ("rstream", "riostream")  # the rows of librdmacm's rsocket programs
# ucx_perftest's last line: iterations, then typical/average/overall latency (us), average/overall
# bandwidth (MB/s) and average/overall message rate (msg/s); taken: iterations, typical latency, overall
# bandwidth and rate (an average can read "inf").
UCX_FINAL = re.compile(r"^Final:\s+(\d+)\s+([\d.]+)\s+\S+\s+\S+\s+\S+\s+([\d.]+)\s+\S+\s+(\d+)\s*$", re.M)
# UCX's bulk rows run clean only. UCX gives its RC QPs a 1 s ACK timeout (UCX_RC_TIMEOUT), so over 5% loss
# a 64 KiB message took seconds (0.03-0.17 MB/s, both ways), and 1 MiB tag_bw passed 240 s against rxe
# under TCG (rxe <-> rxe too); tag_lat shows UCX's recovery over loss.
UCX_BULK = ("ucx_perftest tag_bw", "ucx_perftest ucp_put_bw", "ucx_perftest ucp_get")
UCP_SOCKADDR = "ucp sockaddr (rdmacm)"  # UCP connected by the server's IP address: ucp_sockaddr()
FI_DGRAM = "fi_pingpong verbs dgram"  # UD: no retransmission, so no lossy cell
# fi_pingpong's result line per size: bytes, #sent, =#ack, total, time, MB/sec, usec/xfer, Mxfers/sec.
FI_RESULT = re.compile(r"^(\d+[kmg]?)\s+(\d+[kmg]?)\s+=(\d+[kmg]?)\s+\S+\s+[\d.]+s\s+([\d.]+)\s+([\d.]+)\s+[\d.]+$",
                       re.M)
# libiscsi's programs over iSER (iSCSI over RDMA) against tgt's target daemon: the rows named ISER + ...
ISER = "iSER: "
# iscsi-perf's last line.
ISCSI_PERF_AVERAGE = re.compile(r"iops average (\d+) \((\d+) MB/s\)\s*$", re.M)


class Program:
    """name: the matrix row. server(side, port) / client(side, port, server_ip, server_side): argv lists."""

    def __init__(self, name, server, client, result, limit=240):
        self.name, self.server, self.client, self.result, self.limit = name, server, client, result, limit
        # The ibverbs-utils pingpongs have an exit race: the client leaves as soon as it has its last
        # completion, so if its ACK of the server's last message is lost, the server retransmits to a QP
        # that is gone and never completes (rxe retries for ever; uroce gives up with retry-exceeded).
        # perftest's latency tests have the same race: the client ends once it has its peer's last message.
        # rstream and riostream (rsockets) too: the client's rsocket closes once it has its peer's disconnect
        # message, and the server's rshutdown waits for that message's ACK.
        self.last_ack_race = (name.startswith("ibv_") and "pingpong" in name) or (
            name.startswith("ib_") and name.endswith("_lat")) or name.startswith(RSOCKETS)
        # rping's client destroys its rdma_cm ID right after rdma_disconnect, and Linux's CM then cancels the
        # DREQ's retransmission (cm_destroy_id in DREQ_SENT). A DREQ lost on the bridge leaves the server
        # waiting for a DISCONNECTED that never comes, whoever the server is.
        self.dreq_race = name.startswith("rping")
        # UD has no retransmission: one lost datagram stalls a pingpong (or udaddy, or mckey's receiver) for
        # good, so no lossy cell.
        # Nor for iSER: libiscsi's initiator ends its session when a second passes without a completion (its
        # event loop polls the completion channel for 1 s and takes a timeout for an error: "revents is not
        # POLLIN"), and a loss that waits out an ACK timeout takes longer. Over 5% loss its login failed so,
        # rxe <-> rxe too, and 64 KiB reads from rxe's target crawled through go-back-N for the cell's 240 s.
        self.lossy = "ud_pingpong" not in name and not name.startswith(
            ("udaddy", "mckey", FI_DGRAM, ISER) + UCX_BULK)
        # rping, udaddy, mckey and the rsocket programs talk only rdma_cm: no TCP socket says when the server
        # listens. The harness waits `cm_listen_wait` seconds instead and runs the client again (twice at
        # most) if it was refused (REJECTED: a REQ before rdma_listen; UNREACHABLE: a SIDR_REQ before it;
        # "Connection refused": an rsocket's rconnect got the REJ).
        # The UCP client says "FAIL: connect (the first message): Connection reset by remote peer" for the REJ.
        # fio's client, refused, says so but exits 0.
        self.cm_only = name.startswith(("rping", "udaddy", "mckey", "fio", UCP_SOCKADDR) + RSOCKETS)
        # libfabric's MSG endpoints (and ofi_rxm's over them) need the RoCE address on a kernel interface
        # (side.netdev), which uroced on the VM's PCI NIC has not: no PCI cell.
        self.needs_netdev = name.startswith(("fi_pingpong verbs msg", "fi_pingpong verbs;ofi_rxm"))
        # RoCEv2 over IPv6: every RoCE frame of the cell's capture must be IPv6.
        self.ipv6 = name.endswith("(IPv6)")
        # A qperf server, or tgtd, serves clients until it is stopped: its end says nothing.
        self.server_persists = name.startswith(("qperf", ISER))
        # qperf's server sends its rdma_cm port to the client before it calls rdma_listen (cm_open_server in
        # qperf's rdma.c), so a fast client's REQ can reach a slow server (rxe under TCG) before the listen:
        # rxe's CM then answers REJ "invalid service ID" (8). That is qperf's race, not the CM's. Against a
        # server in a VM, the harness delays the server's TCP messages (the port among them) by
        # server_tcp_delay_ms, which rdma_listen under TCG needs; a cell that still loses the race is run
        # again (twice at most) and marked.
        self.listen_race = name.startswith("qperf")
        self.server_tcp_delay_ms = 50 if self.listen_race else 0
        # Under loss, perftest's bandwidth tests send fewer 64 KiB messages (go-back-N over 5% loss with
        # 64-packet messages crawls under TCG).
        self.lossy_iterations = "20" if name.removesuffix(" (IPv6)") in ("ib_write_bw", "ib_read_bw", "ib_send_bw") else None
        # qperf runs each test for -t seconds with 64 KiB messages by default. Under 5% loss a 64-packet
        # message crawls through go-back-N (rxe ignores a NAK while a retry is under way, so a second loss
        # costs a whole ACK timeout) and 3 s can end before one completes: then qperf reports 0 bytes/sec,
        # for rxe <-> rxe too. Lossy cells send 4 KiB messages for 10 s.
        self.lossy_options = {"-t": "10", "-m": "4096"} if name.startswith("qperf") else {}
        # fi_pingpong over loss: one 4 KiB size, 20 round trips. Its RC QPs (rdma_cm's defaults) wait about a
        # second for an ACK, so the default sizes up to 1 MiB crawl under TCG (both ways and rxe <-> rxe:
        # 4 KiB x 50 took 25 s); ofi_rxd resends on timers of its own.
        self.options_before = "-t"
        if name.startswith("fi_pingpong"):
            self.lossy_options, self.options_before = {"-S": "4096", "-I": "20"}, "-c"
        # pyverbs_peer's remote access error check: under loss the responder's NAK can be lost, and RC never
        # repeats it (the responder's QP went to the error state and drops the resends), so the requester
        # ends with retry-exceeded instead. --lossy accepts that outcome; the clean cells still require the NAK.
        self.lossy_flags = ["--lossy"] if name == "pyverbs_peer.py" else []
        # fio over loss: 16 blocks, not 128. Nearly every 64 KiB message then loses a packet, and rxe as the
        # requester waits out an ACK timeout for each: 128 of them ran past the cell's 240 s under TCG.
        self.lossy_blocks = 16 if name.startswith("fio") else None

    def argv(self, argv, loss):
        """ARGV as run in a cell with LOSS percent loss."""
        if not loss:
            return argv
        argv = list(argv) + self.lossy_flags
        if self.lossy_iterations and "-n" in argv:
            argv[argv.index("-n") + 1] = self.lossy_iterations
        if self.lossy_blocks:
            bs = int(next(a for a in argv if a.startswith("--bs=")).removeprefix("--bs="))
            argv = [f"--size={self.lossy_blocks * bs}" if a.startswith("--size=") else a for a in argv]
        for option, value in self.lossy_options.items():
            if option in argv:
                argv[argv.index(option) + 1] = value
            elif self.options_before in argv:  # e.g. a qperf client: options go before the host and the tests
                at = argv.index(self.options_before)
                argv[at:at] = [option, value]
        return argv


def pingpong_result(out):
    m = PINGPONG.search(out)
    return f"{float(m.group(3)):.1f} Mbit/s" if m else None


def perftest_bw_result(out):
    m = PERF_BW.findall(out)
    return f"{float(m[-1][3]):.1f} MB/s" if m else None


def perftest_lat_result(out):
    # The results line: #bytes #iterations t_min t_max t_typical t_avg t_stdev 99% 99.9% (some may be -nan).
    rows = [l.split() for l in out.splitlines() if re.match(r"^\s*\d+\s+\d+\s+[\d.]+\s+[\d.]+\s+[\d.]+", l)]
    return f"{float(rows[-1][4]):.0f} us typ" if rows else None


def perftest_atomic_result(out):
    m = PERF_BW.findall(out)
    return f"{float(m[-1][4]) * 1000:.3g} k ops/s" if m else None


def qperf_result(out):
    # qperf prints "0 bytes/sec" or "0 ns" when a test moved nothing (a stalled connection ends at -t):
    # that is no result, and the cell fails.
    m = QPERF.findall(out)
    if not m or any(float(re.match(r"[\d.]+", v).group(0)) == 0 for _, v in m):
        return None
    return ", ".join(v for _, v in m)


def pyverbs_result(out):
    m = PYVERBS.search(out)
    return f"{m.group(1)} checks" if m else None


def rping_result(out):
    n = len(RPING.findall(out))
    return f"{n} pings verified" if n else None


def udaddy_result(out):
    return "SIDR resolved, 10 messages each way" if "test complete" in out else None


def rping(count, size, ipv6=False):
    # -V: the client checks each ping came back intact (the server READs it and WRITEs it back). With
    # ipv6, both ends use their IPv6 addresses: RoCEv2 over IPv6, whose ICRC masks the traffic class, flow
    # label and hop limit (checked against rxe here, and by uroce dissect on the capture).
    # rdma_cm only: the RoCE addresses (on a VLAN side its VLAN address, which the kernel does not have).
    def server(side, port):
        return ["rping", "-s", "-a", side.ip6 if ipv6 else side.roce_ip, "-p", str(port), "-C", str(count),
                "-S", str(size), "-V"]

    def client(side, port, _ip, server_side):
        ip = server_side.ip6 if ipv6 else server_side.roce_ip
        return ["rping", "-c", "-a", ip, "-p", str(port), "-C", str(count), "-S", str(size), "-V", "-v"]
    return server, client


def udaddy():
    # Port 7174 always (udaddy's -p is the port space); one cell at a time, so no clash.
    def server(side, port):
        return ["udaddy", "-c", "1", "-C", "10"]

    def client(side, port, _ip, server_side):
        return ["udaddy", "-s", server_side.roce_ip, "-c", "1", "-C", "10"]
    return server, client


def mckey_result(out):
    return "10 datagrams to 239.1.1.1" if "data transfers complete" in out and "joined dgid" in out else None


def mckey():
    # The server receives (it ends only once it has all 10 datagrams), the client sends; both join the group
    # with rdma_join_multicast and attach their QP. The client sends 3 s after its join, by then the
    # receiver is a member: its kernel (rxe) or its daemon (uroce) has joined the group on the bridge. Each
    # binds to its own RoCE address (uroce in a VM has one of its own, beside the VM kernel's).
    def server(side, port):
        return ["mckey", "-m", "239.1.1.1", "-b", side.roce_ip, "-C", "10"]

    def client(side, port, ip, _server_side):
        return ["mckey", "-m", "239.1.1.1", "-b", side.roce_ip, "-s", "-C", "10"]
    return server, client


def rsocket_result(out):
    """rstream's or riostream's result line; none if the receiver found a byte wrong (-T v)."""
    m = RSOCKET.search(out)
    if not m or "verification failed" in out:
        return None
    return f"{m.group(4)} moved, {float(m.group(6)):.2f} Gb/s"


def rsocket_stream(program, size, count):
    # rsockets over RC, both sides the program's default address (the server listens on 0.0.0.0). -T b:
    # blocking calls (waiting on the CQ's channel; the default busy loop would take a CPU from the TCG guest
    # or from uroced); -T v: the receiving side checks every byte of every transfer.
    options = ["-S", str(size), "-C", str(count), "-T", "b", "-T", "v"]

    def server(side, port):
        return [program, "-p", str(port), *options]

    def client(side, port, ip, _server_side):
        return [program, "-s", ip, "-p", str(port), *options]
    return server, client


def ucx_result(iterations, bandwidth=False):
    """The Final line must count every iteration, and data must have moved (a bandwidth or, at under one
    message a second, a message rate above zero); a latency test gives its typical latency, a bandwidth
    test its bandwidth."""
    def result(out):
        m = UCX_FINAL.search(out)
        if not m or m.group(1) != iterations or (float(m.group(3)) == 0 and int(m.group(4)) == 0):
            return None
        return f"{float(m.group(3)):.2f} MB/s" if bandwidth else f"{float(m.group(2)):.1f} us typ"
    return result


def ucx_perftest(test, *extra):
    # UCX 1.13 (Debian's ucx-utils) through UCP, its API under Open MPI's UCX PML, on the verbs transports
    # only: UCX's own QPs, address handles from the peer's packed address, zero-copy from its registered
    # memory, rendezvous by RDMA. Each side names its own device and GID by environment: ucx_perftest's
    # server takes the test's parameters from its client, a UCT device name (-d) among them, which would
    # name the other side's device. UCP connects over ud_verbs first; UCX 1.13 takes a datagram's IP
    # version from wc.sl, which ConnectX's provider and uroce set and rxe's leaves 0, so on rxe (rxe <-> rxe
    # too) it drops every datagram unless its destination GID check is off, as an rxe user of this UCX must
    # set. uroce's side keeps the check.
    def server(side, port):
        rxe = ["UCX_UD_VERBS_ETH_DGID_CHECK=n"] if side.device.startswith("rxe") else []
        return ["env", "UCX_TLS=rc_verbs,ud_verbs", f"UCX_NET_DEVICES={side.device}:1", f"UCX_IB_GID_INDEX={side.gid}",
                *rxe, "ucx_perftest", "-p", str(port), "-t", test, *extra]

    def client(side, port, ip, _server_side):
        return server(side, port) + [ip]
    return server, client


# Test programs of this project's build (matrix.py --build), reached by the guests through the host's root.
BUILD = {"dir": None}


def built(path):
    """PATH inside the build the matrix tests (e.g. "verbs_shim/ucp_sockaddr_check")."""
    assert BUILD["dir"], "matrix.py sets programs.BUILD['dir'] from --build"
    return os.path.join(BUILD["dir"], path)


def ucp_sockaddr_result(out):
    m = re.search(r"^ok: (\d+) messages of (\d+) bytes echoed; put, get and fetch-and-add", out, re.M)
    return f"{m.group(1)} x {m.group(2)} B echoed, put/get/fadd checked" if m else None


def ucp_sockaddr(size, count):
    # UCP's client/server connection by socket address (ucp_listener_create; ucp_ep_create with the server's
    # address), as UCX-Py, Dask and DAOS connect: UCX's rdmacm connection manager, on Linux the kernel's
    # rdma_cm, on uroce its librdmacm, with UCP's wire-up in the CM's private data. The program is ours
    # (tests/verbs_shim/ucx_sockaddr/ucp_sockaddr_check.c, against Debian's UCX 1.13): tagged messages echoed
    # and checked, then put, get and fetch-and-add on the endpoint the CM made. Only rdmacm may connect (no
    # fallback to UCX's TCP manager); rxe's side turns UCX's UD destination GID check off, as ucx_perftest's.
    def command(side, *tail):
        rxe = ["UCX_UD_VERBS_ETH_DGID_CHECK=n"] if side.device.startswith("rxe") else []
        return ["env", "UCX_SOCKADDR_TLS_PRIORITY=rdmacm", "UCX_TLS=rc_verbs,ud_verbs",
                f"UCX_NET_DEVICES={side.device}:1", f"UCX_IB_GID_INDEX={side.gid}", *rxe,
                built("verbs_shim/ucp_sockaddr_check"), *tail]

    def server(side, port):
        return command(side, "server", side.roce_ip, str(port), "1")

    def client(side, port, _ip, server_side):
        return command(side, "client", server_side.roce_ip, str(port), str(size), str(count))
    return server, client


def fi_unacknowledged(lines):
    """The first of fi_pingpong's result lines (FI_RESULT.findall) whose messages were not all acknowledged
    (each checked: -c), or that sent none, as a sentence; None if every line is good. The rate is not
    judged: fi_pingpong prints it with two decimals, and 50 round trips of 64 B under TCG, connection set-up
    included, print 0.00 MB/s (a CI run's rxe -> uroce ofi_rxm cell, every size acknowledged)."""
    for size, sent, acked, mb_per_s, _ in lines:
        if sent != acked or sent == "0":
            return f"{size} B: {sent} sent, {acked} acknowledged, {mb_per_s} MB/s"
    return None


def fi_result(out):
    """Every size fi_pingpong reports must be good (fi_unacknowledged); the result is the last (largest)
    size's."""
    lines = FI_RESULT.findall(out)
    if not lines or fi_unacknowledged(lines):
        return None
    size, _, _, mb, usec = lines[-1]
    return f"{size}: {float(mb):.3g} MB/s, {float(usec):.0f} us"


def fi_pingpong(provider, endpoint, *extra):
    # libfabric 1.17 (Debian's libfabric-bin) on its verbs provider. Its MSG endpoints (RC QPs connected by
    # rdma_cm) and ofi_rxm's reliable ones over them find a device through the kernel interface that holds
    # its address (FI_VERBS_IFACE: uroce's "vu" holds it too, netns.sh). Its datagram endpoints (UD) and
    # ofi_rxd's over them address a port's GID by index (FI_VERBS_GID_IDX: rxe's IPv4 GID is 1, uroce's 0).
    # ofi_rxm sizes its CQ for a universe of 256 peers: 2^18 entries, which rxe (at most 32767) refuses, so
    # fi_enable fails there with -22 (rxe <-> rxe too); rxe's side runs with a universe of 16. uroce's CQs
    # take 2^22 entries, as a ConnectX's do, and its side keeps the default.
    def command(side, *tail):
        env = [f"FI_VERBS_DEVICE_NAME={side.device}", f"FI_VERBS_GID_IDX={side.gid}"]
        if side.netdev:
            env.append(f"FI_VERBS_IFACE={side.netdev}")
        if "ofi_rxm" in provider and side.device.startswith("rxe"):
            env.append("FI_UNIVERSE_SIZE=16")
        return ["env", *env, "fi_pingpong", "-p", provider, "-e", endpoint, "-c", *extra, *tail]

    def server(side, port):
        return command(side, "-B", str(port))  # -B: the out-of-band TCP port to listen on

    def client(side, port, ip, _server_side):
        return command(side, "-P", str(port), ip)  # -P: the server's
    return server, client


def sl_option(side, flag):
    """The program's option naming the service level a side asks for (a VLAN side: its frames' priority)."""
    return [flag, side.sl] if getattr(side, "sl", None) else []


def pingpong(program, *extra, n="300", ipv6=False):
    # ipv6: both ends name their IPv6 GID (-g), so RoCE runs over IPv6; the programs still exchange their
    # QP numbers and GIDs over TCP to the IPv4 address.
    def server(side, port):
        sl = sl_option(side, "-l")
        return [program, "-d", side.device, "-g", side.gid6 if ipv6 else side.gid, "-p", str(port), "-n", n, *sl,
                *extra]

    def client(side, port, ip, _server_side):
        return server(side, port) + [ip]
    return server, client


def perftest(program, *extra, ipv6=False):
    # -u 16: a 268 ms ACK timeout instead of 67 ms. rxe under TCG on a busy machine can stall for half a
    # second while it works through a backlog; with 67 ms a spec-following requester (uroce: retry_cnt 7
    # means 7 retries, where rxe retries for ever) gives up after 8 timeouts in a row. Not much longer
    # either: an rxe requester ignores a NAK while its previous go-back-N retry is under way, so every
    # second loss within one message costs it a whole timeout.
    def server(side, port):
        sl = sl_option(side, "--sl")
        return [program, "-d", side.device, "-x", side.gid6 if ipv6 else side.gid, "-p", str(port), "-F", "-u", "16",
                *sl, *extra]

    def client(side, port, ip, _server_side):
        return server(side, port) + [ip]
    return server, client


def qperf(*tests):
    # qperf needs rdma_cm on RoCE (-cm1): it has no GID exchange of its own.
    def server(side, port):
        return ["qperf", "-lp", str(port)]

    def client(side, port, ip, server_side):  # the client names both devices; the server learns its own
        return ["qperf", "-lp", str(port), "-cm1", "-t", "3", "-li", f"{side.device}:1",
                "-ri", f"{server_side.device}:1", ip, *tests]
    return server, client


def pyverbs():
    def server(side, port):
        sl = sl_option(side, "--sl")
        return ["/usr/bin/python3", side.script("pyverbs_peer.py"), "--dev", side.device, "--gid", side.gid,
                "--port", str(port), *sl]

    def client(side, port, ip, _server_side):
        return server(side, port) + ["--connect", ip]
    return server, client


# fio's output, read the same way here and by tests/verbs_shim/program_matrix.py's fio family.
FIO_ISSUED = re.compile(r"issued rwts: total=(\d+),(\d+),")  # a job's reads, writes
FIO_ERR = re.compile(r"err=\s*(\d+)")
FIO_RATE = re.compile(r"(?:write|read): IOPS=([\w.]+), BW=([\w./]+)")


def fio_rdma_job(port, verb, role, rw, options):
    """A job of fio's rdma I/O engine: the rw=read job listens (on every address) and registers one buffer per
    I/O unit; the rw=write job (options add --hostname=SERVER) connects and moves --size bytes in blocks of
    --bs by `verb`: RDMA WRITE into the server's buffers, RDMA READ from them, or SEND into its receives."""
    return ["fio", "--thread", "--ioengine=rdma", f"--port={port}", f"--verb={verb}", f"--name={role}",
            f"--rw={rw}", *options]


def fio_result(out):
    """The client's job issued its blocks (fio counts them against --size; it reads none) and ended with
    err=0; a server's output has no such line."""
    m = FIO_ISSUED.search(out)
    if not m or m.group(1) != "0" or int(m.group(2)) == 0 or any(e != "0" for e in FIO_ERR.findall(out)):
        return None
    rate = FIO_RATE.search(out)
    return f"{m.group(2)} blocks, {rate.group(2) if rate else '?'} (with fio's 0.5 s pause)"


def fio_rdma(verb, bs, blocks):
    # A send's server posts 64 receives: fio connects with RNR retry 0, so one RNR NAK would end the run.
    def command(port, role, rw, depth):
        return fio_rdma_job(port, verb, role, rw, [f"--bs={bs}", f"--size={blocks * bs}", f"--iodepth={depth}"])

    def server(side, port):
        return command(port, "server", "read", 64 if verb == "send" else 4)

    def client(side, port, _ip, server_side):
        return [*command(port, "client", "write", 4), f"--hostname={server_side.roce_ip}"]
    return server, client


def iscsi_perf_result(out):
    m = ISCSI_PERF_AVERAGE.findall(out)
    return f"{m[-1][1]} MB/s, {m[-1][0]} IOPS" if "finished." in out and m else None


ISER_TARGET = "iqn.2026-12.dev.uroce:interop"
ISER_INITIATOR = "iqn.2026-12.dev.uroce:interop-initiator"  # the one name the target admits


def iscsi_perf(blocks, depth, seconds):
    # The server: tgtd with one target (iser_target.sh); the client: libiscsi's read benchmark at the
    # target's rdma_cm port on the server's RoCE address. Each iSCSI PDU is a SEND, and the target moves each
    # READ's data by RDMA WRITE into the initiator's buffer.
    # Not libiscsi's conformance suite (iscsi-test-cu), which tests/verbs_shim/iser_storage.py runs between
    # two uroce daemons: against rxe it crashes in libiscsi 1.19's connection-manager thread, rxe <-> rxe
    # too. Each suite logs in again, and the first login's thread outlives the connection it was freed with
    # (docs/daemon.md, "iSCSI over RDMA").
    def server(side, port):
        return [side.script("iser_target.sh"), str(port), ISER_TARGET, ISER_INITIATOR]

    def client(side, port, _ip, server_side):
        return ["iscsi-perf", "-i", ISER_INITIATOR, "-b", str(blocks), "-m", str(depth), "-t", str(seconds),
                f"iser://{server_side.roce_ip}:3260/{ISER_TARGET}/1"]  # iser_target.sh says why port 3260
    return server, client


def _p(name, pair, result, limit=240):
    return Program(name, pair[0], pair[1], result, limit)


PROGRAMS = {p.name: p for p in [
    _p("ibv_rc_pingpong", pingpong("ibv_rc_pingpong"), pingpong_result),
    _p("ibv_rc_pingpong -s 65536", pingpong("ibv_rc_pingpong", "-s", "65536", n="50"), pingpong_result),
    _p("ibv_rc_pingpong (IPv6)", pingpong("ibv_rc_pingpong", ipv6=True), pingpong_result),
    _p("ibv_ud_pingpong", pingpong("ibv_ud_pingpong", "-s", "1024"), pingpong_result),
    # UD over IPv6: the 40-byte GRH area of each receive buffer holds the whole IPv6 header (over IPv4, 20
    # zero bytes and the IPv4 header), and the reply's address handle is built from it.
    _p("ibv_ud_pingpong (IPv6)", pingpong("ibv_ud_pingpong", "-s", "1024", ipv6=True), pingpong_result),
    _p("ibv_srq_pingpong", pingpong("ibv_srq_pingpong", "-q", "4", n="100"), pingpong_result),
    _p("ib_write_bw", perftest("ib_write_bw", "-s", "65536", "-n", "100"), perftest_bw_result),
    _p("ib_read_bw", perftest("ib_read_bw", "-s", "65536", "-n", "100"), perftest_bw_result),
    _p("ib_send_bw", perftest("ib_send_bw", "-s", "65536", "-n", "100"), perftest_bw_result),
    _p("ib_write_bw (IPv6)", perftest("ib_write_bw", "-s", "65536", "-n", "100", ipv6=True), perftest_bw_result),
    _p("ib_atomic_bw CMP_AND_SWAP", perftest("ib_atomic_bw", "-A", "CMP_AND_SWAP", "-n", "200"), perftest_atomic_result),
    _p("ib_atomic_bw FETCH_AND_ADD", perftest("ib_atomic_bw", "-A", "FETCH_AND_ADD", "-n", "200"), perftest_atomic_result),
    _p("ib_write_lat", perftest("ib_write_lat", "-n", "200"), perftest_lat_result),
    _p("ib_read_lat", perftest("ib_read_lat", "-n", "200"), perftest_lat_result),
    _p("ib_send_lat", perftest("ib_send_lat", "-n", "200"), perftest_lat_result),
    _p("ib_atomic_lat", perftest("ib_atomic_lat", "-n", "200"), perftest_lat_result),
    _p("qperf rc_bw rc_lat", qperf("rc_bw", "rc_lat"), qperf_result),
    _p("qperf rc_rdma_write_bw rc_rdma_read_bw", qperf("rc_rdma_write_bw", "rc_rdma_read_bw"), qperf_result),
    _p("pyverbs_peer.py", pyverbs(), pyverbs_result),
    _p("rping -C 20 -S 4096 -V", rping(20, 4096), rping_result),
    _p("rping -C 20 -S 4096 -V (IPv6)", rping(20, 4096, ipv6=True), rping_result),
    _p("udaddy", udaddy(), udaddy_result),
    _p("mckey", mckey(), mckey_result),
    # Few iterations of the bulk tests: under 5% loss a 1 MiB message crawls through go-back-N (rxe under TCG).
    _p("ucx_perftest tag_lat", ucx_perftest("tag_lat", "-n", "1000"), ucx_result("1000")),
    _p("ucx_perftest tag_bw 1 MiB", ucx_perftest("tag_bw", "-s", "1048576", "-n", "20"), ucx_result("20", True)),
    _p("ucx_perftest ucp_put_bw 64 KiB", ucx_perftest("ucp_put_bw", "-s", "65536", "-n", "50"),
       ucx_result("50", True)),
    _p("ucx_perftest ucp_get 64 KiB", ucx_perftest("ucp_get", "-s", "65536", "-n", "50"), ucx_result("50", True)),
    _p(UCP_SOCKADDR, ucp_sockaddr(4096, 50), ucp_sockaddr_result),
    # fi_pingpong's default sizes (64 B to 1 MiB, a datagram's up to the path MTU) but through ofi_rxd,
    # whose 1 MiB messages took two minutes under TCG: 64 KiB there.
    _p("fi_pingpong verbs msg", fi_pingpong("verbs", "msg", "-I", "50"), fi_result),
    _p("fi_pingpong verbs;ofi_rxm rdm", fi_pingpong("verbs;ofi_rxm", "rdm", "-I", "50"), fi_result),
    _p(FI_DGRAM, fi_pingpong("verbs", "dgram", "-I", "50"), fi_result),
    _p("fi_pingpong verbs;ofi_rxd rdm", fi_pingpong("verbs;ofi_rxd", "rdm", "-S", "65536", "-I", "50"), fi_result),
    _p("rstream -S 4096 -C 100 -T b -T v", rsocket_stream("rstream", 4096, 100), rsocket_result),
    _p("riostream -S 4096 -C 100 -T b -T v", rsocket_stream("riostream", 4096, 100), rsocket_result),
    _p("fio rdma write 64 KiB", fio_rdma("write", 65536, 128), fio_result),
    _p("fio rdma read 64 KiB", fio_rdma("read", 65536, 128), fio_result),
    _p("fio rdma send 64 KiB", fio_rdma("send", 65536, 128), fio_result),
    _p(ISER + "iscsi-perf 64 KiB → tgtd", iscsi_perf(128, 16, 3), iscsi_perf_result),
]}
