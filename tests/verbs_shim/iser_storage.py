"""The `iser` family of test_setups.py: iSCSI over RDMA (iSER, RFC 7145) between two unmodified storage
programs from Debian's packages, each through uroce-run. The target is tgt's daemon (tgtd 1.0.85, the Linux
SCSI target framework in user space, with its iser driver on rdma_cm and verbs) serving one logical unit
backed by a file, through the server's daemon; the initiator is libiscsi (1.19), through the client's:
  - iscsi-test-cu, libiscsi's SCSI conformance suite, one suite per case (-d: the destructive tests too);
  - iscsi-perf, libiscsi's read benchmark.

How iSER uses the NIC: each iSCSI PDU (login, commands, responses) is a SEND into a receive the other side
posted, behind a 28-byte iSER header that names the initiator's buffers by address and rkey. The target
moves the data itself: a READ's data with RDMA WRITEs into the initiator's buffer, a WRITE's with RDMA READs
from it. So every data byte of a case crosses uroce as RDMA, in the direction of the command.

What a case checks:
  - a suite: iscsi-test-cu exits 0, ran every test of the suite and none failed (CUnit's summary). Its
    assertions include byte comparisons across the network both ways: the Verify and WriteVerify suites send
    data back to the target, which compares it with its medium (BYTCHK) and must answer GOOD, and MISCOMPARE
    where the test changed one byte; CompareAndWrite does the same in one command. The logical unit holds
    random bytes, so bytes moved wrongly in either direction fail them.
  - iscsi-perf: exits 0 after its run, and the target's daemon sent at least one second of its reported
    rate in packets (the data went over uroce).
  - every case: both daemons sent packets during it, and tgtd still runs.

Suites left out, each for a reason of tgt's or libiscsi's own (docs/daemon.md, "iSCSI over RDMA"): those
that fail over TCP too (PrinServiceactionRange), those in which libiscsi's iSER transport takes a command's
allocation length for the length of the data returned, the residual the target reports notwithstanding
(Inquiry, ModeSense6), and those that crash libiscsi 1.19's iSER transport in the initiator itself (the Async tests of Read10 and Write10, ReadDefectData10/12, GetLBAStatus, Reserve6,
ProutReserve, ExtendedCopy). Nor does iscsi-perf read more than 512 blocks (256 KiB) at once: libiscsi's
iSER transport refuses a larger command ("supports messages smaller than 512k") and then frees a buffer
twice. tgt 1.0.85's iser driver also refuses a login unless an initiator name is on
the target's list as well as an address (its TCP driver takes either): scripts/interop/iser_target.sh, which
sets the target up, binds both.
"""
import contextlib
import os
import re
import socket as socketlib
import subprocess
import time

from daemon_harness import is_root
from program_matrix import TIMEOUT, device_counter, port_address, tcp_port
from programs import ISCSI_PERF_AVERAGE  # as the interop matrix's iSER row reads it

TARGET = "iqn.2026-12.dev.uroce:lun"
INITIATORS = ("iqn.2026-12.dev.uroce:initiator-1", "iqn.2026-12.dev.uroce:initiator-2")  # the suites' -i, -I
LUN_MIB = 64
TARGET_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "interop",
                             "iser_target.sh")

SUITE_SUMMARY = re.compile(r"^\s+tests\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)", re.M)


@contextlib.contextmanager
def tgtd(uroce_run, socket, workdir):
    """tgtd through the daemon behind `socket`, with one iSER target whose LUN 1 is a file of LUN_MIB MiB of
    random bytes, as scripts/interop/iser_target.sh serves the interop matrix's iSER row (it says why the iSER
    port is 3260, in the server daemon's own rdma_cm port space); yields (the script's process, the iSER
    port). Its control socket and readiness portal take a port of their own, so that nothing else on the
    machine is in the way. Stopped by PID (SIGTERM: the script kills tgtd, which ignores it while it serves a
    target)."""
    control = int(tcp_port())
    log = open(os.path.join(workdir, "tgtd.log"), "w")
    process = subprocess.Popen([os.path.abspath(uroce_run), "--socket", socket, TARGET_SCRIPT, str(control), TARGET, *INITIATORS],
                               stdout=log, stderr=subprocess.STDOUT, cwd=workdir,
                               env={**os.environ, "ISER_LUN_MIB": str(LUN_MIB)})
    try:
        deadline = time.monotonic() + TIMEOUT
        while not listening(control):
            assert process.poll() is None, f"tgtd's script exited with {process.returncode}:\n{tgtd_log(workdir)}"
            assert time.monotonic() < deadline, f"tgtd's target is not ready:\n{tgtd_log(workdir)}"
            time.sleep(0.1)
        yield process, 3260
    finally:
        process.terminate()
        try:
            process.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def listening(port):
    """Whether a TCP socket listens on 127.0.0.1:port (the script's signal that the target is ready)."""
    with contextlib.suppress(OSError), socketlib.create_connection(("127.0.0.1", port), timeout=1):
        return True
    return False


