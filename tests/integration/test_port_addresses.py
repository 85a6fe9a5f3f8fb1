#!/usr/bin/env python3
"""A running uroced's port addresses (`uroce address show|add|del`), as `ip address` on a RoCE NIC's netdev:
the GID table changes while the daemon runs, a removed address leaves its entry empty and the next one added
takes it (unless an address handle still names it: then the next free one), every open context gets IBV_EVENT_GID_CHANGE and reads the new table (a pyverbs program that
opened its device before the change), new programs see it (ibv_devinfo), unmodified programs use it
(ibv_rc_pingpong over the new GID, rping binding the new address through rdma_cm), and a removed address
can be bound no more. Bad requests are refused with the reason; as root, so is another user's. As root too,
over veth: the peer daemon reaches a new IPv4 and a new IPv6 address (ARP and neighbour discovery answered
for them; the capture shows the address probed for and announced), and no longer reaches a removed one.

Usage: test_port_addresses.py UROCED UROCE_RUN UROCE
"""
import os
import re
import selectors
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "verbs_shim"))

from daemon_harness import Daemon, DaemonTestCase, is_root, two_namespaces_with_veth  # noqa: E402
from server_client import run_server_client  # noqa: E402
import test_rdmacm  # noqa: E402

UROCED = UROCE_RUN = UROCE = None
PINGPONG_RESULT = re.compile(r"\d+ bytes in [\d.]+ seconds")

# Opens the device, says which GID 1 is, then for each of N async events its type and GID 1 again: the table
# it reads was read at open, so the new entry shows only if the shim reads the table again.
WATCHER = r"""
import sys
from pyverbs.device import Context
ctx = Context(name="uroce0")
def gid1():
    return str(ctx.query_gid(1, 1))
print("ready", gid1(), flush=True)
for _ in range(int(sys.argv[1])):
    ev = ctx.get_async_event()
    print("event", ev.event_type, gid1(), flush=True)
"""
IBV_EVENT_GID_CHANGE = 18

# Holds an address handle from GID argv[1] to the port's GID 0 until a line comes on its stdin.
AH_HOLDER = r"""
import sys
from pyverbs.device import Context
from pyverbs.pd import PD
from pyverbs.addr import AH, AHAttr, GlobalRoute
ctx = Context(name="uroce0")
pd = PD(ctx)
ah = AH(pd, attr=AHAttr(gr=GlobalRoute(dgid=ctx.query_gid(1, 0), sgid_index=int(sys.argv[1])), is_global=1,
                        port_num=1))
print("held", flush=True)
sys.stdin.readline()
"""


def read_line(proc, timeout=30):
    """The next line `proc` prints, or a failure after `timeout` seconds (an event that never came)."""
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout):
            raise AssertionError(f"nothing printed in {timeout} s")
    return proc.stdout.readline()


def address(socket, *args, user=None):
    cmd = [UROCE, "address", "--socket", socket, *args]
    if user is not None:
        cmd = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=30)


