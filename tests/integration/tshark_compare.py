#!/usr/bin/env python3
"""Compares `uroce dissect --json` with `tshark -T fields`, field by field, on every packet of captures.

tshark is an independent implementation of the InfiniBand/RoCEv2 dissector, so agreement on every field of
every packet of real rxe traffic is strong evidence that uroce's codec reads the wire correctly. Exits
non-zero on any difference, on a RoCE packet seen by only one of the two, or when nothing was compared.

tshark 4.0 specifics handled here (documented, not papered over):
  * it has no FECN/BECN fields: it shows BTH byte 4 as `infiniband.reserved`; FECN is bit 7, BECN bit 6;
  * AtomicETH's VA and R_Key are reported under the RETH field names (infiniband.reth.va / r_key);
  * ImmDt and IETH are byte strings; ImmDt is emitted twice, so only the first occurrence is used;
  * the RPC-over-RDMA heuristic mislabels zero-length SENDs, so that protocol is disabled.
"""
import argparse
import json
import subprocess
import sys

# (tshark field, how to read tshark's text, how to get uroce's value from its JSON object)
def _int(text):
    return int(text, 0)


def _bool(text):
    return text in ("1", "True", "true")


def _hexbytes(text):
    return int(text.replace(":", ""), 16)


def _get(obj, *path):
    for key in path:
        if not isinstance(obj, dict) or key not in obj:
            return None
        obj = obj[key]
    return obj


FIELDS = [
    ("infiniband.bth.opcode", _int, lambda p: _get(p, "bth", "opcode")),
    ("infiniband.bth.se", _bool, lambda p: _get(p, "bth", "se")),
    ("infiniband.bth.m", _bool, lambda p: _get(p, "bth", "migreq")),
    ("infiniband.bth.padcnt", _int, lambda p: _get(p, "bth", "pad_count")),
    ("infiniband.bth.tver", _int, lambda p: _get(p, "bth", "tver")),
    ("infiniband.bth.p_key", _int, lambda p: _get(p, "bth", "pkey")),
    ("infiniband.bth.destqp", _int, lambda p: _get(p, "bth", "dest_qp")),
    ("infiniband.bth.a", _bool, lambda p: _get(p, "bth", "ack_req")),
    ("infiniband.bth.psn", _int, lambda p: _get(p, "bth", "psn")),
    # BTH byte 4: FECN (bit 7), BECN (bit 6), 6 reserved bits.
    ("infiniband.reserved", lambda t: bool(_hexbytes(t) & 0x80), lambda p: _get(p, "bth", "fecn")),
    ("infiniband.reserved", lambda t: bool(_hexbytes(t) & 0x40), lambda p: _get(p, "bth", "becn")),
    ("infiniband.reth.va", _int, lambda p: _get(p, "reth", "va") if "reth" in p else _get(p, "atomic_eth", "va")),
    ("infiniband.reth.r_key", _int,
     lambda p: _get(p, "reth", "rkey") if "reth" in p else _get(p, "atomic_eth", "rkey")),
    ("infiniband.reth.dmalen", _int, lambda p: _get(p, "reth", "dma_length")),
    ("infiniband.aeth.syndrome", _int, lambda p: _get(p, "aeth", "syndrome")),
    ("infiniband.aeth.msn", _int, lambda p: _get(p, "aeth", "msn")),
    ("infiniband.atomiceth.swapdt", _int, lambda p: _get(p, "atomic_eth", "swap_add")),
    ("infiniband.atomiceth.cmpdt", _int, lambda p: _get(p, "atomic_eth", "compare")),
    ("infiniband.atomicacketh.origremdt", _int, lambda p: _get(p, "atomic_ack_eth", "original")),
    ("infiniband.immdt", _hexbytes, lambda p: _get(p, "immdt")),
    ("infiniband.ieth", _hexbytes, lambda p: _get(p, "ieth")),
    ("infiniband.deth.q_key", _int, lambda p: _get(p, "deth", "qkey")),
    ("infiniband.deth.srcqp", _int, lambda p: _get(p, "deth", "src_qp")),
    ("infiniband.mad.mgmtclass", _int, lambda p: _get(p, "mad", "mgmt_class")),
    ("infiniband.mad.attributeid", _int, lambda p: _get(p, "mad", "attribute_id")),
]