def tgtd_log(workdir):
    with open(os.path.join(workdir, "tgtd.log")) as f:
        return f.read()[-3000:]


def iser_url(address, port):
    return f"iser://{address}:{port}/{TARGET}/1"


def run_case(uroce_run, server_socket, client_socket, workdir, mtu, target, url, program, extra):
    """One suite of iscsi-test-cu (`program` names it) or one iscsi-perf run; the checks are in the module's
    docstring."""
    sent_before = [device_counter(uroce_run, s, "tx_packets") for s in (server_socket, client_socket)]
    if program == "iscsi-perf":
        seconds = 2
        command = ["iscsi-perf", "-i", INITIATORS[0], *extra, "-t", str(seconds), url]
    else:
        command = ["iscsi-test-cu", "-d", "-n", "-i", INITIATORS[0], "-I", INITIATORS[1], f"--test={program}", url]
    done = subprocess.run([uroce_run, "--socket", client_socket, *command], capture_output=True, text=True,
                          timeout=TIMEOUT)
    out = done.stdout + done.stderr
    what = " ".join([program, *extra])
    assert target.poll() is None, f"{what}: tgtd exited with {target.returncode}:\n{tgtd_log(workdir)}"
    assert done.returncode == 0, f"{what}: rc {done.returncode}:\n{out[-3000:]}\n--- tgtd\n{tgtd_log(workdir)}"
    sent = [device_counter(uroce_run, s, "tx_packets") - b for s, b in zip((server_socket, client_socket), sent_before)]
    assert all(n > 0 for n in sent), f"{what}: the daemons sent {sent} packets (target's, initiator's)"
    if program == "iscsi-perf":
        m = ISCSI_PERF_AVERAGE.findall(out)
        assert "finished." in out and m, f"{what}: no final average:\n{out[-3000:]}"
        iops, mb_per_s = map(int, m[-1])
        assert sent[0] >= mb_per_s * 1e6 / mtu, f"{what}: the target's daemon sent {sent[0]} packets at " \
            f"{mb_per_s} MB/s reported"
        return f"{iops} IOPS, {mb_per_s} MB/s, {sent[0]} packets from the target"
    m = SUITE_SUMMARY.search(out)
    assert m, f"{what}: no CUnit summary:\n{out[-3000:]}"
    total, ran, passed, failed = map(int, m.groups())
    assert total > 0 and ran == total and passed == ran and failed == 0, \
        f"{what}: {total} tests, {ran} ran, {passed} passed, {failed} failed:\n{out[-3000:]}"
    return f"{passed} of {total} tests passed, {sent[0]} + {sent[1]} packets"


# Suites that pass over tgt's TCP driver and its iser driver alike (see the module's docstring for the rest).
SUITES = ("CompareAndWrite", "Mandatory", "NoMedia", "OrWrite", "Prefetch10", "Prefetch16", "PreventAllow",
          "PrinReadKeys", "PrinReportCapabilities", "ProutRegister", "ProutClear", "ProutPreempt", "Read6",
          "Read12", "Read16", "ReadCapacity10", "ReadCapacity16", "ReadOnly", "ReceiveCopyResults",
          "ReportSupportedOpcodes", "Sanitize", "StartStopUnit", "TestUnitReady", "Unmap", "Verify10",
          "Verify12", "Verify16", "Write12", "Write16", "WriteAtomic16", "WriteSame10", "WriteSame16",
          "WriteVerify10", "WriteVerify12", "WriteVerify16", "MultipathIO")


class Iser:
    name = "iser"
    programs = ("tgtd", "tgtadm", "iscsi-test-cu", "iscsi-perf")

    @staticmethod
    def ci(setup, mtu):
        # tgtd's control socket lives in /run/tgtd, which only root may create.
        if not is_root():
            return []
        cases = [(f"SCSI.{s}", []) for s in ("Verify16", "WriteVerify16", "CompareAndWrite", "Read16", "Write16")]
        return cases + [("iscsi-perf", ["-b", "128", "-m", "16"])]

    @staticmethod
    def full(setup, mtu):
        if not is_root():
            return []
        return [(f"SCSI.{s}", []) for s in SUITES] + [("iscsi-perf", ["-b", str(b), "-m", str(m)])
                                                      for b in (8, 128, 512) for m in (1, 16)]

    @staticmethod
    @contextlib.contextmanager
    def session(uroce_run, server_socket, client_socket, workdir, mtu):
        with tgtd(uroce_run, server_socket, workdir) as (target, port):
            url = iser_url(port_address(uroce_run, server_socket), port)
            yield lambda program, extra: run_case(uroce_run, server_socket, client_socket, workdir, mtu, target,
                                                  url, program, extra)
