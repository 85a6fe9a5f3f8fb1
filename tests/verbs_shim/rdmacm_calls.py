#!/usr/bin/env python3
"""librdmacm calls no rdmacm-utils program makes, called directly through ctypes: run under uroce-run, so
that librdmacm.so.1 is uroce's. Prints one PASS line per check and "ALL PASSED"; the first failure exits 1.

- rdma_migrate_id(id, NULL) makes an ID synchronous (librdmacm gives it a channel of its own): its
  rdma_resolve_addr then returns only once ADDR_RESOLVED came, with the event in id->event; migrating a
  synchronous ID to NULL again is EINVAL; migrating it back to a channel delivers its events there.
- rdma_resolve_addr from a source address with a port binds the ID to that port; a second ID resolved from
  the same address and port fails with EADDRINUSE.
- rdma_join_multicast on an ID with no address is EINVAL; rdma_leave_multicast of a group never joined is
  EADDRNOTAVAIL.
- rdma_get_cm_event blocked on a channel and interrupted by a signal goes on waiting when the handler was
  installed with SA_RESTART, as a read() of the kernel's rdma_cm fd does, and fails with EINTR when it was
  not.

With --ephemeral N it only binds N IDs to ADDRESS and port 0 and prints, as JSON, the ports they took and
the errno name of the first bind that failed, if one did (test_rdmacm.py's port range case).

  uroce-run --socket SOCK python3 rdmacm_calls.py ADDRESS [--ephemeral N]   (ADDRESS: the daemon's IPv4)
"""
import ctypes
import errno
import json
import signal
import socket
import struct
import sys
import threading
import time

RDMA_PS_UDP, RDMA_PS_TCP = 0x0111, 0x0106
RDMA_CM_EVENT_ADDR_RESOLVED = 0
lib = ctypes.CDLL("librdmacm.so.1", use_errno=True)
lib.rdma_create_event_channel.restype = ctypes.c_void_p
lib.rdma_destroy_event_channel.argtypes = [ctypes.c_void_p]
lib.rdma_create_id.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_int]
lib.rdma_destroy_id.argtypes = [ctypes.c_void_p]
lib.rdma_migrate_id.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
lib.rdma_resolve_addr.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
lib.rdma_get_cm_event.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
lib.rdma_ack_cm_event.argtypes = [ctypes.c_void_p]
lib.rdma_join_multicast.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
lib.rdma_leave_multicast.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
lib.rdma_bind_addr.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
lib.rdma_get_src_port.argtypes = [ctypes.c_void_p]
lib.rdma_get_src_port.restype = ctypes.c_uint16


def fail(what):
    print(f"FAIL {what}: errno {ctypes.get_errno()} ({errno.errorcode.get(ctypes.get_errno(), '?')})")
    sys.exit(1)


def sockaddr_in(ip, port=0):
    return ctypes.create_string_buffer(struct.pack("=H", socket.AF_INET) + struct.pack("!H", port) +
                                       socket.inet_aton(ip) + bytes(8), 16)


def new_id(channel, ps=RDMA_PS_TCP):
    cm_id = ctypes.c_void_p()
    if lib.rdma_create_id(channel, ctypes.byref(cm_id), None, ps) != 0:
        fail("rdma_create_id")
    return cm_id


# struct rdma_cm_id (rdma_cma.h, x86-64): verbs, channel, context, qp (8 each), route (struct rdma_route:
# rdma_addr = 128 + 128 + 40, path_rec, num_paths: 312), ps and port_num (8 with padding), then event.
CHANNEL_OFFSET, EVENT_OFFSET = 8, 352


def field(cm_id, offset):
    return ctypes.c_void_p.from_address(cm_id.value + offset).value


class Sigaction(ctypes.Structure):  # glibc's struct sigaction on x86-64
    _fields_ = [("handler", ctypes.c_void_p), ("mask", ctypes.c_ulong * 16), ("flags", ctypes.c_int),
                ("restorer", ctypes.c_void_p)]


