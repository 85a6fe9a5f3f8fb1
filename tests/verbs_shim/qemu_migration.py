"""The `qemu` family of test_setups.py: QEMU's live migration over RDMA. Debian's qemu-system-x86_64 (7.2) is
linked with librdmacm and libibverbs; a destination started with `-incoming rdma:ADDRESS:PORT` listens on
rdma_cm, and `migrate rdma:ADDRESS:PORT` on the source moves the running guest there. QEMU's own upstream
tests run this over Linux rxe; here the two QEMUs run unmodified through uroce-run, the destination
through the server's daemon and the source through the client's.

How QEMU uses RDMA (migration/rdma.c): the migration stream (device state, and QEMU's control messages)
goes as SENDs into receives posted by the other side, which first sends READY to say it posted one. Guest
RAM goes as RDMA WRITEs straight into the destination's guest RAM, merged up to 2 MiB per WRITE. The
destination registers that RAM 1 MiB chunk at a time, as the source asks (REGISTER_REQUEST: the chunk's
rkey comes back), or all of it at once with the `rdma-pin-all` capability. A chunk of pages that hold one
byte value is not written but named in a COMPRESS message.

What a run checks. 32 MiB of random bytes are loaded into the source guest's RAM at 32 MiB (QEMU's generic
loader device), other random bytes into the destination's at the same place. Once the source reports the
migration completed:
- the destination runs, and its guest RAM there (QMP's pmemsave) holds the source's bytes;
- the source's daemon sent at least one packet per path MTU of those bytes;
- both QEMUs then quit cleanly (exit 0) through their daemons.
The guest runs SeaBIOS and nothing else (no disk: it finds nothing to boot), which leaves that RAM alone.

Options of a case: `rdma-pin-all` (the capability, on both sides), `memfd` (guest RAM on a shared memfd,
`memory-backend-memfd,share=on`, as vhost-user needs: uroced then maps it instead of moving its pages) and
`ram=SIZE` (the guest's RAM, 128M by default).

Postcopy over RDMA is not here: see docs/daemon.md, "QEMU's live migration".
"""
import contextlib
import json
import os
import socket
import subprocess
import time

from program_matrix import TIMEOUT, case_option, device_counter, port_address, tcp_port

PAYLOAD_AT = 32 << 20  # guest physical address of the random bytes: above SeaBIOS's low memory, below 128M
PAYLOAD_SIZE = 32 << 20


class Qmp:
    """A client of QEMU's QMP monitor socket: one command at a time; asynchronous events are skipped."""

    def __init__(self, path, process, timeout=TIMEOUT):
        deadline = time.monotonic() + timeout
        while True:  # QEMU creates the socket once it has parsed its options
            try:
                self.sock = socket.socket(socket.AF_UNIX)
                self.sock.settimeout(timeout)
                self.sock.connect(path)
                break
            except (FileNotFoundError, ConnectionRefusedError):
                self.sock.close()
                assert process.poll() is None, f"QEMU exited with {process.returncode} before its monitor was up"
                assert time.monotonic() < deadline, f"no QMP socket at {path} after {timeout} s"
                time.sleep(0.05)
        self.file = self.sock.makefile("rw")
        self._read()  # the greeting
        self("qmp_capabilities")

    def _read(self):
        line = self.file.readline()
        assert line, "QEMU closed its QMP socket"
        return json.loads(line)

    def __call__(self, command, **arguments):
        self.file.write(json.dumps({"execute": command, "arguments": arguments}) + "\n")
        self.file.flush()
        while True:
            reply = self._read()
            if "return" in reply:
                return reply["return"]
            assert "error" not in reply, f"QMP {command}: {reply['error']}"

    def close(self):
        self.file.close()
        self.sock.close()


@contextlib.contextmanager
def qemu(uroce_run, daemon_socket, workdir, name, payload, extra, incoming=()):
    """A QEMU through the daemon behind `daemon_socket`, its guest's RAM holding `payload` at PAYLOAD_AT;
    yields (process, QMP client). Asked to quit on the way out, killed if it does not."""
    qmp_path = os.path.join(workdir, f"{name}.qmp")
    ram = case_option(extra, "ram", "128M")
    memory = ["-object", f"memory-backend-memfd,id=ram,size={ram},share=on",
              "-machine", "memory-backend=ram"] if "memfd" in extra else []
    log = open(os.path.join(workdir, f"{name}.log"), "w")
    process = subprocess.Popen(
        [uroce_run, "--socket", daemon_socket, "qemu-system-x86_64", "-machine", "pc,accel=tcg",
         "-m", ram, *memory, "-nodefaults", "-display", "none",
         "-qmp", f"unix:{qmp_path},server=on,wait=off",
         "-device", f"loader,file={payload},addr={PAYLOAD_AT:#x},force-raw=on", *incoming],
        stdout=log, stderr=subprocess.STDOUT)
    qmp = None
    try:
        qmp = Qmp(qmp_path, process)
        yield process, qmp
        qmp("quit")
        process.wait(timeout=TIMEOUT)
    finally:
        if qmp:
            qmp.close()
        if process.poll() is None:
            process.kill()
            process.wait()
        log.close()


