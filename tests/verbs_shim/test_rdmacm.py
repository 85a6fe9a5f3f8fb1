#!/usr/bin/env python3
"""Unmodified rdma_cm programs (rdmacm-utils' rping, ucmatose, udaddy; perftest with -R) through uroce-run,
which puts uroce's librdmacm.so.1 and libibverbs.so.1 first. The connections are made by uroced's connection
manager: REQ/REP/RTU/DREQ/DREP MADs on QP1 over RoCEv2, as between two Linux hosts, and UD IDs are resolved
by SIDR_REQ/SIDR_REP.

Setups: (a) loopback: one uroced on its internal loopback port (192.0.2.1), server and client both through
it; (b) veth: two uroced in two network namespaces over a veth pair (root only), the server through
10.77.0.1, the client through 10.77.0.2 - the programs address each other by the daemons' IPs; (c) veth-vlan: the same with both ports
on 802.1Q VLAN 100 (uroced --vlan 100 --egress-qos-map "0:3 6:5"): ARP, the CM's MADs and the connections'
traffic all tagged; then rping, ib_write_bw -R --tos 16 and udaddy -t 16 on fresh daemons, whose captures
must show every RoCE frame at the priority the client's TOS maps to (priority_cases; udaddy's server
answers at the SL its completions report, udaddy_at).

Cases: rping with data verification (-V -C N), rping to a port nobody listens on (the client must see
RDMA_CM_EVENT_REJECTED, uroced's CM answers the REQ with a REJ), rping to an address nobody has
(RDMA_CM_EVENT_ADDR_ERROR -110 after rping's 2 s address timeout: ARP got no answer), librdmacm calls
no program makes (rdmacm_calls.py: rdma_migrate_id to synchronous and back, a source port in
rdma_resolve_addr, multicast errors), ucmatose, cmtime (100 connections at once, every step timed),
ib_write_bw -R / ib_send_lat -R, udaddy (UD), udaddy to nobody (RDMA_CM_EVENT_UNREACHABLE), ib_send_bw -c UD -R, rdma_server/rdma_client
(the synchronous API: rdma_create_ep, rdma_get_request).
Exits 0 only if every case passed; daemons are stopped by PID.

  test_rdmacm.py --uroced build/.../emulator/uroced --uroce-run build/.../verbs_shim/uroce-run [--setup S]
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from daemon_harness import SETUPS, Daemon, is_root, sh, veth_setup  # noqa: E402
import cm_psn_check  # noqa: E402
from server_client import PersistentServer, server_client  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "interop"))
import capture_check  # noqa: E402
from program_matrix import DAPL_PROVIDERS, DAPLTEST_FAILED, DAPLTEST_LIMIT  # noqa: E402  (as the dapl family)

RXE_RPING = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "captures", "10-rdma-cm-rping.pcap")

TIMEOUT = 60
_next_port = [30000 + os.getpid() % 20000]


def port():
    _next_port[0] += 1
    return str(_next_port[0])


def rping(uroce_run, server_socket, client_socket, server_ip, client_ip, count, size):
    p = port()
    # -V: the client checks every ping's data came back intact; the server echoes it (RDMA READ + WRITE).
    client_out, _ = server_client(
        uroce_run, server_socket, client_socket,
        ["rping", "-s", "-a", server_ip, "-p", p, "-C", str(count), "-S", str(size), "-V"],
        ["rping", "-c", "-a", server_ip, "-p", p, "-C", str(count), "-S", str(size), "-V", "-v"],
        f"rping -C {count} -S {size}", retry_on=("REJECTED",))
    lines = re.findall(r"ping data: ", client_out)
    assert len(lines) == count, f"rping: {len(lines)} of {count} pings printed:\n{client_out}"
    return f"{count} pings of {size} B verified"


def rping_nobody_listens(uroce_run, client_socket, server_ip):
    out = subprocess.run([uroce_run, "--socket", client_socket, "rping", "-c", "-a", server_ip, "-p", port(),
                          "-C", "1"], capture_output=True, text=True, timeout=TIMEOUT)
    text = out.stdout + out.stderr
    assert out.returncode != 0, f"rping to nobody succeeded?\n{text}"
    assert "RDMA_CM_EVENT_REJECTED" in text, f"rping to nobody: no REJECTED event:\n{text}"
    return "rejected (no listener)"


def rping_nobody_there(uroce_run, client_socket, absent_ip):
    """rdma_resolve_addr waits for the peer's MAC (ARP), as on Linux: an address nobody has gives
    ADDR_ERROR with -ETIMEDOUT once rping's 2 s timeout passes, not a REQ that times out after 100 s."""
    start = time.time()
    out = subprocess.run([uroce_run, "--socket", client_socket, "rping", "-c", "-a", absent_ip, "-p", port(),
                          "-C", "1"], capture_output=True, text=True, timeout=TIMEOUT)
    elapsed = time.time() - start
    text = out.stdout + out.stderr
    assert out.returncode != 0, f"rping to an absent host succeeded?\n{text}"
    assert "RDMA_CM_EVENT_ADDR_ERROR, error -110" in text, f"rping to an absent host: no ADDR_ERROR -110:\n{text}"
    assert 1.5 < elapsed < 10, f"ADDR_ERROR after {elapsed:.1f} s, not after rping's 2 s timeout"
    return f"ADDR_ERROR -110 after {elapsed:.1f} s"