# tshark leaves the column empty when one field is requested twice, so each is requested once.
TSHARK_FIELDS = list(dict.fromkeys(f for f, _, _ in FIELDS))


def tshark_rows(tshark, path):
    names = ["frame.number"] + TSHARK_FIELDS
    cmd = [tshark, "-r", path, "--disable-protocol", "rpcordma", "-T", "fields", "-E", "occurrence=f",
           "-E", "separator=\t"]
    for n in names:
        cmd += ["-e", n]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    rows = {}
    for line in out.splitlines():
        cols = line.split("\t")
        if len(cols) != len(names):
            raise SystemExit(f"unexpected tshark line in {path}: {line!r}")
        if cols[1] == "":  # no BTH opcode: not a RoCE packet
            continue
        rows[int(cols[0])] = dict(zip(TSHARK_FIELDS, cols[1:]))
    return rows


def uroce_rows(uroce, path):
    out = subprocess.run([uroce, "dissect", "--json", "--log-level", "warn", path], check=True,
                         capture_output=True, text=True).stdout
    rows = {}
    for line in out.splitlines():
        pkt = json.loads(line)
        if "bth" in pkt:
            rows[pkt["frame"]["number"]] = pkt
    return rows


def compare(uroce, tshark, path):
    return compare_rows(path, tshark_rows(tshark, path), uroce_rows(uroce, path))


def assert_agreement(test, uroce, tshark, path):
    """For a unittest case: tshark and uroce agree on every RoCE field of every packet of `path`, and there
    were RoCE packets, each with more than one field compared."""
    packets, fields, problems = compare(uroce, tshark, path)
    test.assertEqual(problems, [])
    test.assertGreater(packets, 0)
    test.assertGreater(fields, packets)


def comparator_catches_a_difference(uroce, tshark, path):
    """The comparison must be able to fail: change one PSN on uroce's side and expect it to be reported."""
    theirs, ours = tshark_rows(tshark, path), uroce_rows(uroce, path)
    first = min(ours)
    ours[first]["bth"]["psn"] = (ours[first]["bth"]["psn"] + 1) & 0xFFFFFF
    _, _, problems = compare_rows(path, theirs, ours)
    return any("infiniband.bth.psn" in p for p in problems)


def compare_rows(path, theirs, ours):
    problems = []
    for n in sorted(set(theirs) ^ set(ours)):
        problems.append(f"{path} frame {n}: RoCE packet seen by {'tshark' if n in theirs else 'uroce'} only")
    fields = 0
    for n in sorted(set(theirs) & set(ours)):
        pkt = ours[n]
        if not _get(pkt, "icrc", "ok"):
            problems.append(f"{path} frame {n}: uroce reports a bad ICRC")
        for name, read_theirs, read_ours in FIELDS:
            text = theirs[n][name]
            mine = read_ours(pkt)
            if text == "" and mine is None:
                continue  # absent on both sides
            fields += 1
            if text == "" or mine is None:
                problems.append(f"{path} frame {n} {name}: tshark {text!r}, uroce {mine!r}")
            elif read_theirs(text) != mine:
                problems.append(f"{path} frame {n} {name}: tshark {read_theirs(text)!r}, uroce {mine!r}")
    return len(theirs), fields, problems


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--uroce", required=True)
    ap.add_argument("--tshark", default="tshark")
    ap.add_argument("captures", nargs="+")
    args = ap.parse_args()
    total_packets = total_fields = 0
    all_problems = []
    for path in args.captures:
        packets, fields, problems = compare(args.uroce, args.tshark, path)
        print(f"{path}: {packets} RoCE packets, {fields} fields compared, {len(problems)} differences")
        total_packets += packets
        total_fields += fields
        all_problems += problems
    if not comparator_catches_a_difference(args.uroce, args.tshark, args.captures[0]):
        all_problems.append("self-check: a deliberately changed PSN was not reported")
    for p in all_problems[:50]:
        print("DIFF", p)
    print(f"total: {total_packets} RoCE packets, {total_fields} fields compared, {len(all_problems)} differences")
    if total_packets == 0 or total_fields == 0:
        print("nothing was compared")
        return 1
    return 1 if all_problems else 0


if __name__ == "__main__":
    sys.exit(main())
