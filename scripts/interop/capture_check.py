"""A cell's capture through `uroce dissect` (every frame parsed, every ICRC checked), `uroce check` (the
protocol's rules: opcode sequences, payload sizes, WRITE and READ lengths) and `uroce explain`
(retransmissions, NAKs and RNR NAKs per flow, CM REJ reasons). A capture fails the cell if any frame has a
bad ICRC or fails to parse, if either side broke a rule, if the file is damaged, or if it holds no RoCE
traffic at all. It also counts
the RoCE frames carried over IPv6, for the cells that must use it, and reads the evidence for either side
of the pingpongs' exit race and of a lost DREQ. The VLAN cells' captures are checked for their tags too (check_vlan)."""
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import pcap_records  # noqa: E402

SUMMARY = re.compile(r"(\d+) frames: (\d+) RoCE \((\d+) with a bad ICRC\), (\d+) malformed")
REJ = re.compile(r"CM REJ: .* rejects the connection \(reason (\d+)")
# A retransmitted message is one line, "#first-last  B  retransmitted ... (psn 10..53)"; its last PSN counts.
RETRANSMITTED = re.compile(r"^\s*#[\d-]+\s+(\S+)\s+retransmitted .*\(psn (\d+)(?:\.\.(\d+))?\)")
ACK = re.compile(r"^\s*#[\d-]+\s+(\S+)\s+ACK up to psn (\d+)")
# A RoCE frame's line in `uroce dissect`: "N  TIME  SRC → DST  ... ICRC ok|BAD"; SRC is an IP address.
ROCE_LINE = re.compile(r"^\s*\d+\s+[\d.]+\s+(\S+) → \S+\s.*\bICRC\b")
# A request packet's line: its source, opcode and PSN (responses and ACKs do not match).
REQUEST_LINE = re.compile(r"^\s*\d+\s+[\d.]+\s+(\S+) → \S+\s+(?:RC|UC)\s+"
                          r"(SEND_\S+|RDMA_WRITE_\S+|RDMA_READ_REQUEST|COMPARE_SWAP|FETCH_ADD)\s.*\bpsn (\d+)")


# A CM MAD's line in `uroce dissect`: its source and message ("... MAD CM DREQ  ICRC ok").
CM_LINE = re.compile(r"^\s*\d+\s+[\d.]+\s+(\S+) → \S+\s.*\bMAD CM (\w+)\b")


def cm_messages(dissect_text):
    """The capture's CM messages in order, as (source address, message) pairs: ("10.99.0.2", "DREQ")."""
    return [(m.group(1), m.group(2)) for line in dissect_text.splitlines() if (m := CM_LINE.match(line))]


def last_request_answered(dissect_text):
    """Whether the capture ends with a request resent to a peer that had already answered it with a new
    message of its own: the capture's last request packet repeats an earlier one, and after that one's
    first transmission the other side sent a request with a PSN it had never sent before. In a ping-pong
    (ibv_*_pingpong, perftest's latency tests) the peer sends its next message only once it has received
    ours, so the peer had our request; only its ACK was lost."""
    requests = [(m.group(1), int(m.group(3))) for line in dissect_text.splitlines() if (m := REQUEST_LINE.match(line))]
    if not requests:
        return False
    src, psn = requests[-1]
    first = requests.index((src, psn))
    if first == len(requests) - 1:
        return False  # sent once: not a retransmission
    seen = {r for r in requests[:first + 1] if r[0] != src}
    return any(r[0] != src and r not in seen for r in requests[first + 1:])


def read_explain(text):
    """What `uroce explain` says: retransmissions, NAKs and RNR NAKs (its flow table), the reasons of CM
    REJs, and whether the last retransmission had been ACKed."""
    r = {"retrans": 0, "naks": 0, "rnr": 0, "rej_reasons": [], "last_retransmission_acked": False}
    in_flows = False
    last_retransmission, acked = None, set()  # (flow, psn); ACKed PSNs per flow letter
    for line in text.splitlines():
        rej = REJ.search(line)
        if rej:
            r["rej_reasons"].append(int(rej.group(1)))
        m = RETRANSMITTED.match(line)
        if m:
            last_retransmission = (m.group(1), int(m.group(3) or m.group(2)))
        m = ACK.match(line)
        if m:
            acked.add((m.group(1), int(m.group(2))))
        if line.startswith("Flows"):
            in_flows = True
            continue
        words = line.split()
        if in_flows and len(words) > 10 and all(w.isdigit() for w in words[-10:]):
            _, _, _, retrans, _, _, naks, rnr, _, _ = map(int, words[-10:])
            r["retrans"] += retrans
            r["naks"] += naks
            r["rnr"] += rnr
    # The capture's last retransmission repeats a request whose ACK is in the capture (the other flow ACKed
    # that PSN or a later one): the request arrived and was answered, the answer was lost on the way back.
    if last_retransmission:
        flow, psn = last_retransmission
        r["last_retransmission_acked"] = any(f != flow and (p - psn) % (1 << 24) < (1 << 23) for f, p in acked)
    return r