def rdmacm_calls(uroce_run, socket, own_ip):
    """librdmacm calls no rdmacm-utils program makes (rdmacm_calls.py, through ctypes)."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rdmacm_calls.py")
    out = subprocess.run([uroce_run, "--socket", socket, sys.executable, script, own_ip], capture_output=True,
                         text=True, timeout=TIMEOUT)
    assert out.returncode == 0 and "ALL PASSED" in out.stdout, f"rdmacm_calls.py:\n{out.stdout}{out.stderr}"
    return f"{out.stdout.count('PASS ')} checks"


def ucmatose(uroce_run, server_socket, client_socket, server_ip):
    p = port()
    client_out, _ = server_client(uroce_run, server_socket, client_socket,
                                  ["ucmatose", "-p", p, "-c", "2", "-C", "10"],
                                  ["ucmatose", "-s", server_ip, "-p", p, "-c", "2", "-C", "10"],
                                  "ucmatose", retry_on=("REJECTED", "event: RDMA_CM_EVENT_REJECTED"))
    assert "test complete" in client_out, client_out
    return "2 connections, 10 messages each"


def cmtime(uroce_run, server_socket, client_socket, server_ip, workdir, connections=100):
    """rdma_cm's own benchmark: `connections` connections made at once, through every step (IDs, address
    and route resolution, QPs, connect, disconnect, destroy), each step timed. Its server serves for ever
    and is stopped by its process group; its client exits 0 even when every connection was rejected, so
    the client's output decides: a rejection (the server not listening yet) is retried for up to 10 s, any
    other error fails the case, and every step must have taken time, the disconnect included."""
    p = port()
    server = PersistentServer(uroce_run, server_socket, ["cmtime", "-b", server_ip, "-p", p, "-c", str(connections)],
                              os.path.join(workdir, f"cmtime-{p}.log"))
    try:
        deadline = time.time() + 10
        while True:
            client = subprocess.run([uroce_run, "--socket", client_socket, "cmtime", "-s", server_ip, "-p", p,
                                     "-c", str(connections)], capture_output=True, text=True, timeout=TIMEOUT)
            out = client.stdout + client.stderr
            if "RDMA_CM_EVENT_REJECTED" not in out or time.time() > deadline:
                break
            time.sleep(0.3)
        assert client.returncode == 0 and "error" not in out, f"cmtime client rc {client.returncode}:\n{out}"
        assert server.proc.poll() is None, f"the cmtime server exited with {server.proc.returncode}:\n" \
                                           f"{server.new_output()}"
    finally:
        server.stop()
    steps = dict(re.findall(r"^(\w[\w ]*?)\s*:\s+([\d.]+)\s", out, re.M))
    assert set(steps) == {"create id", "resolve addr", "resolve route", "create qp", "connect", "disconnect",
                          "destroy"}, out
    assert all(float(ms) > 0 for ms in steps.values()), out  # every step ran, disconnect included
    per_connect = float(steps["connect"]) * 1000 / connections
    return f"{connections} connections, connect {per_connect:.0f} us each on average"


def rdma_server_client(uroce_run, server_socket, client_socket, server_ip, bind="0.0.0.0"):
    """librdmacm's synchronous API: rdma_getaddrinfo, rdma_create_ep (which must give the QP the address's
    type: rdma_client leaves it zero), rdma_get_request, rdma_accept, one SEND each way."""
    p = port()
    client_out, server_out = server_client(uroce_run, server_socket, client_socket,
                                           ["rdma_server", "-s", bind, "-p", p],
                                           ["rdma_client", "-s", server_ip, "-p", p],
                                           "rdma_server/rdma_client", retry_on=("Connection refused",))
    assert "rdma_client: end 0" in client_out, client_out
    assert "rdma_server: end 0" in server_out, server_out
    return f"a synchronous endpoint each side, server bound to {bind}"


def rdma_xserver_client(uroce_run, server_socket, client_socket, server_ip, mode):
    """rdma_xserver/rdma_xclient. The client's QP is created with one SGE and no inline data, and its SEND
    goes inline (16 bytes), which works because a QP's inline room is at least its SGEs' (as rxe and mlx5
    size it). Mode x is XRC over rdma_cm (RDMA_PS_IB): the server's ID gets an XRC target QP and an XRC
    SRQ in the device's domain, the REQ asks for XRC, the REP names the target as its EE context, and the
    server's SRQ number (its private data) goes into the client's SEND."""
    p = port()
    client_out, server_out = server_client(uroce_run, server_socket, client_socket,
                                           ["rdma_xserver", "-p", p, "-c", mode],
                                           ["rdma_xclient", "-s", server_ip, "-p", p, "-c", mode],
                                           "rdma_xserver/rdma_xclient", retry_on=("Connection refused",))
    assert "rdma_xclient: end 0" in client_out, client_out
    assert "rdma_xserver: end 0" in server_out, server_out
    return "XRC: a target QP and an XRC SRQ on the server" if mode == "x" else "RC"


def xrc_on_the_wire(uroce, capture):
    """The loopback capture's XRC connection: a CM REQ for an XRC initiator, the REP naming the target, and
    the client's SEND as XRC SEND_ONLY with an XRCETH, acknowledged; `uroce check` finds no violation."""
    explained = subprocess.run([uroce, "explain", capture], capture_output=True, text=True, check=True).stdout
    for needed in ("asks to connect its XRC initiator QP", "accepts with its XRC target QP",
                   "XRC SEND of 16 bytes in 1 packet"):
        assert needed in explained, f"{needed!r} not in the capture:\n{explained[-3000:]}"
    rows = [json.loads(line) for line in subprocess.run(
        [uroce, "dissect", "--json", "--opcode", "XRC_SEND_ONLY", capture], capture_output=True, text=True,
        check=True).stdout.splitlines()]
    assert rows and all("xrceth" in r and r["icrc"]["ok"] for r in rows), rows
    subprocess.run([uroce, "check", capture], capture_output=True, text=True, check=True)
    return f"{len(rows)} XRC SEND_ONLY with an XRCETH, ICRC ok, no violation"


