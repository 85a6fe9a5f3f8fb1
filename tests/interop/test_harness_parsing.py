#!/usr/bin/env python3
"""The interop harness's judgement without a VM (scripts/interop/): how it reads each program's result
and how it judges a capture, on sample outputs of the real programs and on the repository's rxe captures.

  test_harness_parsing.py UROCE_BINARY CAPTURE_DIR
"""
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "interop"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import capture_check  # noqa: E402
import pcapfile  # noqa: E402
import programs  # noqa: E402

PINGPONG = """  local address:  LID 0x0000, QPN 0x000011, PSN 0xbac2df, GID ::ffff:10.99.0.2
8192000 bytes in 0.12 seconds = 530.58 Mbit/sec
1000 iters in 0.12 seconds = 123.52 usec/iter
"""
WRITE_BW = """ #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]
 65536      100              12.34              11.87   		   0.000190
---------------------------------------------------------------------------------------
"""
ATOMIC_BW = """ #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]
 8          200              0.02               0.02   		   0.002926
"""
LAT_WITH_NAN = """ #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]
 2       200          301.76         722264.65      921.08   	       13480.27     	-nan   		220723.65 		722264.65
"""
RSTREAM = """name      bytes   xfers   iters   total       time     Gb/sec    usec/xfer
custom    4k      100     1       800k        0.05s      0.13     246.51
"""
QPERF = """rc_bw:
    bw  =  6.75 MB/sec
rc_lat:
    latency  =  2.5 ms
"""


class Side:
    device, gid, gid6, ip = "rxe0", "1", "2", "10.99.0.1"
    netdev = "eth0"
    roce_ip = ip
    ip6 = "fd99::1"

    @staticmethod
    def script(name):
        return "/run/interop/" + name


