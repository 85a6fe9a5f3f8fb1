"""One process, two uroce devices (two uroced, joined by a cable): what a host with two RoCE ports cabled to
each other gives a program. Runs under /usr/bin/python3 (pyverbs) and uroce-run with two --socket options.

  pyverbs_two_devices.py NAME0 NAME1 GID0 GID1

Checks: the device list is the two devices, in UROCE_SOCKET's order, with different node GUIDs; each
device's GID 0 is its own daemon's address; an RC QP on each, connected to the other, carries a 64 KiB
RDMA WRITE one way (every byte compared) and a SEND the other; each completion once, on its own device.
Prints "two devices: ok" and exits 0, or raises.
"""
import ipaddress
import os
import sys

import pyverbs.device as d
import pyverbs.enums as e

from pyverbs_node import Node


def main():
    names, gids = sys.argv[1:3], sys.argv[3:5]
    listed = d.get_device_list()
    assert [dev.name.decode() for dev in listed] == names, [dev.name for dev in listed]
    guids = {dev.guid for dev in listed}
    assert len(guids) == 2, f"one node GUID for two devices: {guids}"
    a, b = Node(names[0]), Node(names[1])
    mapped = [str(ipaddress.IPv6Address(n.gid).ipv4_mapped) for n in (a, b)]
    assert mapped == gids, (a.gid, b.gid)

    qa, qb = a.create_qp(1), b.create_qp(1)
    a.connect(1, qb["qpn"], b.gid)
    b.connect(1, qa["qpn"], a.gid)

    # A 64 KiB RDMA WRITE from the first device's QP into the second's region: 64 packets at MTU 1024.
    size = 65536
    pattern = os.urandom(size).hex()
    a.reg_mr("src", size)
    a.write("src", 0, pattern)
    dst = b.reg_mr("dst", size)
    a.post_send(1, [{"wr_id": 7, "opcode": e.IBV_WR_RDMA_WRITE, "sges": [["src", 0, size]],
                     "rdma": [dst["rkey"], dst["addr"]]}])
    done = a.poll(1, "send", 1)
    assert [(w["wr_id"], w["status"]) for w in done] == [(7, e.IBV_WC_SUCCESS)], done
    assert b.read("dst", 0, size) == pattern, "the written bytes differ"
    assert b.poll(1, "send", 0) == [] and b.poll(1, "recv", 0) == [], "a completion on the wrong device"

    # A SEND back, into a posted receive.
    a.reg_mr("in", 4096)
    a.post_recv(1, 9, [["in", 0, 4096]])
    b.reg_mr("out", 4096)
    b.write("out", 0, "5a" * 100)
    b.post_send(1, [{"wr_id": 8, "opcode": e.IBV_WR_SEND, "sges": [["out", 0, 100]]}])
    sent, received = b.poll(1, "send", 1), a.poll(1, "recv", 1)
    assert [(w["wr_id"], w["status"]) for w in sent] == [(8, e.IBV_WC_SUCCESS)], sent
    assert [(w["wr_id"], w["status"], w["byte_len"]) for w in received] == [(9, e.IBV_WC_SUCCESS, 100)], received
    assert a.read("in", 0, 100) == "5a" * 100
    print("two devices: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