def udaddy(uroce_run, server_socket, client_socket, server_ip, client_extra=()):
    """UD over rdma_cm: each client ID resolves the server's QPN and Q_Key by SIDR_REQ/SIDR_REP, sends its
    messages with an address handle made from the ESTABLISHED event; the server answers each through an
    address handle made from the work completion (ibv_create_ah_from_wc)."""
    # udaddy always uses port 7174 (its -p is the port space); each setup has daemons of its own.
    client_out, server_out = server_client(uroce_run, server_socket, client_socket,
                                           ["udaddy", "-c", "2", "-C", "10"],
                                           ["udaddy", "-s", server_ip, "-c", "2", "-C", "10", *client_extra],
                                           "udaddy", retry_on=("UNREACHABLE",))
    for out in (client_out, server_out):
        assert "test complete" in out, out
        assert "receiving data transfers" in out, out
    return "2 UD IDs resolved by SIDR, 10 messages each way"


def udaddy_nobody_listens(uroce_run, client_socket, server_ip):
    out = subprocess.run([uroce_run, "--socket", client_socket, "udaddy", "-s", server_ip, "-c", "1"],
                         capture_output=True, text=True, timeout=TIMEOUT)
    text = out.stdout + out.stderr
    assert out.returncode != 0 or "test complete" not in text, f"udaddy to nobody succeeded?\n{text}"
    # Linux reports the SIDR_REP status as the event status: 1, service ID not supported (uroced's CM answers).
    assert "RDMA_CM_EVENT_UNREACHABLE, error: 1" in text, f"udaddy to nobody: no UNREACHABLE (1) event:\n{text}"
    return "unreachable (SIDR_REP: service ID not supported)"