def main():
    uroce, captures = sys.argv[1], sys.argv[2]
    assert programs.pingpong_result(PINGPONG) == "530.6 Mbit/s"
    assert programs.perftest_bw_result(WRITE_BW) == "11.9 MB/s"
    assert programs.perftest_atomic_result(ATOMIC_BW) == "2.93 k ops/s"
    assert programs.perftest_lat_result(LAT_WITH_NAN) == "921 us typ"
    assert programs.qperf_result(QPERF) == "6.75 MB/sec, 2.5 ms"
    assert programs.pingpong_result("Couldn't connect to 10.99.0.2:18601") is None
    assert programs.rping_result("ping data: rdma-ping-0: ABC\nping data: rdma-ping-1: BCD\n") == "2 pings verified"
    assert programs.rping_result("cma event RDMA_CM_EVENT_REJECTED, error 8\n") is None
    assert programs.udaddy_result("udaddy: starting client\ntest complete\nreturn status 0\n")
    assert programs.udaddy_result("udaddy: event: RDMA_CM_EVENT_UNREACHABLE, error: 1\n") is None
    assert programs.mckey_result("mckey: joined dgid: ::ffff:239.1.1.1 mlid 0x0 sl 0\n"
                                 "receiving data transfers\ndata transfers complete\ntest complete\n")
    assert programs.mckey_result("mckey: joined dgid: ::ffff:239.1.1.1 mlid 0x0 sl 0\n") is None
    assert programs.rsocket_result(RSTREAM) == "800k moved, 0.13 Gb/s"
    assert programs.rsocket_result(RSTREAM + "data verification failed byte 4097\n") is None
    assert programs.rsocket_result(RSTREAM.splitlines()[0] + "\nrconnect: Connection refused\n") is None
    fi_out = ("bytes   #sent   #ack     total       time     MB/sec    usec/xfer   Mxfers/sec\n"
              "64      50      =50      6.2k        0.25s      0.02    2508.20       0.00\n"
              "1m      50      =50      100m        7.93s     13.22   79315.42       0.00\n")
    assert programs.fi_result(fi_out) == "1m: 13.2 MB/s, 79315 us"
    assert programs.fi_result(fi_out.replace("=50      100m", "=49      100m")) is None  # one not acknowledged
    assert programs.fi_result("fi_getinfo(): util/pingpong.c:1489, ret=-61 (No data available)\n") is None
    # A rate printed as 0.00 (64 B under TCG) is slow, not failed; nothing sent is a failure.
    zero_rate = fi_out.replace("  0.02    2508.20", "  0.00    2508.20")
    assert programs.fi_result(zero_rate) == "1m: 13.2 MB/s, 79315 us"
    none_sent = fi_out.replace("64      50      =50", "64      0       =0 ")
    assert programs.fi_result(none_sent) is None
    assert (programs.fi_unacknowledged(programs.FI_RESULT.findall(none_sent)) ==
            "64 B: 0 sent, 0 acknowledged, 0.02 MB/s")
    assert programs.fi_unacknowledged(programs.FI_RESULT.findall(fi_out)) is None
    # UCP by socket address: the client's last line, only with every check passed; the server listens on its
    # RoCE address with rdmacm as the only connection manager, the client connects there; a REJ is a refusal
    # the harness retries (programs.py cm_only).
    ok = "ok: 50 messages of 4096 bytes echoed; put, get and fetch-and-add of 64 KiB checked\n"
    assert programs.ucp_sockaddr_result(ok) == "50 x 4096 B echoed, put/get/fadd checked"
    assert programs.ucp_sockaddr_result("FAIL: ucp_get_nbx read back other bytes than were put\n") is None
    ucp = programs.PROGRAMS[programs.UCP_SOCKADDR]
    programs.BUILD["dir"] = "/b"  # matrix.py's --build: where the project's own test programs are
    ucp_server = ucp.server(Side, 18002)
    assert ucp_server[-5:] == ["/b/verbs_shim/ucp_sockaddr_check", "server", Side.roce_ip, "18002", "1"], ucp_server
    assert "UCX_SOCKADDR_TLS_PRIORITY=rdmacm" in ucp_server and ucp.cm_only and ucp.lossy
    # The server listens on the out-of-band port (-B); the client connects to it (-P), with no -B.
    msg = programs.PROGRAMS["fi_pingpong verbs msg"]
    fi_server, fi_client = msg.server(Side, 18001), msg.client(Side, 18001, "10.99.0.254", Side)
    assert fi_server[-2:] == ["-B", "18001"] and "-P" not in fi_server, fi_server
    assert fi_client[-3:] == ["-P", "18001", "10.99.0.254"] and "-B" not in fi_client, fi_client
    # Over loss fi_pingpong runs one 4 KiB size, 20 round trips: -S added before -c, -I replaced.
    lossy = msg.argv(msg.client(Side, 1, "10.99.0.254", Side), 5)
    assert lossy[lossy.index("-S") + 1] == "4096" and lossy[lossy.index("-I") + 1] == "20", lossy
    assert "FI_VERBS_IFACE=eth0" in lossy and lossy[-1] == "10.99.0.254", lossy

    # Every program's command lines are well formed on both kinds of side; lossy bandwidth cells send less.
    # The client gets the server's TCP address and the server's side: rping and udaddy (rdma_cm only) must
    # address the server's RoCE address, which on a VLAN side is not the TCP one.
    class ServerSide(Side):
        roce_ip = "10.99.100.254"

    for p in programs.PROGRAMS.values():
        server = p.server(Side, 18000)
        client = p.client(Side, 18000, "10.99.0.254", ServerSide)
        # (mckey's client addresses the group, not the server; an IPv6 row's client the server's IPv6 address)
        by_roce_ip = p.name.startswith(("rping", "udaddy", "fio", programs.UCP_SOCKADDR, programs.ISER)) and not p.ipv6
        address = "10.99.100.254" if by_roce_ip else "10.99.0.254"
        assert server and client and (address in client or f"--hostname={address}" in client or  # (fio's)
                                      client[-1].startswith(f"iser://{address}:3260/") or  # (iSER's)
                                      "239.1.1.1" in client or (p.ipv6 and Side.ip6 in client)), p.name
    # fio over loss: 16 blocks, on both sides (a send's server counts the blocks it receives).
    fio = programs.PROGRAMS["fio rdma send 64 KiB"]
    for argv in (fio.argv(fio.server(Side, 1), 5), fio.argv(fio.client(Side, 1, "10.99.0.254", Side), 5)):
        assert f"--size={16 * 65536}" in argv and "--bs=65536" in argv, argv
    assert f"--size={128 * 65536}" in fio.argv(fio.server(Side, 1), 0)
    # A VLAN side names its service level (its frames' priority) to the programs that take one; others do not.
    class VlanSide(Side):
        sl = "3"
    for name, option in (("ibv_rc_pingpong", "-l"), ("ibv_ud_pingpong", "-l"), ("ib_write_bw", "--sl"),
                         ("ib_atomic_lat", "--sl"), ("pyverbs_peer.py", "--sl")):
        p = programs.PROGRAMS[name]
        for argv in (p.server(VlanSide, 1), p.client(VlanSide, 1, "10.99.0.254", VlanSide)):
            assert argv[argv.index(option) + 1] == "3", (name, argv)
        assert option not in p.server(Side, 1), name
    bw = programs.PROGRAMS["ib_write_bw"]
    argv = bw.client(Side, 1, "10.99.0.254", Side)
    assert bw.argv(argv, 5)[argv.index("-n") + 1] == "20" and bw.argv(argv, 0) == argv
    assert not any(programs.PROGRAMS[n].lossy for n in ("ibv_ud_pingpong", "udaddy", "mckey",
                                                         programs.ISER + "iscsi-perf 64 KiB → tgtd"))
    # iscsi-perf: its final average, once it finished; tgtd serves until stopped.
    perf = ("00:00:01 - lba 30976, iops current 129 (8 MB/s), iops average 112 (7 MB/s), in_flight 16, busy 0"
            "        iops average 124 (7 MB/s)                          \nfinished.\n")
    assert programs.iscsi_perf_result(perf) == "7 MB/s, 124 IOPS"
    assert programs.iscsi_perf_result(perf.replace("finished.", "")) is None
    assert programs.iscsi_perf_result("Login Failed. iscsi_service failed with : revents is not POLLIN\n") is None
    iser = programs.PROGRAMS[programs.ISER + "iscsi-perf 64 KiB → tgtd"]
    assert iser.server_persists
    assert iser.server(Side, 18009)[:2] == ["/run/interop/iser_target.sh", "18009"]
    # rdma_cm-only programs have no TCP listener to wait for; the others do.
    rsockets = [n for n in programs.PROGRAMS if n.startswith(("rstream ", "riostream "))]
    assert len(rsockets) == 2, rsockets
    assert all(programs.PROGRAMS[n].cm_only for n in ["udaddy", "rping -C 20 -S 4096 -V", "mckey", *rsockets])
    # rsockets: RC, so lossy cells too, with the exit race of a server waiting for its last message's ACK;
    # blocking calls and the data verified on both sides.
    for n in rsockets:
        r = programs.PROGRAMS[n]
        assert r.lossy and r.last_ack_race and not r.server_persists, n
        for argv in (r.server(Side, 1), r.client(Side, 1, "10.99.0.254", Side)):
            assert " -T b -T v" in " ".join(argv) and argv[0] == n.split()[0], argv
    assert not programs.PROGRAMS["ib_write_bw"].cm_only and not programs.PROGRAMS["qperf rc_bw rc_lat"].cm_only
    assert programs.PROGRAMS["rping -C 20 -S 4096 -V"].server(Side, 1)[3] == Side.ip  # rping -s -a <own IP>
    rping6 = programs.PROGRAMS["rping -C 20 -S 4096 -V (IPv6)"]
    assert rping6.server(Side, 1)[3] == Side.ip6 and rping6.client(Side, 1, "10.99.0.254", Side)[3] == Side.ip6
    # The verbs programs' IPv6 rows name the IPv6 GID and still exchange over TCP to the IPv4 address; UD has
    # no lossy cell, and the lossy ib_write_bw sends less, as over IPv4.
    for name, option in (("ibv_rc_pingpong (IPv6)", "-g"), ("ibv_ud_pingpong (IPv6)", "-g"), ("ib_write_bw (IPv6)", "-x")):
        r = programs.PROGRAMS[name]
        server, client = r.server(Side, 1), r.client(Side, 1, "10.99.0.254", Side)
        assert r.ipv6 and server[server.index(option) + 1] == Side.gid6 and client[-1] == "10.99.0.254", name
        assert programs.PROGRAMS[name.removesuffix(" (IPv6)")].server(Side, 1)[server.index(option) + 1] == Side.gid
    assert not programs.PROGRAMS["ibv_ud_pingpong (IPv6)"].lossy
    bw6 = programs.PROGRAMS["ib_write_bw (IPv6)"]
    argv = bw6.client(Side, 1, "10.99.0.254", Side)
    assert bw6.argv(argv, 5)[argv.index("-n") + 1] == "20"
    # pyverbs_peer learns that its cell is lossy (its remote access error may then end as retry-exceeded);
    # nothing else changes, and a clean cell is not told.
    pv = programs.PROGRAMS["pyverbs_peer.py"]
    argv = pv.client(Side, 1, "10.99.0.254", Side)
    assert pv.argv(argv, 5) == argv + ["--lossy"] and pv.argv(argv, 0) == argv and "--lossy" not in argv
    assert "--lossy" not in bw.argv(bw.client(Side, 1, "10.99.0.254", Side), 5)
    # Lossy qperf cells send 4 KiB messages for 10 s, options before the host; its server is left alone.
    qp = programs.PROGRAMS["qperf rc_bw rc_lat"]
    argv = qp.client(Side, 1, "10.99.0.254", Side)
    lossy = qp.argv(argv, 5)
    assert lossy[lossy.index("-t") + 1] == "10" and lossy[lossy.index("-m") + 1] == "4096", lossy
    assert lossy.index("-m") < lossy.index("10.99.0.254") and qp.argv(argv, 0) == argv
    assert qp.argv(qp.server(Side, 1), 5) == qp.server(Side, 1)
    # qperf's listen race is recognised (and its server's TCP delayed); the exit race covers the
    # pingpongs and perftest's latency tests, not the bandwidth tests.
    assert qp.listen_race and qp.server_tcp_delay_ms > 0 and not bw.listen_race
    assert programs.PROGRAMS["ib_write_lat"].last_ack_race and programs.PROGRAMS["ibv_rc_pingpong"].last_ack_race
    assert not bw.last_ack_race and not qp.last_ack_race  # (a qperf server is stopped by the harness)

    # The exit race, from an interop cell (ib_write_lat, uroce client, 5% loss): rxe's server resends its last
    # WRITE to a client that has left, and the capture shows that uroce had ACKed it (the ACK was lost).
    # Without that ACK in the capture the race is not proven.
    here = os.path.dirname(os.path.abspath(__file__))
    r = capture_check.check(uroce, os.path.join(here, "..", "data", "interop", "exit-race-write-lat.pcap"))
    assert r["ok"] and r["retrans"] > 0 and r["last_retransmission_acked"], r
    r = capture_check.check(uroce, os.path.join(here, "..", "data", "interop", "exit-race-write-lat-ack-missing.pcap"))
    assert r["ok"] and r["retrans"] > 0 and not r["last_retransmission_acked"], r
    # The same race the other way round (ibv_rc_pingpong over IPv6, uroce client, 5% loss; the capture's last
    # 28 frames): rxe's server answered uroce's last SEND with its own last message, which uroce ACKed, and
    # left; its ACK of that SEND was lost, so uroce resent it 7 times to a QP that was gone. The server's
    # new message after the SEND's first transmission proves it had the SEND; without it, nothing is proven.
    r = capture_check.check(uroce, os.path.join(here, "..", "data", "interop", "exit-race-server-left.pcap"))
    assert r["ok"] and r["roce_ipv6"] == 28 and r["last_request_answered"], r
    r = capture_check.check(uroce, os.path.join(here, "..", "data", "interop", "exit-race-server-left-unproven.pcap"))
    assert r["ok"] and not r["last_request_answered"], r
    # (In the client-left capture above, the resent WRITE was answered by uroce's next WRITE as well.)
    r = capture_check.check(uroce, os.path.join(here, "..", "data", "interop", "exit-race-write-lat.pcap"))
    assert r["last_request_answered"], r
    # A multi-packet message is one line of explain's, its PSNs a range (ibv_rc_pingpong -s 65536's exit race).
    explained = (
        "#16390-16433  B  retransmitted RC SEND of 45056 bytes in 44 packets (psn 1377056..1377099); resumes\n"
        "     #16434  A  ACK up to psn 1377099 (MSN 50): the responder has received everything through psn\n"
        "#16435-16474  B  retransmitted RC SEND of 40960 bytes in 40 packets (psn 1377056..1377099); resumes\n")
    assert capture_check.read_explain(explained)["last_retransmission_acked"]
    assert not capture_check.read_explain(explained.replace("psn 1377099 (MSN", "psn 1377098 (MSN"))[
        "last_retransmission_acked"]
    assert capture_check.read_explain("  #7  B  CM REJ: 10.99.0.2 rejects the connection (reason 8: invalid service "
                                      "ID)\n")["rej_reasons"] == [8]
    # rxe's rping capture: a connection without a REJ, and its CM messages in order.
    r = capture_check.check(uroce, os.path.join(captures, "10-rdma-cm-rping.pcap"))
    assert r["ok"] and r["rej_reasons"] == [] and r["roce_ipv6"] == 0, r
    assert [m for _, m in r["cm"]] == ["REQ", "REP", "RTU", "DREQ", "DREP"], r["cm"]
    # A lost DREQ (rping, rxe client, uroce server, 5% loss; the CM frames and the capture's last 14): rping's
    # client destroyed its ID after rdma_disconnect, which ends the DREQ's retransmission, so no DREQ of the
    # client's reached uroce (its GSI PSNs go from 112, the RTU, to 114, the DREP: 113 was the DREQ). The
    # only DREQ is uroce's own, sent when the harness stopped the waiting server.
    r = capture_check.check(uroce, os.path.join(here, "..", "data", "interop", "rping-lost-dreq.pcap"))
    assert r["ok"] and r["cm"] == [("10.99.0.2", "REQ"), ("10.99.0.1", "REP"), ("10.99.0.2", "RTU"),
                                   ("10.99.0.1", "DREQ"), ("10.99.0.2", "DREP")], r["cm"]
    assert programs.PROGRAMS["rping -C 20 -S 4096 -V"].dreq_race
    assert programs.PROGRAMS["rping -C 20 -S 4096 -V (IPv6)"].dreq_race
    assert not any(p.dreq_race for n, p in programs.PROGRAMS.items() if not n.startswith("rping"))
    # The IPv6 rows need every RoCE frame over IPv6: rxe's rping over IPv6 is counted whole, IPv4 not at all.
    r = capture_check.check(uroce, os.path.join(here, "..", "data", "interop", "rxe-rping-ipv6.pcap"))
    assert r["ok"] and r["roce"] == r["roce_ipv6"] == 365, r
    assert programs.PROGRAMS["rping -C 20 -S 4096 -V (IPv6)"].ipv6
    assert programs.PROGRAMS["rping -C 20 -S 4096 -V (IPv6)"].cm_only
    assert not programs.PROGRAMS["rping -C 20 -S 4096 -V"].ipv6

    # A real lossy rxe capture: clean, with its retransmissions and NAKs counted.
    r = capture_check.check(uroce, os.path.join(captures, "11-rc-write-loss5.pcap"))
    assert r["ok"] and r["bad_icrc"] == 0 and r["retrans"] > 0 and r["naks"] > 0, r
    # One payload bit flipped: a bad ICRC fails the cell.
    with tempfile.TemporaryDirectory() as tmp:
        bad = os.path.join(tmp, "corrupt.pcap")
        shutil.copy(os.path.join(captures, "01-rc-send-pingpong.pcap"), bad)
        with open(bad, "r+b") as f:
            offset = 24 + 16 + 42 + 16 + 42 + 16 + 200  # deep in frame 3's payload (after two ARP frames)
            f.seek(offset)
            byte = f.read(1)[0]
            f.seek(offset)
            f.write(bytes([byte ^ 1]))
        r = capture_check.check(uroce, bad)
        assert not r["ok"] and r["bad_icrc"] == 1 and "bad ICRC" in r["error"], r
        # A WRITE whose RETH claims 4 bytes more than its packets carry (ICRC made good again): a broken
        # protocol rule fails the cell.
        linktype, records = pcapfile.read(os.path.join(captures, "05-rc-write.pcap"))
        frame = next(r[3] for r in records if pcapfile.roce_offset(r[3]) is not None
                     and r[3][pcapfile.roce_offset(r[3])] == 0x06)  # RC RDMA_WRITE_FIRST
        reth_length = pcapfile.roce_offset(frame) + 12 + 12
        frame[reth_length + 3] = (frame[reth_length + 3] + 4) & 0xFF
        pcapfile.fix_icrc(frame)
        broken = os.path.join(tmp, "write-length.pcap")
        pcapfile.write(broken, linktype, records)
        r = capture_check.check(uroce, broken)
        assert not r["ok"] and r["bad_icrc"] == 0 and "write_length at frame" in r["error"], r
        assert len(r["violations"]) == 1, r
        # A capture without RoCE traffic fails too.
        empty = os.path.join(tmp, "empty.pcap")
        with open(empty, "wb") as f:
            f.write(bytes.fromhex("d4c3b2a1020004000000000000000000ffff000001000000"))
        r = capture_check.check(uroce, empty)
        assert not r["ok"] and "no RoCE" in r["error"], r
        # The VLAN cells (check_vlan): rxe's pingpong, every frame given an 802.1Q tag: VLAN 100, priority 3
        # from 10.77.0.12, 0 from 10.77.0.11 and on ARP, plus an untagged IPv6 frame of someone else's.
        linktype, records = pcapfile.read(os.path.join(captures, "01-rc-send-pingpong.pcap"))
        sides = {"10.77.0.12": "a", "10.77.0.11": "b"}

        def tag(f, vid=100):
            pcp = 3 if f[12:14] == b"\x08\x00" and f[26:30] == bytes([10, 77, 0, 12]) else 0
            return f[:12] + b"\x81\x00" + (pcp << 13 | vid).to_bytes(2, "big") + f[12:]

        def vlan_capture(name, frames):
            path = os.path.join(tmp, name)
            pcapfile.write(path, linktype, [(0, i, len(f), f) for i, f in enumerate(frames)])
            return path
        frames = [tag(r[3]) for r in records]
        others = bytes(12) + b"\x86\xdd" + bytes(60)
        v = capture_check.check_vlan(vlan_capture("vlan.pcap", frames + [others]), 100, sides, {"a": 3})
        assert v["error"] is None and v["priorities"] == {"a": {3}, "b": {0}}, v
        v = capture_check.check_vlan(vlan_capture("vlan.pcap", frames), 100, sides, {"a": 3, "b": 3})
        assert v["error"] and "priorities" in v["error"], v  # b sent priority 0
        for i, what in ((0, "ARP"), (5, "RoCE")):  # one frame untagged, or on VLAN 101
            for wrong in (records[i][3], tag(records[i][3], 101)):
                v = capture_check.check_vlan(vlan_capture("vlan.pcap", frames[:i] + [wrong] + frames[i + 1:]), 100,
                                             sides, {"a": 3})
                assert v["error"] and v["error"].startswith(f"a {what} frame not on VLAN 100"), (i, v)
        v = capture_check.check_vlan(vlan_capture("vlan.pcap", frames), 100, {"10.77.0.12": "a"}, {"a": 3})
        assert v["error"] and "RoCE from 10.77.0.11" in v["error"], v
        one_way = [f for f in frames if not (f[16:18] == b"\x08\x00" and f[30:34] == bytes([10, 77, 0, 11]))]
        v = capture_check.check_vlan(vlan_capture("vlan.pcap", one_way), 100, sides, {"a": 3})
        assert v["error"] == "no RoCE from b", v
        # A side that answers datagrams from their completions (udaddy's uroce server: wc.sl holds the packet
        # type, so the reply's SL is 2) is judged apart for its UD SENDs: rxe's UD pingpong, a's datagrams
        # at 2 and b's at 3, every frame at its side's priority otherwise.
        linktype, records = pcapfile.read(os.path.join(captures, "03-ud-send-pingpong.pcap"))
        ud_sides = {}
        for r in records:
            f = r[3]
            src = ".".join(map(str, f[26:30]))
            if f[12:14] == b"\x08\x00" and f[23] == 17 and f[36:38] == (4791).to_bytes(2, "big") and src not in ud_sides:
                ud_sides[src] = "ab"[len(ud_sides)]

        def ud_tag(f, a_datagrams):
            src = ".".join(map(str, f[26:30])) if f[12:14] == b"\x08\x00" else None
            datagram = src is not None and f[42] in (0x64, 0x65)
            pcp = a_datagrams if ud_sides.get(src) == "a" and datagram else 3
            return f[:12] + b"\x81\x00" + (pcp << 13 | 100).to_bytes(2, "big") + f[12:]
        ud = vlan_capture("ud.pcap", [ud_tag(r[3], 2) for r in records])
        assert len(ud_sides) == 2, ud_sides
        v = capture_check.check_vlan(ud, 100, ud_sides, {"a": 3, "b": 3}, {"a": 2})
        assert v["error"] is None and v["priorities"]["a"] == {2}, v  # (the pingpong's frames are all datagrams)
        v = capture_check.check_vlan(ud, 100, ud_sides, {"a": 3, "b": 3})
        assert v["error"] and "first off: ('a', 2, 'datagram')" in v["error"], v
        v = capture_check.check_vlan(vlan_capture("ud.pcap", [ud_tag(r[3], 3) for r in records]), 100, ud_sides,
                                     {"a": 3, "b": 3}, {"a": 2})
        assert v["error"] and "first off: ('a', 3, 'datagram')" in v["error"], v
    print("interop harness parsing: ok")


if __name__ == "__main__":
    main()