SA_RESTART = 0x10000000
libc = ctypes.CDLL(None, use_errno=True)
libc.sigaction.argtypes = [ctypes.c_int, ctypes.POINTER(Sigaction), ctypes.POINTER(Sigaction)]


def interrupted_wait(address, restart):
    """A thread blocks in rdma_get_cm_event on a channel with no event; SIGUSR1 interrupts it. Its handler is
    a libc function that does nothing here (getpid: a Python handler would run on the signal's thread
    without the interpreter's lock), installed with or without SA_RESTART. With it, the call must still be
    waiting after the signal and return the event an rdma_resolve_addr then makes; without it, -1 EINTR."""
    action = Sigaction(ctypes.cast(libc.getpid, ctypes.c_void_p).value, flags=SA_RESTART if restart else 0)
    if libc.sigaction(signal.SIGUSR1, ctypes.byref(action), None) != 0:
        fail("sigaction")
    channel = lib.rdma_create_event_channel()
    result = {}

    def wait():
        ev = ctypes.c_void_p()
        result["rc"] = lib.rdma_get_cm_event(channel, ctypes.byref(ev))
        result["errno"], result["event"] = ctypes.get_errno(), ev.value

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.3)  # in its wait by now
    signal.pthread_kill(waiter.ident, signal.SIGUSR1)
    time.sleep(0.3)
    cm_id = new_id(channel)
    if restart:
        if not waiter.is_alive():
            fail(f"a signal with SA_RESTART ended the wait (rc {result['rc']}, errno {result['errno']})")
        if lib.rdma_resolve_addr(cm_id, None, sockaddr_in(address), 2000) != 0:
            fail("rdma_resolve_addr")
    waiter.join(10)
    if waiter.is_alive():
        fail("the wait did not end")
    if restart and (result["rc"] != 0 or event_type(result["event"]) != RDMA_CM_EVENT_ADDR_RESOLVED):
        fail(f"the wait a signal interrupted did not return the next event (rc {result['rc']})")
    if not restart and (result["rc"] != -1 or result["errno"] != errno.EINTR):
        fail(f"a signal without SA_RESTART: rc {result['rc']}, errno {result['errno']}, not -1 EINTR")
    if restart:
        lib.rdma_ack_cm_event(result["event"])
    lib.rdma_destroy_id(cm_id)
    lib.rdma_destroy_event_channel(channel)


def event_type(event):
    # struct rdma_cm_event: id (8), listen_id (8), event (int)
    return ctypes.c_int.from_address(event + 16).value


def ephemeral_ports(address, count):
    """Binds `count` IDs to `address`, port 0; all stay bound until the process exits."""
    channel = lib.rdma_create_event_channel()
    if not channel:
        fail("rdma_create_event_channel")
    ports, error = [], None
    for _ in range(count):
        cm_id = new_id(channel)
        if lib.rdma_bind_addr(cm_id, sockaddr_in(address)) != 0:
            error = errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
            break
        ports.append(socket.ntohs(lib.rdma_get_src_port(cm_id)))
    print(json.dumps({"ports": ports, "error": error}))