def perftest(uroce_run, server_socket, client_socket, server_ip, program, extra):
    p = port()
    common = [program, "-R", "-d", "uroce0", "-p", p, *extra]
    client_out, _ = server_client(uroce_run, server_socket, client_socket, common, [*common, server_ip],
                                  f"{program} -R", retry_on=("Couldn't", "Unable", "REJECTED", "Failed"))
    assert re.search(r"^\s*\d+\s+\d+", client_out, re.M), f"{program} -R printed no result:\n{client_out}"
    return "result line printed"


# uroced --vlan 100 with Linux's egress-qos-map syntax: priority 0 (TOS 0) to PCP 3, priority 6 (TOS 0x10) to 5.
EGRESS_QOS_MAP = ["--vlan", "100", "--egress-qos-map", "0:3 6:5"]


def roce_frames(pcap, with_source=False):
    """(PCP, IP TOS, BTH opcode) of each 802.1Q-tagged IPv4 RoCEv2 frame of a capture; with_source adds the
    source address (dotted) and the destination QP."""
    out = []
    for f in capture_check.pcap_records.frames(pcap):
        if f[12:14] != b"\x81\x00" or f[16:18] != b"\x08\x00" or len(f) < 18 + 20 + 8 + 12 or f[18 + 9] != 17:
            continue
        bth = 18 + (f[18] & 0x0F) * 4 + 8
        if int.from_bytes(f[bth - 6:bth - 4], "big") == 4791:
            frame = (f[14] >> 5, f[19], f[bth])
            if with_source:
                frame += (".".join(str(b) for b in f[18 + 12:18 + 16]), int.from_bytes(f[bth + 5:bth + 8], "big"))
            out.append(frame)
    return out


def all_at(pcp):
    def check(frames):
        assert frames and {p for p, _, _ in frames} == {pcp}, f"RoCE frames at {sorted({p for p, _, _ in frames})}"
    return check


def writes_at(pcp, tos, others):
    """perftest -R exchanges its parameters over an rdma_cm connection of its own made without the TOS (at
    the map's PCP for priority 0): only the RDMA WRITEs (opcodes 6-11) must carry the TOS and its PCP."""
    def check(frames):
        writes = [(p, t) for p, t, op in frames if 6 <= op <= 11]
        assert writes and set(writes) == {(pcp, tos)}, f"RDMA WRITEs at (PCP, TOS) {sorted(set(writes))}"
        assert {p for p, _, _ in frames} <= {pcp, others}, f"RoCE frames at {sorted({p for p, _, _ in frames})}"
    return check


