"""uroce's side of a cell, on the host inside the harness's network namespace: a uroced on the veth
"vu" (its own capture, per cell), and programs run against it through uroce-run. Every process is
recorded in the registry and stopped by PID."""
import os
import signal
import subprocess
import time

from registry import record_pid
from vlan import UROCE_VLAN_IP, VLAN_ID, VLAN_PRIORITY

UROCE_IP = "10.99.0.1"
UROCE_IP6 = "fd99::1"  # GID 1 (GID 0 is UROCE_IP); RoCEv2 over IPv6 against rxe (netns.sh)


class Uroced:
    def __init__(self, build, netns, run_dir, cell_dir, capture, log, port_args=("--ip", UROCE_IP, "--ip", UROCE_IP6)):
        self.socket = os.path.join(cell_dir, "uroced.sock")
        self.capture = capture
        self.log = open(log, "w")
        cmd = ["ip", "netns", "exec", netns, os.path.join(build, "emulator", "uroced"),
               "--port", "net_af_packet0,iface=vu", *port_args, "--socket", self.socket,
               "--capture", capture, "--log-level", os.environ.get("INTEROP_UROCED_LOG", "info")]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        record_pid(run_dir, self.proc.pid)
        deadline = time.time() + 60
        while not os.path.exists(self.socket):
            if self.proc.poll() is not None or time.time() > deadline:
                self.stop()
                raise RuntimeError(f"uroced did not start (see {log})")
            time.sleep(0.1)

    def stop(self):
        """SIGTERM (uroced flushes its capture and exits), SIGKILL if it does not within 20 s."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode


class HostJob:
    def __init__(self, side, proc, out_path, limit):
        self.side, self.proc, self.out_path, self.limit = side, proc, out_path, limit

    def wait_listening(self, port, timeout):
        """True once a TCP socket listens on PORT in the namespace (the server is ready for its client)."""
        deadline = time.time() + timeout
        while time.time() < deadline and self.proc.poll() is None:
            ss = subprocess.run(["ip", "netns", "exec", self.side.netns, "ss", "-Hltn", f"sport = :{port}"],
                                capture_output=True, text=True)
            if ss.stdout.strip():
                return True
            time.sleep(0.1)
        return False

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()  # timeout(1) passes it on to the program

    def wait(self, grace=None):
        """(exit status, output). With GRACE, the program is stopped if it has not ended by then."""
        try:
            if grace is not None:
                try:
                    self.proc.wait(grace)
                except subprocess.TimeoutExpired:
                    self.stop()
            rc = self.proc.wait(self.limit + 30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        with open(self.out_path, errors="replace") as f:
            return rc, f.read()


class HostSide:
    """Programs through uroce-run against one uroced, in the namespace."""
    device, gid, gid6 = "uroce0", "0", "1"  # GID 1: UROCE_IP6
    netdev = "vu"  # the kernel interface that holds uroce's address too (netns.sh)
    ip = roce_ip = UROCE_IP
    ip6 = UROCE_IP6
    port_args = ("--ip", UROCE_IP, "--ip", UROCE_IP6)  # the cell's uroced
    sl = None  # no service level named: the programs' default (0)

    def __init__(self, build, netns, run_dir):
        self.uroce_run = os.path.join(build, "verbs_shim", "uroce-run")
        self.netns, self.run_dir = netns, run_dir
        self.daemon = None      # the cell's Uroced
        self.work = run_dir     # the cell's directory
        self.name = "uroce"
        self._n = 0

    @staticmethod
    def script(name):
        return os.path.join(os.path.dirname(os.path.abspath(__file__)), name)

    def start(self, argv, limit, env=None, listen_port=None):
        """Starts ARGV through uroce-run in the namespace, bounded by LIMIT seconds (listen_port: unused
        here, the job's wait_listening asks the namespace)."""
        self._n += 1
        out_path = os.path.join(self.work, f"host-job{self._n}.out")
        out = open(out_path, "w")
        cmd = ["ip", "netns", "exec", self.netns, "timeout", "-k", "5", str(limit),
               self.uroce_run, "--socket", self.daemon.socket, "stdbuf", "-oL", "-eL", *argv]
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd=self.work, env={**os.environ, **(env or {})})
        out.close()
        record_pid(self.run_dir, proc.pid)
        return HostJob(self, proc, out_path, limit)


class HostVlanSide(HostSide):
    """uroce on 802.1Q VLAN 100 (uroced --vlan) with an address of its own there, GID 0; the programs' TCP
    exchange stays with the kernel's untagged address on vu. Its programs name SL 3 (-l, --sl): the priority
    of its RoCE frames; rdma_cm's connections get SL 3 from the same egress QoS map the VM's VLAN device has
    (priority 0, no TOS, to 3)."""
    gid6 = None
    roce_ip = UROCE_VLAN_IP
    port_args = ("--vlan", str(VLAN_ID), "--ip", UROCE_VLAN_IP, "--egress-qos-map", f"0:{VLAN_PRIORITY}")
    sl = VLAN_PRIORITY

    def __init__(self, build, netns, run_dir):
        super().__init__(build, netns, run_dir)
        self.name = "uroce-vlan"