def rule_violations(uroce, pcap):
    """`uroce check`'s violations other than bad ICRCs and malformed frames (which dissect reports), as
    "rule at frame N: what" lines."""
    c = subprocess.run([uroce, "check", "--json", pcap], capture_output=True, text=True, timeout=300)
    try:
        report = json.loads(c.stdout)
    except ValueError:
        return [f"uroce check failed (rc {c.returncode}): {c.stderr.strip()[-300:]}"]
    return [f"{v['rule']} at frame {v['frame']}: {v['text']}" for v in report["violations"]
            if v["rule"] not in ("bad_icrc", "malformed")]


def check(uroce, pcap):
    r = {"ok": False, "frames": 0, "roce": 0, "roce_ipv6": 0, "bad_icrc": 0, "malformed": 0, "error": None,
         "violations": [], "last_request_answered": False, "cm": [], **read_explain("")}
    d = subprocess.run([uroce, "dissect", pcap], capture_output=True, text=True, timeout=300)
    m = SUMMARY.search(d.stderr)
    if not m:
        r["error"] = f"uroce dissect failed (rc {d.returncode}): {d.stderr.strip()[-300:]}"
        return r
    r["frames"], r["roce"], r["bad_icrc"], r["malformed"] = map(int, m.groups())
    r["roce_ipv6"] = sum(1 for line in d.stdout.splitlines() if (f := ROCE_LINE.match(line)) and ":" in f.group(1))
    r["last_request_answered"] = last_request_answered(d.stdout)
    r["cm"] = cm_messages(d.stdout)
    e = subprocess.run([uroce, "explain", pcap], capture_output=True, text=True, timeout=300)
    r.update(read_explain(e.stdout))
    r["violations"] = rule_violations(uroce, pcap)
    if d.returncode != 0:
        r["error"] = f"uroce dissect exit status {d.returncode} (damaged capture?)"
    elif r["bad_icrc"] or r["malformed"]:
        r["error"] = f"{r['bad_icrc']} frames with a bad ICRC, {r['malformed']} malformed"
        bad = [l for l in d.stdout.splitlines() if "BAD" in l or "MALFORMED" in l]
        r["error"] += ": " + " | ".join(bad[:3])
    elif r["violations"]:
        r["error"] = f"{len(r['violations'])} protocol rules broken (uroce check): " + " | ".join(r["violations"][:3])
    elif r["roce"] == 0:
        r["error"] = "no RoCE frames captured"
    else:
        r["ok"] = True
    return r


def check_vlan(pcap, vid, sides, want_priority, datagram_priority=None):
    """A VLAN cell's capture: every RoCE frame (IPv4) and every ARP frame for or from one of `sides`'
    addresses ({ip: name}) must be tagged `vid`, every RoCE frame must come from one of them, both must
    have sent RoCE, and the names in `want_priority` ({name: pcp}) must have sent with that priority only;
    but a name in `datagram_priority` ({name: pcp}) sends its UD datagrams (SEND_ONLY, not to QP1) with that
    one. The capture may hold other frames (uroced's holds everything its port saw: untagged traffic of the
    kernel that shares its interface too). {"error": None or why, "priorities": {name: set of PCPs}}."""
    datagram_priority = datagram_priority or {}
    priorities = {name: set() for name in sides.values()}
    wrong = []  # (name, pcp, what) of frames at another priority than wanted
    for f in pcap_records.frames(pcap):
        tagged = f[12:14] == b"\x81\x00"
        tag, l3 = (int.from_bytes(f[14:16], "big"), 18) if tagged else (None, 14)
        ethertype = f[l3 - 2:l3]
        roce = (ethertype == b"\x08\x00" and len(f) >= l3 + 24 and f[l3 + 9] == 17 and
                int.from_bytes(f[l3 + 22:l3 + 24], "big") == 4791)
        arp_ips = {".".join(map(str, f[l3 + o:l3 + o + 4])) for o in (14, 24)} if ethertype == b"\x08\x06" else set()
        if not roce and not arp_ips & sides.keys():
            continue
        if tag is None or tag & 0xFFF != vid:
            return {"error": f"a {'RoCE' if roce else 'ARP'} frame not on VLAN {vid}: {f[:l3 + 20].hex()}",
                    "priorities": priorities}
        if roce:
            src = ".".join(map(str, f[l3 + 12:l3 + 16]))
            if src not in sides:
                return {"error": f"RoCE from {src}, none of {sorted(sides)}", "priorities": priorities}
            name, pcp = sides[src], tag >> 13
            priorities[name].add(pcp)
            bth = l3 + 20 + 8  # (RoCE v2 sends no IPv4 options)
            datagram = (len(f) >= bth + 8 and f[bth] in (0x64, 0x65) and
                        int.from_bytes(f[bth + 5:bth + 8], "big") != 1)
            want = datagram_priority.get(name) if datagram else None
            want = want if want is not None else want_priority.get(name)
            if want is not None and pcp != want:
                wrong.append((name, pcp, "datagram" if datagram else "frame"))
    error = None
    if not all(priorities.values()):
        error = "no RoCE from " + ", ".join(n for n, p in priorities.items() if not p)
    elif wrong:
        want = {**want_priority, **{f"{n}'s datagrams": p for n, p in datagram_priority.items()}}
        error = f"RoCE priorities on VLAN {vid}: {priorities} (want {want}; first off: {wrong[0]})"
    return {"error": error, "priorities": priorities}