def udaddy_at(pcp, server, reply_pcp):
    """udaddy's server answers each datagram through an address handle made from its completion
    (ibv_create_ah_from_wc). A RoCE completion's SL field holds the packet's type, as ConnectX's does (0xA:
    RoCE v2 over IPv4; UCX reads it), and rdma-core copies that field into the handle's SL: the answers go
    at priority 0xA & 7 = 2. Everything else, the CM's MADs both ways included, goes at the TOS's PCP."""
    def check(frames):
        answers = {p for p, _, _, source, qp in frames if source == server and qp != 1}
        others = {p for p, _, _, source, qp in frames if source != server or qp == 1}
        assert answers == {reply_pcp}, f"the server's datagrams at {sorted(answers)}"
        assert others == {pcp}, f"the other RoCE frames at {sorted(others)}"
    check.with_source = True
    return check


def priority_cases(uroce_run):
    """rdma_cm's SL on a VLAN, as Linux gives a ConnectX port on a VLAN device: the TOS makes a priority
    (rt_tos2priority), the egress QoS map a PCP, the SL of the path. Each case runs on fresh daemons, and the
    server's capture (both sides' frames) must show the connection's RoCE frames, the CM's MADs included, at
    the PCP the client's TOS maps to: the client's from its route, the server's from the SL in the REQ (RC).
    udaddy's server answers through ibv_create_ah_from_wc, at the SL a RoCE completion reports (udaddy_at)."""
    server_ip, client_ip = "10.77.0.1", "10.77.0.2"
    return [
        ("rping, no TOS: PCP 3", all_at(3),
         lambda s, c: rping(uroce_run, s, c, server_ip, client_ip, 5, 64)),
        ("ib_write_bw -R --tos 16: the WRITEs at PCP 5", writes_at(5, 0x12, 3),  # TOS 0x10, ECN-capable
         lambda s, c: perftest(uroce_run, s, c, server_ip, "ib_write_bw", ["-n", "200", "-s", "4096", "--tos", "16"])),
        ("udaddy -t 16: PCP 5, the server's answers at 2", udaddy_at(5, server_ip, 2),
         lambda s, c: udaddy(uroce_run, s, c, server_ip, client_extra=["-t", "16"])),
    ]


def run_priority_cases(uroced, uroce_run):
    failures = 0
    for what, check, case in priority_cases(uroce_run):
        with tempfile.TemporaryDirectory(prefix="uroce-rdmacm-prio-") as work:
            try:
                with veth_setup(uroced, work, EGRESS_QOS_MAP, capture=True) as (daemons, server_socket, client_socket):
                    result = case(server_socket, client_socket)
                # The daemons have stopped: the server's capture (both directions) is complete.
                pcap = os.path.join(work, "va.pcap")
                seen = capture_check.check_vlan(pcap, 100, {"10.77.0.1": "server", "10.77.0.2": "client"}, {})
                assert seen["error"] is None, seen["error"]
                frames = roce_frames(pcap, with_source=getattr(check, "with_source", False))
                check(frames)
                print(f"PASS veth-vlan priorities: {what}: {result}; {len(frames)} RoCE frames, priorities "
                      f"{seen['priorities']}", flush=True)
            except Exception as e:  # noqa: BLE001 - every case reports, the run goes on
                failures += 1
                print(f"FAIL veth-vlan priorities: {what}: {e}", flush=True)
    return failures


