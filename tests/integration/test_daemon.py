#!/usr/bin/env python3
"""Integration tests of uroced with real daemons and real client processes (issue 4's section 8).

(a) two clients through one daemon's loopback port; (b) two daemons in two network namespaces joined by a
veth pair (net_af_packet), with a capture that must dissect with every ICRC valid, and with injected loss;
(c) two daemons joined by memif. Every transfer is checked byte for byte by uroce-rdma-test. A client
killed with SIGKILL mid-transfer leaves the daemon and other clients healthy, and so does a memif peer
daemon killed mid-transfer.

Usage: test_daemon.py UROCED UROCE_RDMA_TEST UROCE
"""
import collections
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import unittest

import pcapfile

from daemon_harness import Daemon, DaemonTestCase as HarnessTestCase, is_root, run_pair, stats, two_namespaces_with_veth

UROCED = TOOL = UROCE = None

# (op, size, count): enough traffic to cross many ring wraps, PSN windows and ACK coalescing, small
# enough for CI's two cores.
WORKLOAD = [("write", 65536, 1500), ("read", 65536, 1500), ("send", 4096, 3000), ("atomic", 8, 2000),
            ("ud", 1000, 2000)]


def inject_pfc(netns, iface, priority, duration_ms):
    """The command that runs inject_pfc.py in `netns`, refreshing every 0.5 ms. It stands in for a switch's
    hardware, which keeps its pace whatever else runs: so it runs at a real-time priority (SCHED_FIFO), and
    the rest of a loaded test run cannot stall it past a pause's 3.4 ms."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "inject_pfc.py")
    return ["ip", "netns", "exec", netns, "chrt", "--fifo", "50", sys.executable, script, iface, str(priority),
            str(duration_ms), "0.5"]


def report(label, result):
    print(f"  {label}: {result['op']} {result['size']} B x {result['count']}: "
          f"{result['gbytes_per_s']:.3f} GB/s, {result['messages_per_s'] / 1e3:.1f} k msg/s", flush=True)


class DaemonTestCase(HarnessTestCase):
    def run_workload(self, label, server_socket, client_socket, workload=WORKLOAD, extra=()):
        for op, size, count in workload:
            with self.subTest(op=op):
                result, client_rc, server_rc, err = run_pair(TOOL, self.dir.name, server_socket, client_socket, op,
                                                             size, count, extra=extra)
                self.assertEqual(client_rc, 0, err)
                self.assertEqual(server_rc, 0, err)
                self.assertTrue(result["verified"], result)
                report(label, result)

    def assert_clean_counters(self, socket):
        s = stats(UROCE, socket)
        self.assertEqual(s["device"]["rx_bad_icrc"], 0, s)
        self.assertEqual(s["device"]["rx_malformed"], 0, s)
        self.assertEqual(s["queues"]["malformed_wr"], 0, s)
        return s

    def daemon(self, name, args=(), netns=None):
        d = Daemon(UROCED, self.dir.name, name, args, netns)
        self.daemons.append(d)
        return d


class Loopback(DaemonTestCase):
    """(a): both processes on one daemon's internal loopback port."""

    def test_every_operation(self):
        d = self.daemon("lo")
        self.run_workload("loopback", d.socket, d.socket)
        s = self.assert_clean_counters(d.socket)
        self.assertEqual(s["sessions"], 1)  # only `uroce stats` itself
        self.assertGreater(s["device"]["tx_packets"], 10000)
        # The client's buffers are on shared pages, so every packet of a 64 KiB WRITE or READ but the
        # WRITE's first is copied into place while its ICRC is checked (early placement): 1500 x 15 and
        # 1500 x 16 at the largest path MTU, more at smaller ones.
        self.assertGreaterEqual(s["device"]["rx_placed_early"], 1500 * 15 + 1500 * 16, s["device"])

    def test_control_thread_beside_the_engine(self):
        # The engine polls on its core; the control thread (socket, rdma_cm) runs where DPDK puts its own
        # control threads: on the CPUs this process may use minus the engine's, or on the engine's if that
        # is all there is (emulator/port/control_thread.hpp).
        allowed = os.sched_getaffinity(0)
        for core in sorted(allowed)[:2]:  # the first CPU, and another when there is one
            with self.subTest(core=core):
                d = self.daemon(f"cpu{core}", ["--core", str(core)])
                # The socket exists before the control thread does, and DPDK names that thread from its
                # creator before the thread has placed itself. An answer comes from its body, which runs
                # once placed (CI, loaded, caught it unnamed, and named but still on the engine's CPU).
                stats(UROCE, d.socket)
                threads = {}
                for tid in os.listdir(f"/proc/{d.proc.pid}/task"):
                    with open(f"/proc/{d.proc.pid}/task/{tid}/comm") as f:
                        threads[f.read().strip()] = os.sched_getaffinity(int(tid))
                self.assertEqual(os.sched_getaffinity(d.proc.pid), {core})  # the engine: the main lcore
                self.assertIn("uroce-control", threads, threads)
                self.assertEqual(threads["uroce-control"], (allowed - {core}) or {core}, threads)
                # ... and serves from there: a transfer sets up through the control socket.
                self.run_workload(f"engine on CPU {core}", d.socket, d.socket, [("write", 65536, 100)])

    def test_client_killed_mid_transfer(self):
        d = self.daemon("lo")
        oob = os.path.join(self.dir.name, "oob-kill")
        common = ["--socket", d.socket, "--oob", oob, "--op", "write", "--size", "65536", "--count", "100000000",
                  "--timeout", "30"]
        server = subprocess.Popen([TOOL, "--server", *common], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = subprocess.Popen([TOOL, "--client", *common], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.time() + 20
            while stats(UROCE, d.socket)["queues"]["completions"] < 200 and time.time() < deadline:
                time.sleep(0.05)
            client.send_signal(signal.SIGKILL)
            client.wait()
            server.wait(timeout=30)  # it sees its peer vanish on the out-of-band socket
        finally:
            for p in (client, server):
                if p.poll() is None:
                    p.kill()
                    p.wait()
        self.assertTrue(d.alive(), d.read_log())
        deadline = time.time() + 10
        while stats(UROCE, d.socket)["sessions"] != 1 and time.time() < deadline:  # 1: `uroce stats`
            time.sleep(0.05)
        self.assertEqual(stats(UROCE, d.socket)["sessions"], 1)
        self.assertIn("objects it left were freed", d.read_log())
        # The daemon still serves new clients, byte-exact.
        self.run_workload("after kill", d.socket, d.socket, [("write", 65536, 500), ("send", 64, 2000)])

    def test_target_killed_mid_transfer(self):
        """The side whose memory is written dies: its memory is never touched again, the writer gets an
        error completion (a remote operation error while the dead side's QP still exists but its memory
        is already disabled, or retries running out once the QP is gone), the daemon lives on."""
        d = self.daemon("lo")
        oob = os.path.join(self.dir.name, "oob-kill2")
        common = ["--socket", d.socket, "--oob", oob, "--op", "write", "--size", "65536", "--count", "100000000",
                  "--timeout", "30"]
        server = subprocess.Popen([TOOL, "--server", *common], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = subprocess.Popen([TOOL, "--client", *common], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  text=True)
        try:
            deadline = time.time() + 20
            while stats(UROCE, d.socket)["queues"]["completions"] < 200 and time.time() < deadline:
                time.sleep(0.05)
            server.send_signal(signal.SIGKILL)
            server.wait()
            _, err = client.communicate(timeout=60)
        finally:
            for p in (client, server):
                if p.poll() is None:
                    p.kill()
                    p.wait()
        self.assertEqual(client.returncode, 2, err)
        self.assertRegex(err, "retry counter exceeded|remote operation error")
        self.assertTrue(d.alive(), d.read_log())
        self.run_workload("after kill", d.socket, d.socket, [("write", 65536, 300)])

    def test_no_libibverbs_and_no_plugin_scan(self):
        # uroced links its DPDK drivers statically (emulator/dpdk.cmake): nothing rdma-core or mlx may be
        # mapped, and no driver is loaded from Debian's plugin directory.
        d = self.daemon("maps")
        with open(f"/proc/{d.proc.pid}/maps") as f:
            maps = f.read()
        for unwanted in ("libibverbs", "libmlx5", "librte_net_mlx", "dpdk/pmds-"):
            self.assertNotIn(unwanted, maps)
        self.assertTrue(os.path.exists(UROCED + "-all-pmds"), "uroced-all-pmds is built beside uroced")

    def test_refuses_to_run_under_uroce_run(self):
        run = os.path.join(os.path.dirname(UROCE), "..", "verbs_shim", "uroce-run")
        if not os.path.exists(os.path.join(os.path.dirname(run), "libibverbs.so.1")):
            self.skipTest("no verbs shim in this build (the sanitizer configuration leaves it out)")
        out = subprocess.run([run, UROCED, "--socket", os.path.join(self.dir.name, "x.sock")], capture_output=True,
                             text=True, timeout=30)
        self.assertEqual(out.returncode, 2)
        self.assertIn("do not run uroced under uroce-run", out.stderr)

    def test_config_file(self):
        good = os.path.join(self.dir.name, "good.toml")
        with open(good, "w") as f:
            f.write('ip = ["192.0.2.77"]\nspin-us = 20\n')
        d = self.daemon("cfg", ["--config", good])
        self.assertIn("address 192.0.2.77", d.read_log())
        bad = os.path.join(self.dir.name, "bad.toml")
        with open(bad, "w") as f:
            f.write('ip = ["192.0.2.77"]\nspinn-us = 20\n')  # a misspelt key
        out = subprocess.run([UROCED, "--socket", os.path.join(self.dir.name, "y.sock"), "--config", bad],
                             capture_output=True, text=True, timeout=30)
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("spinn", out.stderr + out.stdout)

    def test_bad_command_line(self):
        for args in (["--port", "net_af_packet0,iface=nonexistent0", "--ip", "10.0.0.1"],
                     ["--port", "net_bogus0", "--ip", "10.0.0.1"], ["--port", "net_ring0"], ["--ip", "not-an-address"],
                     ["--ip", "10.0.0.1/24", "--ip", "10.0.0.1/16"], ["--ip", "10.0.0.1", "--ip", "::ffff:10.0.0.1"],
                     ["--bogus"], ["--rx-loss", "2"], ["--config", "/nonexistent.toml"], ["--nap", "doze"],
                     ["--egress-qos-map", "0:3"],  # no --vlan
                     ["--vlan", "100", "--egress-qos-map", "8:3"], ["--vlan", "100", "--egress-qos-map", "0:3x"],
                     ["--vlan", "100", "--egress-qos-map", "0-3"]):
            with self.subTest(args=args):
                out = subprocess.run([UROCED, "--socket", os.path.join(self.dir.name, "x.sock"), *args],
                                     capture_output=True, text=True, timeout=30)
                self.assertNotEqual(out.returncode, 0)
                self.assertLess(out.returncode, 128, "crashed")  # an error, not a signal
                self.assertTrue((out.stderr + out.stdout).strip(), "no message")


@unittest.skipUnless(is_root(), "needs root for network namespaces")
class Veth(DaemonTestCase):
    """(b): two daemons in two network namespaces, af_packet on each end of a veth pair."""

    def pair(self, ns, veth, extra=()):
        a = self.daemon("a", ["--port", f"net_af_packet0,iface={veth[0]}", "--ip", "10.77.0.1",
                              "--capture", os.path.join(self.dir.name, "a.pcap"), *extra], netns=ns[0])
        b = self.daemon("b", ["--port", f"net_af_packet0,iface={veth[1]}", "--ip", "10.77.0.2", *extra], netns=ns[1])
        return a, b

    def test_every_operation_and_capture(self):
        with two_namespaces_with_veth() as (ns, veth):
            a, b = self.pair(ns, veth)
            self.run_workload("veth", a.socket, b.socket)
            s = self.assert_clean_counters(a.socket)
            self.assertGreaterEqual(s["net"]["arp_replies_received"] + s["net"]["arp_requests_received"], 1, s)
            self.assert_clean_counters(b.socket)
            for d in (a, b):
                self.assertEqual(d.stop(), 0, d.read_log())
        out = subprocess.run([UROCE, "dissect", os.path.join(self.dir.name, "a.pcap")], capture_output=True, text=True,
                             timeout=300)
        self.assertEqual(out.returncode, 0, out.stderr)
        m = re.search(r"(\d+) frames: (\d+) RoCE \((\d+) with a bad ICRC\), (\d+) malformed", out.stderr)
        self.assertIsNotNone(m, out.stderr)
        frames, roce, bad, malformed = map(int, m.groups())
        print(f"  capture: {frames} frames, {roce} RoCE, {bad} bad ICRC, {malformed} malformed")
        self.assertGreater(roce, 10000)
        self.assertEqual(bad, 0)
        self.assertEqual(malformed, 0)

    def test_vlan(self):
        """Both ports on VLAN 100 (--vlan): every frame on the cable is tagged 100, the RoCE frames of both
        directions with the address vectors' service level (--sl 5) as priority, the others (ARP, ND) with
        priority 0, and the capture dissects with every ICRC valid. A port on VLAN 200 takes none of them:
        nothing gets through (not even b's ARP requests), and a counts them as other_vlan."""
        with two_namespaces_with_veth() as (ns, veth):
            a, b = self.pair(ns, veth, ["--vlan", "100"])
            self.run_workload("veth VLAN 100", a.socket, b.socket,
                              [("write", 65536, 300), ("read", 65536, 300), ("send", 4096, 500), ("ud", 1000, 500)],
                              extra=["--sl", "5"])
            for d in (a, b):
                s = self.assert_clean_counters(d.socket)
                self.assertEqual(s["net"]["dropped.other_vlan"], 0, s)
                self.assertEqual(d.stop(), 0, d.read_log())
        capture = os.path.join(self.dir.name, "a.pcap")
        _, records = pcapfile.read(capture)
        seen = collections.Counter()
        for *_, f in records:
            self.assertEqual(f[12:14], b"\x81\x00", f"an untagged frame: {bytes(f[:20]).hex()}")
            tci = int.from_bytes(f[14:16], "big")
            roce = f[16:18] == b"\x08\x00" and f[18 + 9] == 17 and int.from_bytes(f[40:42], "big") == 4791
            seen[("RoCE" if roce else f[16:18].hex(), tci >> 13, tci & 0xFFF)] += 1
        print(f"  capture on VLAN 100, (kind, priority, VID): frames: {dict(seen)}")
        self.assertEqual({vid for _, _, vid in seen}, {100}, seen)
        self.assertEqual({pcp for kind, pcp, _ in seen if kind == "RoCE"}, {5}, seen)
        self.assertEqual({pcp for kind, pcp, _ in seen if kind != "RoCE"}, {0}, seen)
        self.assertGreater(sum(n for (kind, _, _), n in seen.items() if kind == "RoCE"), 1000, seen)
        self.assertIn(("0806", 0, 100), seen)  # ARP went tagged too
        out = subprocess.run([UROCE, "dissect", capture], capture_output=True, text=True, timeout=300)
        m = re.search(r"(\d+) frames: (\d+) RoCE \((\d+) with a bad ICRC\), (\d+) malformed", out.stderr)
        self.assertIsNotNone(m, out.stderr)
        self.assertEqual((int(m.group(3)), int(m.group(4))), (0, 0), out.stderr)

        with two_namespaces_with_veth() as (ns, veth):
            a = self.daemon("a200", ["--port", f"net_af_packet0,iface={veth[0]}", "--ip", "10.77.0.1", "--vlan", "100"],
                            netns=ns[0])
            b = self.daemon("b200", ["--port", f"net_af_packet0,iface={veth[1]}", "--ip", "10.77.0.2", "--vlan", "200"],
                            netns=ns[1])
            result, client_rc, _, err = run_pair(TOOL, self.dir.name, a.socket, b.socket, "write", 4096, 10, timeout=5)
            self.assertNotEqual(client_rc, 0, result)
            s = stats(UROCE, a.socket)  # b's ARP requests for a, tagged 200
            self.assertGreater(s["net"]["dropped.other_vlan"], 0, s)
            self.assertEqual(s["net"]["arp_requests_received"], 0, s)
            self.assertTrue(a.alive() and b.alive())

    def test_pfc_pauses_a_priority(self):
        """The link partner's PFC holds the frames of the priority it names, and only those. A switch
        (inject_pfc.py, on a's end of the cable) pauses priority 5 for 200 ms, refreshing every 0.5 ms,
        then releases it, while b WRITEs to a at SL 5 on VLAN 100: b's capture shows no RoCE frame of
        priority 5 leaving b while the pause lasts, frames before and after, and the transfer completes
        intact. Pausing priority 3 instead leaves b's priority-5 frames flowing."""
        def pcp_of_b(f):  # tagged IPv4 from b: its PCP
            if f[12:14] == b"\x81\x00" and f[16:18] == b"\x08\x00" and f[18 + 12:18 + 16] == bytes([10, 77, 0, 2]):
                return f[14] >> 5
            return None
        self.check_pfc(["--vlan", "100"], ["--sl", "5"], pcp_of_b, 5, 3)

    def test_pfc_by_dscp(self):
        """The same on untagged ports that trust DSCP (uroced --trust dscp), as routed lossless fabrics run:
        b WRITEs with DSCP 26 (traffic class 104), whose priority is 26 >> 3 = 3, ConnectX's default map. A
        pause of priority 3 holds it, one of priority 5 does not."""
        def dscp_priority_of_b(f):  # untagged IPv4 from b: DSCP >> 3
            if f[12:14] == b"\x08\x00" and f[14 + 12:14 + 16] == bytes([10, 77, 0, 2]):
                return f[15] >> 5
            return None
        self.check_pfc(["--trust", "dscp"], ["--tclass", "104"], dscp_priority_of_b, 3, 5)

    def test_pfc_holds_the_port_s_own_frames(self):
        """A paused priority holds every frame of it, not RoCE's alone: the kernel at the other end pings a's
        daemon every 10 ms while a switch pauses priority 0 (untagged) for 300 ms. a answers each ping
        (ICMP, its own frame) but may send no answer while paused: the pings of the pause come back late,
        all of them, and none is lost."""
        with two_namespaces_with_veth() as (ns, veth):
            a = self.daemon("a", ["--port", f"net_af_packet0,iface={veth[0]}", "--ip", "10.77.0.1"], netns=ns[0])
            for args in (["link", "set", veth[1], "arp", "on"], ["addr", "add", "10.77.0.2/24", "dev", veth[1]]):
                subprocess.run(["ip", "-n", ns[1], *args], check=True)
            # One answer, asking once a second for up to 10 s (-w): ARP is done and a answers.
            warm = subprocess.run(["ip", "netns", "exec", ns[1], "ping", "-c", "1", "-w", "10", "10.77.0.1"],
                                  capture_output=True, text=True, timeout=30)
            self.assertEqual(warm.returncode, 0, warm.stdout + warm.stderr)
            ping = subprocess.Popen(["ip", "netns", "exec", ns[1], "ping", "-i", "0.01", "-c", "100", "-W", "5",
                                     "10.77.0.1"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            try:
                time.sleep(0.2)
                out = subprocess.run(inject_pfc(ns[1], veth[1], 0, 300), capture_output=True, text=True, timeout=60)
                self.assertEqual(out.returncode, 0, out.stderr)
                text, _ = ping.communicate(timeout=60)
            finally:
                if ping.poll() is None:
                    ping.kill()
                    ping.wait()
            rtts = [float(m) for m in re.findall(r"time=([0-9.]+) ms", text)]
            held = stats(UROCE, a.socket)["net"]
            print(f"  100 pings: {len(rtts)} answered, slowest {max(rtts, default=0):.0f} ms, "
                  f"{sum(1 for r in rtts if r > 50)} over 50 ms; a held {held['tx_frames_held']} frames")
            self.assertEqual(len(rtts), 100, text)
            # Asked in the pause, answered at its end (about 300 ms on an idle machine; a busy one can delay the
            # injector's refreshes past a pause's 3.4 ms and end a span early). Unheld, an answer takes 0.2 ms.
            self.assertGreater(max(rtts), 30, text)
            self.assertGreater(held["tx_frames_held"], 2, held)
            self.assertEqual(held["tx_held_dropped"], 0, held)

    def test_address_conflicts_are_found_and_named(self):
        """The kernel at the other end of the cable already holds a's IPv4 and IPv6 addresses. a's probes at start
        (an ARP probe from 0.0.0.0, duplicate address detection's solicitation from ::) draw the kernel's
        answers: both are counted as conflicts, and the log names an address and the kernel's MAC. The kernel
        answers neither of a's announcements, so without the probes the conflict would show only as traffic
        going astray."""
        with two_namespaces_with_veth() as (ns, veth):
            subprocess.run(["ip", "netns", "exec", ns[1], "sysctl", "-qw", f"net.ipv6.conf.{veth[1]}.disable_ipv6=0"],
                           check=True)
            for args in (["link", "set", veth[1], "arp", "on"], ["addr", "add", "10.77.0.1/24", "dev", veth[1]],
                         ["addr", "add", "fd00:77::1/64", "dev", veth[1], "nodad"]):
                subprocess.run(["ip", "-n", ns[1], *args], check=True)
            kernel_mac = json.loads(subprocess.run(["ip", "-n", ns[1], "-j", "link", "show", veth[1]],
                                                   capture_output=True, text=True, check=True).stdout)[0]["address"]
            a = self.daemon("a", ["--port", f"net_af_packet0,iface={veth[0]}", "--ip", "10.77.0.1", "--ip",
                                  "fd00:77::1"], netns=ns[0])
            deadline = time.time() + 10
            while time.time() < deadline:
                s = stats(UROCE, a.socket)["net"]
                if s["arp_conflicts"] >= 1 and s["nd_conflicts"] >= 1 and "is also in use by" in a.read_log():
                    break
                time.sleep(0.1)
            print(f"  conflicts: ARP {s['arp_conflicts']}, ND {s['nd_conflicts']}")
            self.assertGreaterEqual(s["arp_conflicts"], 1, s)
            self.assertGreaterEqual(s["nd_conflicts"], 1, s)
            self.assertRegex(a.read_log(), rf"address (10\.77\.0\.1|fd00:77::1) is also in use by {kernel_mac}")
            self.assertTrue(a.alive(), a.read_log())

    def check_pfc(self, port_args, tool_args, priority_of, target, other):
        """b WRITEs to a (`tool_args` give its frames priority `target`) while inject_pfc.py pauses `target`,
        then `other`, for 200 ms each; b's capture must show none of b's `target` frames leaving while a
        pause of `target` was in force, and plenty while `other` was paused.

        Every attempt asserts that. What a loaded machine can spoil is the pause itself: the injector (a
        Python process standing in for a switch's hardware) or b's polling core can stall past a pause's
        3.4 ms, so b's pause falls apart into short spans, and "nothing sent while paused" says little.
        Such an attempt is run again, up to three in all, and only the third fails for it."""
        for attempt in range(1, 4):
            covered = self.pfc_attempt(attempt, port_args, tool_args, priority_of, target, other)
            if min(covered) > 0.1:
                return
            print(f"  attempt {attempt}: a pause covered only {1000 * min(covered):.0f} ms of 200: the injector "
                  f"or b stalled; {'again' if attempt < 3 else 'giving up'}", flush=True)
        self.fail(f"three attempts without a pause of more than 100 ms: {covered}")

    def pfc_attempt(self, attempt, port_args, tool_args, priority_of, target, other):
        """One run of check_pfc's, with daemons and files of its own; returns how long b held each of the two
        priorities, in seconds."""
        capture = os.path.join(self.dir.name, f"b{attempt}.pcap")
        with two_namespaces_with_veth() as (ns, veth):
            a = self.daemon(f"a{attempt}", ["--port", f"net_af_packet0,iface={veth[0]}", "--ip", "10.77.0.1", *port_args],
                            netns=ns[0])
            b = self.daemon(f"b{attempt}", ["--port", f"net_af_packet0,iface={veth[1]}", "--ip", "10.77.0.2",
                                             *port_args, "--capture", capture], netns=ns[1])
            for priority in (target, other):
                done = {}
                transfer = threading.Thread(target=lambda: done.update(
                    r=run_pair(TOOL, self.dir.name, a.socket, b.socket, "write", 65536, 20000, extra=tool_args)))
                before = stats(UROCE, b.socket)["queues"]["completions"]
                transfer.start()
                deadline = time.time() + 20
                while stats(UROCE, b.socket)["queues"]["completions"] < before + 300 and time.time() < deadline:
                    time.sleep(0.02)
                out = subprocess.run(inject_pfc(ns[0], veth[0], priority, 200), capture_output=True, text=True,
                                     timeout=60)
                self.assertEqual(out.returncode, 0, out.stderr)
                transfer.join(120)
                result, client_rc, server_rc, err = done["r"]
                self.assertEqual((client_rc, server_rc), (0, 0), err)
                self.assertTrue(result["verified"], result)
            s = stats(UROCE, b.socket)["net"]
            self.assertGreaterEqual(s["pfc_frames_received"], 2 * 150, s)
            self.assertGreater(s["tx_frames_held"], 0, s)
            self.assertGreaterEqual(s["priority_pauses"], 2 * 150, s)
            self.assertEqual(b.stop(), 0, b.read_log())
            a.stop()
        # b's capture: the PFC frames it received and the RoCE frames it sent, in time.
        _, records = pcapfile.read(capture)
        pfc = []   # (time, priority, quanta)
        sent = []  # time of each frame b sent at the target priority
        for sec, nsec, _, f in records:
            t = sec + nsec / 1e9
            if f[12:14] == b"\x88\x08" and f[14:16] == b"\x01\x01":
                p = f[17].bit_length() - 1
                pfc.append((t, p, int.from_bytes(f[18 + 2 * p:20 + 2 * p], "big")))
            elif priority_of(f) == target:
                sent.append(t)
        quantum_s = 65535 * 512 / 10e9  # what each frame holds a priority for: veth says 10 Gb/s
        coverage = []
        for priority in (target, other):
            times = [(t, q) for t, p, q in pfc if p == priority]
            self.assertGreater(len(times), 100, f"priority {priority}: {len(times)} PFC frames captured")
            start, xon = times[0][0], times[-1][0]
            self.assertEqual(times[-1][1], 0)  # the release
            # When b held the priority, by the frames as b received them (its capture's times): each pause runs
            # 65535 quanta from its frame, a refresh renews it, the release ends it. A busy machine can delay
            # the injector past a pause's end: b then rightly sends until the next frame comes.
            held = []
            for t, q in times[:-1]:
                if held and t <= held[-1][1]:
                    held[-1][1] = min(t + quantum_s, xon)
                else:
                    held.append([t, min(t + quantum_s, xon)])
            covered = sum(e - s for s, e in held)
            coverage.append(covered)
            # Not the first millisecond of a span (the frames b queued in the turn the PFC frame came in leave
            # with it), nor its last half (a turn sees the end of a pause at its start: a core shared with
            # other work can make that late, and the capture's clock is not the engine's).
            during = sum(1 for t in sent for s, e in held if s + 0.001 < t < e - 0.0005)
            around = (sum(1 for t in sent if start - 0.2 < t < start), sum(1 for t in sent if xon < t < xon + 0.2))
            print(f"  priority {priority} paused {1000 * covered:.0f} ms of {1000 * (xon - start):.0f} ms ({len(held)} "
                  f"spans): b sent {around[0]} priority-{target} frames in the 200 ms before, {during} while paused, "
                  f"{around[1]} in the 200 ms after", flush=True)
            self.assertTrue(around[0] > 0 and around[1] > 0, around)
            if priority == target:
                self.assertEqual(during, 0)  # whatever the coverage: a frame sent while paused is a failure
            elif covered > 0.1:
                self.assertGreater(during, 100)
        return coverage

    def test_neighbour_and_hostile_frames(self):
        """ARP and ping from a kernel neighbour are answered; bad ICRC, unknown QP, truncated RoCE and junk
        are dropped and counted; the daemon keeps working."""
        with two_namespaces_with_veth() as (ns, veth):
            a, b = self.pair(ns, veth)
            b.stop()  # the injector takes b's end of the cable
            script = os.path.join(os.path.dirname(__file__), "inject_frames.py")
            out = subprocess.run(["ip", "netns", "exec", ns[1], sys.executable, script, veth[1], "10.77.0.99",
                                  "10.77.0.1"], capture_output=True, text=True, timeout=60)
            self.assertEqual(out.returncode, 0, out.stderr)
            r = json.loads(out.stdout)
            s = stats(UROCE, a.socket)
            self.assertTrue(r["arp_reply_mac"], (r, s))
            self.assertTrue(r["ping_replied"], (r, s))
            self.assertEqual(s["net"]["icmp_echo_replied"], 1, s)
            self.assertGreaterEqual(s["device"]["rx_bad_icrc"], r["sent"]["bad_icrc"], s)
            self.assertGreaterEqual(s["device"]["rx_unknown_qp"], r["sent"]["unknown_qp"], s)
            dropped = sum(v for k, v in s["net"].items() if k.startswith("dropped."))
            self.assertGreater(dropped + s["device"]["rx_malformed"], r["sent"]["truncated_roce"] // 2, s)
            self.assertTrue(a.alive(), a.read_log())
            deadline = time.time() + 5  # the rate-limited log line comes at most once a second
            while "dropped frames in the last" not in a.read_log() and time.time() < deadline:
                time.sleep(0.1)
            self.assertIn("dropped frames in the last", a.read_log())
            # Still a working NIC: b comes back on its end of the cable and they talk.
            b = self.daemon("b2", ["--port", f"net_af_packet0,iface={veth[1]}", "--ip", "10.77.0.2"], netns=ns[1])
            self.run_workload("after hostile frames", a.socket, b.socket, [("write", 65536, 200)])

    def test_two_processes_on_one_daemon_of_a_real_port(self):
        """Traffic between two QPs of the same port never leaves it (a NIC's internal loopback, as rxe)."""
        with two_namespaces_with_veth() as (ns, veth):
            a, _ = self.pair(ns, veth)
            before = stats(UROCE, a.socket)["port"]["opackets"]
            self.run_workload("one daemon on veth", a.socket, a.socket, [("write", 65536, 300), ("send", 64, 2000)])
            self.assertLess(stats(UROCE, a.socket)["port"]["opackets"] - before, 10)  # ARP at most

    def test_injected_loss(self):
        with two_namespaces_with_veth() as (ns, veth):
            a, b = self.pair(ns, veth, ["--rx-loss", "0.01", "--loss-seed", "7"])
            self.run_workload("veth 1% loss", a.socket, b.socket,
                              [("write", 65536, 500), ("read", 65536, 500), ("send", 4096, 2000), ("atomic", 8, 1000)])
            sa, sb = stats(UROCE, a.socket), stats(UROCE, b.socket)
            self.assertGreater(sa["engine"]["rx_injected_loss"] + sb["engine"]["rx_injected_loss"], 0)
            self.assertGreater(sa["device"]["tx_retransmitted"] + sb["device"]["tx_retransmitted"], 0)


class Memif(DaemonTestCase):
    """(c): two daemons joined by a memif (shared-memory packet interface)."""

    def test_every_operation(self):
        sock = os.path.join(self.dir.name, "memif.sock")
        a = self.daemon("a", ["--port", f"net_memif0,role=server,socket={sock}", "--ip", "10.78.0.1"])
        b = self.daemon("b", ["--port", f"net_memif0,role=client,socket={sock}", "--ip", "10.78.0.2"])
        self.run_workload("memif", a.socket, b.socket)
        self.assert_clean_counters(a.socket)
        self.assert_clean_counters(b.socket)

    def test_mtu_4200_carries_path_mtu_4096(self):
        """DPDK 22.11's memif driver has no MTU setting (ENOTSUP): --mtu is then the port's own, and a 64 KiB
        WRITE goes in 16 packets of 4096 bytes. Each frame has one memif buffer (bsize): chained 2 KiB
        buffers from the server end arrived as garbage, millions of frames the client never sent (READ)."""
        sock = os.path.join(self.dir.name, "memif.sock")
        a = self.daemon("a", ["--port", f"net_memif0,role=server,socket={sock}", "--ip", "10.78.0.1", "--mtu", "4200"])
        b = self.daemon("b", ["--port", f"net_memif0,role=client,socket={sock}", "--ip", "10.78.0.2", "--mtu", "4200"])
        for d in (a, b):
            self.assertIn("MTU 4200", d.read_log())
        messages = 300
        self.run_workload("memif MTU 4200", a.socket, b.socket, [("write", 65536, messages)])
        s = self.assert_clean_counters(b.socket)
        first_sends = s["device"]["tx_packets"] - s["device"]["tx_retransmitted"]
        self.assertEqual(first_sends, messages * 16, s["device"])  # 64 at path MTU 1024
        # Both directions, the server's READ responses and SENDs too.
        self.run_workload("memif MTU 4200", a.socket, b.socket, [("read", 65536, messages), ("send", 4096, 1000)])
        # Each port's received count against its peer's sent count read after it: the daemons keep sending
        # frames of their own (IPv6 router solicitations, 4 s apart, went out between two reads once).
        sa = self.assert_clean_counters(a.socket)
        sb = self.assert_clean_counters(b.socket)
        sa_after = stats(UROCE, a.socket)
        self.assertLessEqual(sa["port"]["ipackets"], sb["port"]["opackets"], (sa["port"], sb["port"]))
        self.assertLessEqual(sb["port"]["ipackets"], sa_after["port"]["opackets"], (sa_after["port"], sb["port"]))

    def test_peer_daemon_killed_mid_transfer(self):
        """The daemon at the other end of the memif dies (SIGKILL) while frames flow both ways, three times:
        this daemon lives on, and serves the next peer byte-exact. (The driver race such a death can hit,
        an unmap under a running burst, is provoked far more often by the port tests tagged "[memif-race]",
        which poll without pause: 12 kills here without the guard did not crash the daemon.)"""
        sock = os.path.join(self.dir.name, "memif.sock")
        a = self.daemon("a", ["--port", f"net_memif0,role=server,socket={sock}", "--ip", "10.78.0.1"])
        for round in range(3):
            b = self.daemon(f"b{round}", ["--port", f"net_memif0,role=client,socket={sock}", "--ip", "10.78.0.2"])
            oob = os.path.join(self.dir.name, f"oob-peer-{round}")
            common = ["--oob", oob, "--op", "write", "--size", "65536", "--count", "100000000", "--timeout", "30"]
            server = subprocess.Popen([TOOL, "--server", "--socket", a.socket, *common], stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL)
            client = subprocess.Popen([TOOL, "--client", "--socket", b.socket, *common], stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL)
            try:
                deadline = time.time() + 20
                while stats(UROCE, a.socket)["device"]["rx_frames"] < 2000 * (round + 1) and time.time() < deadline:
                    time.sleep(0.02)
                b.proc.send_signal(signal.SIGKILL)
                b.stop()
            finally:
                for p in (client, server):
                    if p.poll() is None:
                        p.kill()
                    p.wait()
            time.sleep(0.5)  # the driver notices the peer is gone on its interrupt thread
            self.assertTrue(a.alive(), f"round {round}: uroced died with its memif peer:\n{a.read_log()[-3000:]}")
        b = self.daemon("b-last", ["--port", f"net_memif0,role=client,socket={sock}", "--ip", "10.78.0.2"])
        self.run_workload("after the peer died", a.socket, b.socket, [("write", 65536, 300), ("send", 4096, 500)])


if __name__ == "__main__":
    UROCED, TOOL, UROCE = sys.argv[1:4]
    unittest.main(argv=sys.argv[:1] + sys.argv[4:], verbosity=2)