class PortAddresses(DaemonTestCase):
    def setUp(self):
        super().setUp()
        self.port = 20000 + os.getpid() % 5000

    def run_shim(self, socket, *cmd, timeout=60):
        return subprocess.run([UROCE_RUN, "--socket", socket, *cmd], capture_output=True, text=True, timeout=timeout)

    def devinfo_gids(self, socket):
        out = self.run_shim(socket, "ibv_devinfo", "-v")
        self.assertEqual(out.returncode, 0, out.stderr)
        return dict(re.findall(r"GID\[\s*(\d+)\]:\s+([^\s,]+)", out.stdout))

    def pingpong(self, a, b, gid_index):
        self.port += 1
        cmd = ["ibv_rc_pingpong", "-p", str(self.port), "-d", "uroce0", "-g", str(gid_index), "-n", "50"]
        r = run_server_client(UROCE_RUN, a, b, cmd, " ".join(cmd), 60, retry_pause=0.1)
        r.assert_both_exited_0()
        self.assertRegex(r.client.stdout, PINGPONG_RESULT)
        return r

    def address_handle(self, socket, sgid_index, dgid_index):
        """Whether an address handle from GID `sgid_index` to the port's own GID `dgid_index` can be made
        (pyverbs, through the shim)."""
        code = ("from pyverbs.device import Context\nfrom pyverbs.pd import PD\n"
                "from pyverbs.addr import AH, AHAttr, GlobalRoute\n"
                "ctx = Context(name='uroce0')\npd = PD(ctx)\n"
                f"gr = GlobalRoute(dgid=ctx.query_gid(1, {dgid_index}), sgid_index={sgid_index})\n"
                "try:\n    AH(pd, attr=AHAttr(gr=gr, is_global=1, port_num=1))\n    print('made')\n"
                "except Exception as e:\n    print('refused', e)\n")
        out = self.run_shim(socket, "/usr/bin/python3", "-c", code)
        self.assertEqual(out.returncode, 0, out.stderr)
        return out.stdout.split()[0]

    def test_add_use_and_remove_an_address_on_a_running_port(self):
        d = self.daemon("lo", [])
        shown = address(d.socket)
        self.assertEqual(shown.returncode, 0, shown.stderr)
        self.assertEqual(shown.stdout.split(), ["GID", "0", "192.0.2.1", "::ffff:192.0.2.1"])

        watcher = subprocess.Popen([UROCE_RUN, "--socket", d.socket, "/usr/bin/python3", "-c", WATCHER, "3"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(watcher.stderr.close)
        self.addCleanup(watcher.stdout.close)
        self.addCleanup(lambda: watcher.poll() is None and (watcher.kill(), watcher.wait()))
        # (pyverbs prints GIDs in full)
        self.assertEqual(read_line(watcher).split(), ["ready", "0000:0000:0000:0000:0000:0000:0000:0000"])

        added = address(d.socket, "add", "192.0.2.7/24")
        self.assertEqual((added.returncode, added.stdout.strip()), (0, "192.0.2.7/24: added as GID 1"), added.stderr)
        self.assertEqual(read_line(watcher).split(),
                         ["event", str(IBV_EVENT_GID_CHANGE), "0000:0000:0000:0000:0000:ffff:c000:0207"])
        self.assertEqual(self.devinfo_gids(d.socket).get("1"), "::ffff:192.0.2.7")
        self.assertIn("GID 1  192.0.2.7/24  ::ffff:192.0.2.7", address(d.socket).stdout)
        # Unmodified programs on the new address: a connected QP over GID 1, and rdma_cm bound to it.
        self.pingpong(d.socket, d.socket, 1)
        test_rdmacm.rping(UROCE_RUN, d.socket, d.socket, "192.0.2.7", "192.0.2.7", 3, 512)
        self.assertEqual(self.address_handle(d.socket, 1, 0), "made")

        # A second one, so that removing the first leaves an empty entry inside the table.
        self.assertIn("added as GID 2", address(d.socket, "add", "fd00:99::77/64").stdout)
        self.assertEqual(read_line(watcher).split(),
                         ["event", str(IBV_EVENT_GID_CHANGE), "0000:0000:0000:0000:0000:ffff:c000:0207"])
        removed = address(d.socket, "del", "192.0.2.7")
        self.assertEqual((removed.returncode, removed.stdout.strip()), (0, "192.0.2.7: removed from GID 1"))
        self.assertEqual(read_line(watcher).split(),
                         ["event", str(IBV_EVENT_GID_CHANGE), "0000:0000:0000:0000:0000:0000:0000:0000"])
        self.assertEqual(watcher.wait(30), 0, watcher.stderr.read())
        self.assertNotIn("1", self.devinfo_gids(d.socket))
        self.assertEqual(self.devinfo_gids(d.socket).get("2"), "fd00:99::77")
        # rdma_cm can bind it no more.
        server = self.run_shim(d.socket, "rping", "-s", "-a", "192.0.2.7", "-C", "1", timeout=30)
        self.assertNotEqual(server.returncode, 0)
        self.assertRegex(server.stdout + server.stderr, r"rdma_bind_addr|Cannot assign requested address")
        # Nothing can be sent from the emptied entry (ibv_create_ah's and ibv_modify_qp's EINVAL, as for any
        # empty GID entry), to an address of either family.
        self.assertEqual(self.address_handle(d.socket, 1, 2), "refused")
        self.assertEqual(self.address_handle(d.socket, 2, 2), "made")
        self.assertEqual(self.address_handle(d.socket, 0, 0), "made")

        # The next address takes the empty entry; the one after it a new one.
        self.assertIn("added as GID 1", address(d.socket, "add", "192.0.2.8").stdout)
        self.assertIn("added as GID 3", address(d.socket, "add", "fd00:99::8/64").stdout)
        self.assertEqual(self.devinfo_gids(d.socket).get("3"), "fd00:99::8")

    def test_an_entry_still_named_is_given_to_no_new_address(self):
        # As Linux's GID cache keeps an entry pending deletion while a QP or address handle holds it: a new
        # address there would move the holder's packets onto it (uroce reads the source at each send).
        d = self.daemon("lo", [])
        self.assertIn("added as GID 1", address(d.socket, "add", "192.0.2.7/24").stdout)
        holder = subprocess.Popen([UROCE_RUN, "--socket", d.socket, "/usr/bin/python3", "-c", AH_HOLDER, "1"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(lambda: holder.poll() is None and (holder.kill(), holder.communicate()))
        self.assertEqual(read_line(holder).strip(), "held")
        self.assertIn("removed from GID 1", address(d.socket, "del", "192.0.2.7").stdout)
        self.assertIn("added as GID 2", address(d.socket, "add", "192.0.2.8").stdout)  # not 1: still named
        self.assertNotIn("1", self.devinfo_gids(d.socket))
        holder.communicate("done\n", timeout=30)  # the process ends, and its address handle with it
        self.assertEqual(holder.returncode, 0)
        self.assertIn("added as GID 1", address(d.socket, "add", "192.0.2.9").stdout)

    def test_the_active_mtu_is_linuxs_whatever_the_addresses(self):
        # IP MTU 1110: Linux's iboe_get_mtu keeps 96 bytes of headers (an IPv6-sized IP header among them),
        # so 512; counting IPv4's header on an IPv4-only port would say 1024, and adding an IPv6 address would
        # then leave a path MTU its packets do not fit.
        d = self.daemon("lo", ["--mtu", "1110"])
        for add in (None, "fd00:77::5"):
            if add:
                self.assertEqual(address(d.socket, "add", add).returncode, 0)
            out = self.run_shim(d.socket, "ibv_devinfo")
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertRegex(out.stdout, r"active_mtu:\s+512 \(2\)", add)
        self.assertIn("fd00:77::5", self.devinfo_gids(d.socket).values())

    def test_bad_requests_are_refused_with_the_reason(self):
        d = self.daemon("lo", [])
        for args, reason in ((["add", "192.0.2.1"], "already the port's"),
                             (["add", "224.0.0.5"], "cannot be a port's address"),
                             (["add", "127.0.0.2"], "cannot be a port's address"),
                             (["add", "::"], "cannot be a port's address"),
                             (["add", "not-an-address"], "is not an address"),
                             (["add", "10.0.0.1/33"], "is not an address"),
                             (["del", "192.0.2.99"], "is not the port's"),
                             (["del", "bogus"], "is not an address")):
            r = address(d.socket, *args)
            self.assertEqual(r.returncode, 1, args)
            self.assertIn(reason, r.stderr, args)
        self.assertEqual(address(d.socket).stdout.split(), ["GID", "0", "192.0.2.1", "::ffff:192.0.2.1"])
        self.assertTrue(d.alive())
        gone = address(os.path.join(self.dir.name, "nobody.sock"), "add", "192.0.2.5")
        self.assertEqual(gone.returncode, 1)

    @unittest.skipUnless(is_root(), "another user's request needs root to run as that user")
    def test_only_root_and_the_daemons_user_may_change_addresses(self):
        d = self.daemon("lo", [])
        os.chmod(self.dir.name, 0o755)
        r = address(d.socket, "add", "192.0.2.9", user=65534)
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("only root and the user uroced runs as", r.stderr)
        shown = address(d.socket, user=65534)  # anyone may look
        self.assertEqual(shown.returncode, 0, shown.stderr)
        self.assertNotIn("192.0.2.9", shown.stdout)

    @unittest.skipUnless(is_root(), "veth pairs in network namespaces need root")
    def test_the_peer_reaches_new_addresses_and_not_removed_ones(self):
        with two_namespaces_with_veth() as (ns, ifs):
            capture = os.path.join(self.dir.name, "va.pcap")
            a = self.daemon("va", ["--port", f"net_af_packet0,iface={ifs[0]}", "--ip", "10.77.0.1/24",
                                   "--ip", "fd00:77::1/64", "--capture", capture], netns=ns[0])
            b = self.daemon("vb", ["--port", f"net_af_packet0,iface={ifs[1]}", "--ip", "10.77.0.2/24",
                                   "--ip", "fd00:77::2/64"], netns=ns[1])
            try:
                self.peer_checks(a, b)
            finally:  # (before the namespaces go)
                a.stop()
                b.stop()
            captured = subprocess.run([UROCE, "dissect", capture], capture_output=True, text=True).stdout
            # Probed for (sender 0.0.0.0) and announced (sender and target itself) once added; the IPv6 one
            # announced by a neighbour advertisement to all-nodes.
            for announced in ("ARP who-has 10.77.0.11 tell 0.0.0.0", "ARP who-has 10.77.0.11 tell 10.77.0.11"):
                self.assertTrue(announced in captured, f"no '{announced}' in {capture}")
            self.assertTrue(re.search(r"fd00:77::11 → ff02::1 +IP protocol 58", captured), f"no NA in {capture}")

    def peer_checks(self, a, b):
        # GIDs: 0 the IPv4 address, 1 the IPv6 one, 2 the link-local one; new ones come after.
        self.assertIn("added as GID 3", address(a.socket, "add", "10.77.0.11/24").stdout)
        self.assertIn("added as GID 3", address(b.socket, "add", "10.77.0.12/24").stdout)
        self.assertIn("added as GID 4", address(a.socket, "add", "fd00:77::11/64").stdout)
        self.assertIn("added as GID 4", address(b.socket, "add", "fd00:77::12/64").stdout)
        # Neither knew the other's new addresses: ARP and neighbour discovery answer for them.
        for gid, peer in ((3, r"::ffff:10\.77\.0\.1[12]"), (4, r"fd00:77::1[12]")):
            r = self.pingpong(a.socket, b.socket, gid)
            self.assertRegex(r.client.stdout, rf"remote address: .* GID {peer}\b")
        # rdma_cm from b to a's new address, and not to one a had for a moment: ARP gets no answer then.
        test_rdmacm.rping(UROCE_RUN, a.socket, b.socket, "10.77.0.11", "10.77.0.2", 3, 512)
        self.assertIn("added as GID 5", address(a.socket, "add", "10.77.0.21/24").stdout)
        self.assertIn("removed from GID 5", address(a.socket, "del", "10.77.0.21").stdout)
        test_rdmacm.rping_nobody_there(UROCE_RUN, b.socket, "10.77.0.21")

    def daemon(self, name, args, netns=None):
        d = Daemon(UROCED, self.dir.name, name, args, netns=netns)
        self.daemons.append(d)
        return d


def main():
    global UROCED, UROCE_RUN, UROCE
    UROCED, UROCE_RUN, UROCE = sys.argv[1:4]
    unittest.main(argv=[sys.argv[0], "-v"])


if __name__ == "__main__":
    main()
