#!/usr/bin/env python3
"""Writes every frame of the given pcap files into SEED_DIR, one file each: the fuzzer's seed corpus.

Usage: make_seed_corpus.py --work WORK_DIR SEED_DIR CAPTURE...
WORK_DIR (where libFuzzer keeps what it finds) is created too, since libFuzzer requires it to exist.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "integration"))
import pcapfile  # noqa: E402

assert sys.argv[1] == "--work", __doc__
os.makedirs(sys.argv[2], exist_ok=True)
out = sys.argv[3]
os.makedirs(out, exist_ok=True)
n = 0
for path in sys.argv[4:]:
    _, records = pcapfile.read(path)
    for i, (_, _, _, frame) in enumerate(records):
        with open(os.path.join(out, f"{os.path.basename(path)}-{i:04d}"), "wb") as f:
            f.write(bytes(frame))
        n += 1
print(f"{n} seed frames in {out}")