def main():
    address = sys.argv[1]
    if len(sys.argv) == 4 and sys.argv[2] == "--ephemeral":
        ephemeral_ports(address, int(sys.argv[3]))
        return
    channel = lib.rdma_create_event_channel()
    if not channel:
        fail("rdma_create_event_channel")

    cm_id = new_id(channel)
    if field(cm_id, CHANNEL_OFFSET) != channel:
        fail("the layout assumed for struct rdma_cm_id (channel)")
    if lib.rdma_migrate_id(cm_id, None) != 0:
        fail("rdma_migrate_id(id, NULL)")
    own = field(cm_id, CHANNEL_OFFSET)
    if own in (None, channel):
        fail("a synchronous ID has a channel of its own")
    # Synchronous: returns once the event came, and the event is the ID's.
    if lib.rdma_resolve_addr(cm_id, None, sockaddr_in(address), 2000) != 0:
        fail("rdma_resolve_addr on a synchronous ID")
    event = field(cm_id, EVENT_OFFSET)
    if not event or event_type(event) != RDMA_CM_EVENT_ADDR_RESOLVED:
        fail("a synchronous rdma_resolve_addr leaves ADDR_RESOLVED in id->event")
    print("PASS rdma_migrate_id(id, NULL): synchronous, rdma_resolve_addr waits and leaves its event in id->event")

    if lib.rdma_migrate_id(cm_id, None) == 0 or ctypes.get_errno() != errno.EINVAL:
        fail("migrating a synchronous ID to NULL again is EINVAL")
    if lib.rdma_migrate_id(cm_id, channel) != 0:
        fail("rdma_migrate_id back to a channel")
    if field(cm_id, CHANNEL_OFFSET) != channel or field(cm_id, EVENT_OFFSET):
        fail("back on the channel, with no event held")
    if lib.rdma_resolve_addr(cm_id, None, sockaddr_in(address), 2000) != 0:
        fail("rdma_resolve_addr after migrating back")
    ev = ctypes.c_void_p()
    if lib.rdma_get_cm_event(channel, ctypes.byref(ev)) != 0 or event_type(ev.value) != RDMA_CM_EVENT_ADDR_RESOLVED:
        fail("the event comes on the channel the ID was migrated to")
    lib.rdma_ack_cm_event(ev)
    print("PASS rdma_migrate_id back to a channel: EINVAL for NULL twice, events on the new channel")

    # A source address with a port binds the ID to that port, as Linux's rdma_resolve_addr does; a second ID
    # on the same address and port is EADDRINUSE.
    fixed = new_id(channel)
    if lib.rdma_resolve_addr(fixed, sockaddr_in(address, 45123), sockaddr_in(address), 2000) != 0:
        fail("rdma_resolve_addr from port 45123")
    if lib.rdma_get_cm_event(channel, ctypes.byref(ev)) != 0 or event_type(ev.value) != RDMA_CM_EVENT_ADDR_RESOLVED:
        fail("ADDR_RESOLVED for the ID resolved from port 45123")
    lib.rdma_ack_cm_event(ev)
    if socket.ntohs(lib.rdma_get_src_port(fixed)) != 45123:
        fail(f"the ID resolved from port 45123 is on port {socket.ntohs(lib.rdma_get_src_port(fixed))}")
    again = new_id(channel)
    if lib.rdma_resolve_addr(again, sockaddr_in(address, 45123), sockaddr_in(address), 2000) == 0 or (
            ctypes.get_errno() != errno.EADDRINUSE):
        fail("a second ID resolved from the same address and port 45123 is EADDRINUSE")
    print("PASS rdma_resolve_addr from a source port: bound to it, a second ID on it EADDRINUSE")

    ud = new_id(channel, RDMA_PS_UDP)
    if lib.rdma_join_multicast(ud, sockaddr_in("239.1.1.1"), None) == 0 or ctypes.get_errno() != errno.EINVAL:
        fail("rdma_join_multicast with no address is EINVAL")
    if lib.rdma_leave_multicast(ud, sockaddr_in("239.1.1.1")) == 0 or ctypes.get_errno() != errno.EADDRNOTAVAIL:
        fail("rdma_leave_multicast of a group never joined is EADDRNOTAVAIL")
    print("PASS rdma_join_multicast before an address: EINVAL; leaving a group never joined: EADDRNOTAVAIL")

    for i in (cm_id, ud, fixed, again):
        if lib.rdma_destroy_id(i) != 0:
            fail("rdma_destroy_id")
    lib.rdma_destroy_event_channel(channel)

    # Python's own SIGINT handler has no SA_RESTART: with it in place, any signal could be that one.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    interrupted_wait(address, restart=True)
    interrupted_wait(address, restart=False)
    print("PASS rdma_get_cm_event interrupted by a signal: waits on after an SA_RESTART handler, EINTR otherwise")
    print("ALL PASSED")


if __name__ == "__main__":
    main()