# rdma_cm's ephemeral ports come from net.ipv4.ip_local_port_range of the network namespace uroced runs in,
# read at each bind, as Linux's cma_alloc_any_port reads the namespace's range. A uroced of its own in a
# namespace of this process's (its loopback port needs no interface there):
#   - with the range 44000-44009, ten IDs bound to port 0 take exactly those ports and the eleventh fails
#     with EADDRNOTAVAIL (rdmacm_calls.py --ephemeral);
#   - the range changed while uroced runs is followed at the next bind;
#   - with a range of one port, a client connected to one rping server (and still pinging it) connects to a
#     second rping server on another port as well: rdma_resolve_addr binds after the destination is known,
#     and, as Linux's cma_port_is_unique, an ID takes a port others hold if its destination differs;
#   - DAPL's dapltest limit test (dapl2-utils, unmodified, on the cma provider) makes 500 RSPs and 500 PSPs
#     on its fixed service ports 43414-43913 while the range is 44000-60999. Each RSP's endpoint binds an
#     rdma_cm ID to port 0 first, so in the default range (32768-60999) one of those IDs can hold a
#     service port the test comes to later: DAT_CONN_QUAL_IN_USE. On Linux, whose rdma_cm starts each such
#     search at a random port, that is likely in every run; keeping fixed ports out of the range is the
#     administrator's way out there too.


