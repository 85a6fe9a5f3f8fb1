"""Which starting PSN each side of an rdma_cm connection sends from, read from a capture with `uroce explain`.

Linux's CM (and so rxe, ConnectX, every Linux host) takes a REQ's starting PSN as the PSN the *passive* side
sends from and a REP's as the one the *active* side sends from: each side announces the PSN it will receive
from. Two copies of uroce that both had it the other way round agreed with each other and interoperated with
nothing (qperf -cm1 against rxe: every packet out of sequence). check() holds a capture to Linux's rule; it
is itself checked against rxe's own rping capture (../shared/captures/10-rdma-cm-rping.pcap)."""
import re
import subprocess

REQ = re.compile(r"CM REQ: (\S+) asks to connect its QP (0x[0-9a-f]+) \(starting PSN (\d+)")
REP = re.compile(r"CM REP: (\S+) accepts with its QP (0x[0-9a-f]+) \(starting PSN (\d+)")
# The first packet of a request the sender starts (not a READ response or an ACK, which carry the other
# side's PSNs): "C  RC SEND of 16 bytes in 1 packet (psn 10914491)", "RC RDMA WRITE ... (psn N)",
# "D  RDMA READ request psn N: ...".
DATA = re.compile(r"^\s*#[\d-]+\s+([A-Z]+)\s+(?:RC (?:SEND|RDMA WRITE)[^(]*\(psn (\d+)|RDMA READ request psn (\d+))",
                  re.M)
FLOW = re.compile(r"^([A-Z]+)\s+(\S+) → (\S+) QP (0x[0-9a-f]+)\s+RC", re.M)


def check(uroce, pcap):
    """Returns the number of connections checked; raises AssertionError on a PSN that breaks the rule."""
    text = subprocess.run([uroce, "explain", pcap], capture_output=True, text=True, check=True).stdout
    flows = {letter: (src, int(qp, 16)) for letter, src, _dst, qp in FLOW.findall(text)}
    first = {}  # (sender ip, destination QP) -> PSN of the first request packet it sent there
    for letter, psn, read_psn in DATA.findall(text):
        if letter in flows:
            first.setdefault(flows[letter], int(psn or read_psn))
    reqs = [(ip, int(qp, 16), int(psn)) for ip, qp, psn in REQ.findall(text)]
    reps = [(ip, int(qp, 16), int(psn)) for ip, qp, psn in REP.findall(text)]
    checked = 0
    for (a_ip, a_qp, req_psn), (p_ip, p_qp, rep_psn) in zip(reqs, reps):
        active_first = first.get((a_ip, p_qp))   # the active side sends to the passive side's QP
        passive_first = first.get((p_ip, a_qp))
        if active_first is not None:
            assert active_first == rep_psn, (f"{a_ip} (active) sent from PSN {active_first}, not the REP's "
                                             f"starting PSN {rep_psn} (REQ's: {req_psn})")
            checked += 1
        if passive_first is not None:
            assert passive_first == req_psn, (f"{p_ip} (passive) sent from PSN {passive_first}, not the REQ's "
                                              f"starting PSN {req_psn} (REP's: {rep_psn})")
            checked += 1
    return checked
