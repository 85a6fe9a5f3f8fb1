"""uroce inside an interop VM, on a PCI NIC: a uroced whose port is the VM's second virtio-net, driven by
DPDK's own PCI driver for it (net_virtio, through uio_pci_generic: pci-port.sh), and programs run against
it through uroce-run in the VM. This is how uroced runs a physical NIC, by its PCI address; the matrix's
"pci" cells put it against the host's uroced (af_packet) over the harness's bridge."""
import os
import time

PCI_ADDRESS = "0000:00:10.0"  # vm.sh: INTEROP_PCI_NIC
PCI_IP = "10.99.0.4"          # netns.sh
PCI_IP6 = "fd99::4"           # netns.sh
PCI_MAC = "52:54:00:99:00:04"  # interop.sh


class GuestUroce:
    device, gid, gid6 = "uroce0", "0", "1"  # GID 1: PCI_IP6
    netdev = None  # its address is on no kernel interface: DPDK has the NIC

    def __init__(self, guest, build):
        self.guest = guest
        self.ip = guest.ip  # the VM's kernel address: TCP (the programs' exchange); RoCE is PCI_IP's
        self.roce_ip = PCI_IP
        self.ip6 = PCI_IP6
        self.name = f"uroce-pci in {guest.name}"
        self.uroced = os.path.join(build, "emulator", "uroced")
        self.uroce_run = os.path.join(build, "verbs_shim", "uroce-run")
        self.socket = "/tmp/uroce-pci.sock"  # in the VM
        self.job = None

    def script(self, name):
        return self.guest.script(name)

    def start_daemon(self, limit, timeout=180):
        """Binds the NIC and starts uroced on it in the VM (for at most LIMIT seconds); returns once it is
        ready. RuntimeError with its output if it is not."""
        self.job = self.guest.start(["sh", self.guest.script("pci-port.sh"), PCI_ADDRESS, self.uroced, PCI_IP,
                                     self.socket, PCI_IP6], limit)
        out_path = os.path.join(self.guest.share, f"{self.job.name}.out")
        deadline = time.time() + timeout
        while time.time() < deadline and not self.job.done():
            out = open(out_path, errors="replace").read() if os.path.exists(out_path) else ""
            if "uroced ready" in out:
                # The port really is the PCI device, run by DPDK's virtio driver, with the NIC's own MAC.
                want = f"port {PCI_ADDRESS} (id 0, driver net_virtio) started: MAC {PCI_MAC}"
                if want not in out:
                    raise RuntimeError(f"uroced in the VM is not on the PCI NIC ({want!r} missing): {out[-600:]}")
                return
            time.sleep(0.2)
        rc, out = self.job.wait(grace=0)
        self.job = None
        raise RuntimeError(f"uroced on the PCI NIC did not start (rc {rc}): {out.strip()[-600:]}")

    def stop_daemon(self):
        """(exit status, output) of the daemon: stopped with SIGTERM, which it must take cleanly."""
        if self.job is None:
            return None, ""
        job, self.job = self.job, None
        return job.wait(grace=0)

    def start(self, argv, limit, env=None, listen_port=None):
        return self.guest.start([self.uroce_run, "--socket", self.socket, *argv], limit, env, listen_port)