def output(workdir, name):
    with open(os.path.join(workdir, f"{name}.log")) as f:
        return f.read()[-3000:]


def migrate(uroce_run, server_socket, client_socket, workdir, mtu, kind, extra):
    """One migration of a running guest (kind: precopy), source through the client's daemon; the checks
    are in the module's docstring."""
    assert kind == "precopy", kind
    address, port = port_address(uroce_run, server_socket), tcp_port()
    payloads = []
    for side in ("source", "destination"):
        payloads.append(os.path.join(workdir, f"{side}.payload"))
        with open(payloads[-1], "wb") as f:
            f.write(os.urandom(PAYLOAD_SIZE))
    sent_before = device_counter(uroce_run, client_socket, "tx_packets")
    what = " ".join([kind, *extra])
    with qemu(uroce_run, server_socket, workdir, "destination", payloads[1], extra,
              ["-incoming", f"rdma:{address}:{port}"]) as (dst, dst_qmp), \
            qemu(uroce_run, client_socket, workdir, "source", payloads[0], extra) as (src, src_qmp):
        try:
            # Listening (QEMU's dest init runs before its main loop serves QMP) and waiting for the source.
            assert dst_qmp("query-status")["status"] == "inmigrate"
            if "rdma-pin-all" in extra:
                for q in (src_qmp, dst_qmp):
                    q("migrate-set-capabilities", capabilities=[{"capability": "rdma-pin-all", "state": True}])
            # QEMU's default bandwidth limit (128 MiB/s) would time QEMU, not the network.
            src_qmp("migrate-set-parameters", **{"max-bandwidth": 8 << 30})
            src_qmp("migrate", uri=f"rdma:{address}:{port}")
            deadline = time.monotonic() + TIMEOUT
            while (state := src_qmp("query-migrate"))["status"] not in ("completed", "failed", "cancelled"):
                assert time.monotonic() < deadline, f"{what}: migration not done after {TIMEOUT} s: {state}"
                time.sleep(0.05)
            assert state["status"] == "completed", f"{what}: migration {state['status']}: {state}"
            status = dst_qmp("query-status")["status"]
            assert status == "running", f"{what}: the destination is {status} after the migration"
            saved = os.path.join(workdir, "destination.ram")
            dst_qmp("pmemsave", val=PAYLOAD_AT, size=PAYLOAD_SIZE, filename=saved)
            with open(saved, "rb") as got, open(payloads[0], "rb") as want:
                assert got.read() == want.read(), f"{what}: the destination's guest RAM at {PAYLOAD_AT:#x} " \
                    f"does not hold the source's {PAYLOAD_SIZE >> 20} MiB"
        except AssertionError as e:
            raise AssertionError(f"{e}\n--- source\n{output(workdir, 'source')}"
                                 f"--- destination\n{output(workdir, 'destination')}") from None
    for side, process in (("source", src), ("destination", dst)):
        assert process.returncode == 0, f"{what}: the {side} QEMU exited with {process.returncode}:\n" \
            f"{output(workdir, side)}"
    sent = device_counter(uroce_run, client_socket, "tx_packets") - sent_before
    packets = -(-PAYLOAD_SIZE // mtu)
    assert sent >= packets, f"{what}: the source's daemon sent {sent} packets for {packets} of guest RAM"
    ram = state["ram"]
    return f"{ram['transferred'] >> 20} MiB in {state['total-time']} ms ({ram['mbps']:.0f} Mb/s), " \
        f"downtime {state['downtime']} ms, {sent} packets"


class Qemu:
    name = "qemu"
    programs = ("qemu-system-x86_64",)

    @staticmethod
    def ci(setup, mtu):
        cases = [("precopy", [])]
        if setup == "loopback":
            cases += [("precopy", ["rdma-pin-all"]), ("precopy", ["memfd"])]
        return cases

    @staticmethod
    def full(setup, mtu):
        return [("precopy", [*pin, *memfd, *ram]) for pin in ([], ["rdma-pin-all"]) for memfd in ([], ["memfd"])
                for ram in ([], ["ram=1G"])]

    @staticmethod
    @contextlib.contextmanager
    def session(uroce_run, server_socket, client_socket, workdir, mtu):
        yield lambda kind, extra: migrate(uroce_run, server_socket, client_socket, workdir, mtu, kind, extra)
