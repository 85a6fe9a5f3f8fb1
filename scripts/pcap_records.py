"""Reading classic pcap files, in either byte order and at either timestamp resolution (uroced --capture
writes nanosecond ones). The one reader of the interop harness (scripts/interop/capture_check.py) and of the
tests (tests/integration/pcapfile.py, which also writes captures)."""
import pathlib
import struct

MAGICS = {b"\xd4\xc3\xb2\xa1": "<", b"\x4d\x3c\xb2\xa1": "<", b"\xa1\xb2\xc3\xd4": ">", b"\xa1\xb2\x3c\x4d": ">"}


def read(path):
    """(linktype, [(ts_sec, ts_fraction, orig_len, bytearray)]): ts_fraction is micro- or nanoseconds, as
    the file has them. A record cut short by the end of the file is left out."""
    data = pathlib.Path(path).read_bytes()
    order = MAGICS.get(data[:4])
    if order is None or len(data) < 24:
        raise ValueError(f"{path}: not a classic pcap file")
    linktype = struct.unpack(order + "I", data[20:24])[0]
    records, off = [], 24
    while off + 16 <= len(data):
        sec, fraction, caplen, origlen = struct.unpack(order + "IIII", data[off:off + 16])
        if off + 16 + caplen > len(data):
            break
        records.append((sec, fraction, origlen, bytearray(data[off + 16:off + 16 + caplen])))
        off += 16 + caplen
    return linktype, records


def frames(path):
    """The frames alone."""
    return [r[3] for r in read(path)[1]]