def port_range_cases(uroced, uroce_run):
    ns = f"u{os.getpid()}pr"
    calls = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rdmacm_calls.py")
    failures = 0
    with tempfile.TemporaryDirectory(prefix="uroce-rdmacm-ports-") as work:
        daemon = None
        try:
            sh("ip", "netns", "add", ns)

            def set_range(low, high):
                sh("ip", "netns", "exec", ns, "sysctl", "-qw", f"net.ipv4.ip_local_port_range={low} {high}")

            def bind_ephemeral(count):
                out = subprocess.run([uroce_run, "--socket", daemon.socket, sys.executable, calls, "192.0.2.1",
                                      "--ephemeral", str(count)], capture_output=True, text=True, timeout=TIMEOUT)
                assert out.returncode == 0, f"rdmacm_calls.py failed:\n{out.stdout}{out.stderr}"
                return json.loads(out.stdout)

            def ten_ports():
                got = bind_ephemeral(11)
                assert sorted(got["ports"]) == list(range(44000, 44010)) and got["error"] == "EADDRNOTAVAIL", got
                return f"ports {min(got['ports'])}-{max(got['ports'])}, then {got['error']}"

            def changed_range():
                set_range(44100, 44100)
                got = bind_ephemeral(2)
                assert got == {"ports": [44100], "error": "EADDRNOTAVAIL"}, got
                return "44100 only, then EADDRNOTAVAIL"

            def shared_source_port():
                set_range(44200, 44200)
                first, second = port(), port()
                servers = [PersistentServer(uroce_run, daemon.socket, ["rping", "-s", "-a", "192.0.2.1", "-p", p,
                                                                        "-C", "1000000"],
                                            os.path.join(work, f"rping-server-{p}.log")) for p in (first, second)]
                holder, log = None, os.path.join(work, "rping-holder.log")
                try:
                    # The first client pings until it is stopped (a million pings): it holds port 44200 while
                    # the second connects. Retried while its server is not listening yet.
                    deadline = time.time() + 20
                    while True:
                        holder = PersistentServer(uroce_run, daemon.socket,
                                                  ["stdbuf", "-oL", "rping", "-c", "-a", "192.0.2.1", "-p", first,
                                                   "-C", "1000000", "-v"], log)
                        while holder.proc.poll() is None and "ping data" not in holder.new_output():
                            assert time.time() < deadline, "the first rping client never pinged"
                            time.sleep(0.05)
                        if holder.proc.poll() is None:
                            break
                        assert time.time() < deadline, f"the first rping client failed:\n{open(log).read()[-2000:]}"
                        time.sleep(0.3)
                    out = subprocess.run([uroce_run, "--socket", daemon.socket, "rping", "-c", "-a", "192.0.2.1",
                                          "-p", second, "-C", "10", "-V", "-v"],
                                         capture_output=True, text=True, timeout=TIMEOUT)
                    text = out.stdout + out.stderr
                    pings = text.count("ping data")
                    assert out.returncode == 0 and pings == 10, f"the second rping client ({pings} pings):\n{text}"
                    assert holder.proc.poll() is None, f"the first client stopped:\n{open(log).read()[-2000:]}"
                    return "a second connection from port 44200 while the first pings on"
                finally:
                    for p in [holder, *servers]:
                        if p:
                            p.stop()

            def dapltest_service_points():
                set_range(44000, 60999)
                conf = os.path.join(work, "dat.conf")
                library, device = DAPL_PROVIDERS["cma"]
                with open(conf, "w") as f:
                    f.write(f'ofa-v2-uroce-cma u2.0 nonthreadsafe default {library} dapl.2.0 '
                            f'"{device.format(address="192.0.2.1")}" ""\n')
                out = subprocess.run([uroce_run, "--socket", daemon.socket, "env", f"DAT_OVERRIDE={conf}", "dapltest",
                                      "-T", "L", "-D", "ofa-v2-uroce-cma", "-w", "1", "-m", "500", "limit_rsp",
                                      "limit_psp"], capture_output=True, text=True, timeout=TIMEOUT)
                text = out.stdout + out.stderr
                made = dict(DAPLTEST_LIMIT.findall(text))
                assert out.returncode == 0 and made == {"RSPs created": "500", "PSPs created": "500"} and (
                    not DAPLTEST_FAILED.search(text)), f"dapltest made {made}:\n{text[-3000:]}"
                return "500 RSPs and 500 PSPs"

            set_range(44000, 44009)
            daemon = Daemon(uroced, work, "ports", netns=ns)
            for what, case in [("range 44000-44009", ten_ports), ("range changed to 44100", changed_range),
                               ("one port, two servers", shared_source_port),
                               ("dapltest's service points outside the range", dapltest_service_points)]:
                try:
                    print(f"PASS ephemeral ports: {what}: {case()}", flush=True)
                except Exception as e:  # noqa: BLE001 - every case reports, the run goes on
                    failures += 1
                    print(f"FAIL ephemeral ports: {what}: {e}", flush=True)
        finally:
            if daemon:
                if not daemon.alive():
                    failures += 1
                    print(f"FAIL ephemeral ports: uroced died:\n{daemon.read_log()[-3000:]}")
                daemon.stop()
            sh("ip", "netns", "del", ns, check=False)
    return failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--uroced", required=True)
    ap.add_argument("--uroce-run", required=True)
    ap.add_argument("--setup", action="append", choices=["loopback", "veth", "veth-vlan"])
    a = ap.parse_args()
    needed = ["rping", "ucmatose", "cmtime", "udaddy", "rdma_server", "rdma_client", "rdma_xserver", "rdma_xclient", "ib_write_bw",
              "ib_send_lat", "dapltest"]
    missing = [p for p in needed if shutil.which(p) is None]
    if missing:
        print("SKIP: not installed: " + " ".join(missing))
        return 0
    failures = 0
    for name in a.setup or ["loopback", "veth", "veth-vlan"]:
        if name.startswith("veth") and not is_root():
            print("SKIP veth: needs root for network namespaces")
            continue
        with tempfile.TemporaryDirectory(prefix="uroce-rdmacm-") as work:
            # On the loopback one capture holds both sides of every connection (see cm_psn_check).
            capture = os.path.join(work, "lo.pcap") if name == "loopback" else None
            extra = ["--capture", capture] if capture else EGRESS_QOS_MAP if name == "veth-vlan" else []
            with SETUPS[name.removesuffix("-vlan")](a.uroced, work, extra) as (daemons, server_socket, client_socket):
                server_ip, client_ip = ("192.0.2.1", "192.0.2.1") if name == "loopback" else ("10.77.0.1", "10.77.0.2")
                absent_ip = "192.0.2.99" if name == "loopback" else "10.77.0.99"
                cases = [
                    ("rping -C 10 -S 64 -V", lambda: rping(a.uroce_run, server_socket, client_socket, server_ip,
                                                            client_ip, 10, 64)),
                    ("rping -C 50 -S 4096 -V", lambda: rping(a.uroce_run, server_socket, client_socket, server_ip,
                                                              client_ip, 50, 4096)),
                    ("rping, nobody listening", lambda: rping_nobody_listens(a.uroce_run, client_socket, server_ip)),
                    ("rping, nobody there", lambda: rping_nobody_there(a.uroce_run, client_socket, absent_ip)),
                    ("rdma_migrate_id and other calls", lambda: rdmacm_calls(a.uroce_run, client_socket, client_ip)),
                    ("ucmatose", lambda: ucmatose(a.uroce_run, server_socket, client_socket, server_ip)),
                    ("cmtime -c 100", lambda: cmtime(a.uroce_run, server_socket, client_socket, server_ip, work)),
                    ("ib_write_bw -R", lambda: perftest(a.uroce_run, server_socket, client_socket, server_ip,
                                                        "ib_write_bw", ["-n", "200", "-s", "4096"])),
                    ("ib_send_lat -R", lambda: perftest(a.uroce_run, server_socket, client_socket, server_ip,
                                                        "ib_send_lat", ["-n", "200"])),
                    ("rdma_server/rdma_client", lambda: rdma_server_client(a.uroce_run, server_socket,
                                                                           client_socket, server_ip)),
                    ("rdma_xserver/rdma_xclient -c r", lambda: rdma_xserver_client(a.uroce_run, server_socket,
                                                                                   client_socket, server_ip, "r")),
                    ("rdma_xserver/rdma_xclient -c x", lambda: rdma_xserver_client(a.uroce_run, server_socket,
                                                                                   client_socket, server_ip, "x")),
                    ("udaddy", lambda: udaddy(a.uroce_run, server_socket, client_socket, server_ip)),
                    ("udaddy, nobody listening", lambda: udaddy_nobody_listens(a.uroce_run, client_socket,
                                                                               server_ip)),
                    ("ib_send_bw -c UD -R", lambda: perftest(a.uroce_run, server_socket, client_socket, server_ip,
                                                             "ib_send_bw", ["-c", "UD", "-n", "200"])),
                ]
                for what, case in cases:
                    try:
                        print(f"PASS {name}: {what}: {case()}", flush=True)
                    except Exception as e:  # noqa: BLE001 - every case reports, the run goes on
                        failures += 1
                        print(f"FAIL {name}: {what}: {e}", flush=True)
                for d in daemons:
                    if not d.alive():
                        failures += 1
                        print(f"FAIL {name}: a uroced died:\n{d.read_log()[-3000:]}")
            if capture:  # the daemon has stopped: the capture is complete
                uroce = os.path.join(os.path.dirname(a.uroced), "..", "pcap_tools", "uroce")
                try:
                    rxe = cm_psn_check.check(uroce, RXE_RPING)
                    assert rxe == 2, f"the checker found {rxe} of rxe's 2 directions"
                    n = cm_psn_check.check(uroce, capture)
                    assert n >= 10, f"only {n} connection directions carried data"
                    print(f"PASS {name}: starting PSNs as Linux's CM ({n} directions; rxe's rping capture: {rxe})")
                except (AssertionError, subprocess.CalledProcessError) as e:
                    failures += 1
                    print(f"FAIL {name}: starting PSNs: {e}")
                try:
                    print(f"PASS {name}: XRC on the wire: {xrc_on_the_wire(uroce, capture)}")
                except (AssertionError, subprocess.CalledProcessError) as e:
                    failures += 1
                    print(f"FAIL {name}: XRC on the wire: {e}")
        if name == "veth-vlan":
            failures += run_priority_cases(a.uroced, a.uroce_run)
        if name == "loopback" and is_root():
            failures += port_range_cases(a.uroced, a.uroce_run)
    print("rdmacm tests:", "all passed" if failures == 0 else f"{failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
