#!/usr/bin/python3
"""Runs the interop matrix between uroce and Linux Soft-RoCE (rxe) in the VM(s) that interop.sh booted,
and writes it as Markdown; its "pci" column runs uroce in the VM on a PCI NIC driven by DPDK's own driver
(guest_uroce.py) against the host's uroce. Each cell: a server and a client of one program, on fresh
daemons, with or without loss; its traffic captured (uroced --capture, or tcpdump on the bridge for
rxe<->rxe) and checked by capture_check. A cell passes when both programs exit 0, the output holds a result and the capture is
clean.

  matrix.py --run DIR --netns NS --build BUILD --out FILE [--full] [--cells SUBSTRING,...]
"""
import argparse
import datetime
import os
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from capture_check import check, check_vlan  # noqa: E402
from guest import Guest, GuestVlan  # noqa: E402
from guest_uroce import GuestUroce  # noqa: E402
from host import HostSide, HostVlanSide, Uroced  # noqa: E402
from programs import BUILD, PROGRAMS  # noqa: E402
from registry import record_pid  # noqa: E402
from vlan import UROCE_VLAN_IP, VLAN_GUEST_IP, VLAN_ID, VLAN_PRIORITY  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
LOSS = 5
# Directions: (column title, client side, server side). "uroce" = the host through uroced; "vm0", "vm1" = rxe.
DIRECTIONS = {
    "uroce-client": ("uroce client → rxe server", "uroce", "vm0"),
    "uroce-server": ("rxe client → uroce server", "vm0", "uroce"),
    "control": ("rxe ↔ rxe (control)", "vm0", "vm1"),
    "pci": ("uroce on a PCI NIC (DPDK net_virtio, in the VM) → uroce server", "vm0-pci", "uroce"),
    "vlan-client": (f"on VLAN {VLAN_ID}: uroce client → rxe server", "uroce-vlan", "vm0-vlan"),
    "vlan-server": (f"on VLAN {VLAN_ID}: rxe client → uroce server", "vm0-vlan", "uroce-vlan"),
}
PCI_DAEMON_LIMIT = 7200  # the VM's uroced lives for the whole matrix; stopped at its end
CM_LISTEN_WAIT = 2  # seconds an rdma_cm-only server gets to listen (4x in the TCG guest): programs.py cm_only
STOPPED = (124, 137, 143, -15, -9)  # exit statuses of a program the harness (or its timeout) stopped
CI_CELLS = [("ibv_rc_pingpong", "uroce-client", 0), ("ibv_rc_pingpong", "uroce-server", 0),
            ("ib_write_bw", "uroce-client", LOSS), ("ibv_rc_pingpong", "vlan-client", 0),
            ("ib_write_bw", "vlan-server", 0), ("ibv_rc_pingpong", "pci", 0), ("ib_write_bw", "pci", 0),
            ("ucx_perftest tag_bw 1 MiB", "uroce-server", 0), ("fi_pingpong verbs;ofi_rxm rdm", "uroce-server", 0),
            ("ucp sockaddr (rdmacm)", "uroce-client", 0), ("fio rdma read 64 KiB", "uroce-client", 0),
            ("iSER: iscsi-perf 64 KiB → tgtd", "uroce-server", 0)]


def on_vlan_column(name):
    """The VLAN columns run over IPv4 the programs that name their GIDs and SL (the pingpongs, perftest,
    pyverbs_peer), and rping and udaddy, which name neither: rdma_cm resolves the VLAN address and gives the
    connection the SL of its TOS through the egress map, as rxe's VLAN device has it (HostVlanSide). Not the
    rsockets programs or qperf, whose TCP cannot reach uroce's VLAN address, or mckey (multicast is
    another matter)."""
    return name.startswith(("ibv_", "ib_", "pyverbs", "rping", "udaddy")) and not name.endswith("(IPv6)")


def full_cells():
    cells = []
    for loss in (0, LOSS):
        for name in PROGRAMS:
            if loss and not PROGRAMS[name].lossy:
                continue
            for direction in DIRECTIONS:
                if direction == "pci" and ((loss and name != "ib_write_bw") or PROGRAMS[name].needs_netdev):
                    continue  # the PCI column shows the port works; loss recovery is the other columns'
                if direction.startswith("vlan") and (loss or not on_vlan_column(name)):
                    continue  # the VLAN columns show the tagged frames work both ways
                cells.append((name, direction, loss))
    return cells


class Cell:
    def __init__(self, name, direction, loss):
        self.name, self.direction, self.loss = name, direction, loss
        self.ok, self.result, self.notes, self.capture, self.seconds = False, None, [], None, 0.0
        self.info = []  # remarks on a cell that passed
        self.listen_race = False  # failed only because a REQ beat qperf's rdma_listen (programs.py)

    def slug(self):
        return re.sub(r"[^a-z0-9]+", "-", f"{self.name}-{self.direction}-loss{self.loss}".lower()).strip("-")


class Runner:
    def __init__(self, args):
        self.args = args
        self.uroce = os.path.join(args.build, "pcap_tools", "uroce")
        self.host = HostSide(args.build, args.netns, args.run)
        self.host_vlan = HostVlanSide(args.build, args.netns, args.run)
        self.vms = {name: Guest(args.run, name, ip) for name, ip in (("vm0", "10.99.0.2"), ("vm1", "10.99.0.3"))}
        self.vm_vlan = GuestVlan(self.vms["vm0"], VLAN_GUEST_IP)
        self.pci = GuestUroce(self.vms["vm0"], args.build)
        self.port = 18600

    def side(self, name):
        if name == "vm0-pci":
            if self.pci.job is None:
                self.pci.start_daemon(PCI_DAEMON_LIMIT)
            return self.pci
        return {"uroce": self.host, "uroce-vlan": self.host_vlan, "vm0-vlan": self.vm_vlan}.get(name) or self.vms[name]

    def close(self):
        """Stops the VM's uroced (if a cell started it); an error if it did not stop cleanly."""
        if self.pci.job is None:
            return None
        rc, out = self.pci.stop_daemon()
        if "uroced stopped" in out:
            return None
        return f"uroced on the PCI NIC did not stop cleanly (rc {rc}): {tail(out, 4)}"

    def loss(self, *args):
        subprocess.run([os.path.join(HERE, "loss.sh"), self.args.netns, *map(str, args)], check=True)

    def run(self, cell, index):
        cell_dir = os.path.join(self.args.run, "cells", f"{index:02d}-{cell.slug()}" if isinstance(index, int)
                                else f"{index}-{cell.slug()}")
        os.makedirs(cell_dir, exist_ok=True)
        program = PROGRAMS[cell.name]
        _, client_name, server_name = DIRECTIONS[cell.direction]
        client, server = self.side(client_name), self.side(server_name)
        self.port += 1
        port = self.port
        server_ip = server.ip  # uroce's address is the kernel's too (TCP), see netns.sh
        start = time.time()
        daemon = tcpdump = delayed = None
        exit_race = client_exit_race = dreq_race = False
        try:
            host = next((s for s in (client, server) if isinstance(s, HostSide)), None)
            if host:
                cell.capture = os.path.join(cell_dir, "uroced.pcap")
                daemon = Uroced(self.args.build, self.args.netns, self.args.run, cell_dir, cell.capture,
                                os.path.join(cell_dir, "uroced.log"), host.port_args)
                host.daemon, host.work = daemon, cell_dir
                ports = ["vb", "tap2" if cell.direction == "pci" else "tap0"]
            else:
                cell.capture = os.path.join(cell_dir, "bridge.pcap")
                tcpdump = self.tcpdump(cell.capture, cell_dir)
                ports = ["tap0", "tap1"]
            if cell.loss:
                for dev in ports:  # loss in each direction: frames entering the bridge from either end
                    self.loss("set", dev, cell.loss)
            if program.server_tcp_delay_ms and server is not self.host:
                server.delay_tcp_from(port, program.server_tcp_delay_ms)
                delayed = server
            s_job = server.start(program.argv(program.server(server, port), cell.loss), program.limit,
                                 listen_port=None if program.cm_only else port)
            if program.cm_only:
                time.sleep(CM_LISTEN_WAIT if server is self.host else 4 * CM_LISTEN_WAIT)
            elif not s_job.wait_listening(port, 120):
                rc, out = s_job.wait()
                cell.notes.append(f"server never listened (rc {rc}): {tail(out)}")
                return
            c_argv = program.argv(program.client(client, port, server_ip, server), cell.loss)
            # A refused client is run again while the server may still be starting: 3 tries against the host,
            # 8 against the guest, where fio's server in a TCG guest was once still not listening after 3 (CI:
            # REJECTED three times in 12 s, then the server waited for its client in vain).
            tries = 3 if server is self.host else 8
            for attempt in range(tries):
                c_rc, c_out = client.start(c_argv, program.limit).wait()
                refused = any(r in c_out for r in ("RDMA_CM_EVENT_REJECTED", "RDMA_CM_EVENT_UNREACHABLE",
                                                   "Connection refused",  # rsockets
                                                   "FAIL: connect (the first message): Connection reset"))  # UCP
                if not refused or not program.cm_only or attempt == tries - 1:
                    break
                cell.info.append(f"client refused (attempt {attempt + 1}: the server was not listening yet), run again")
                time.sleep(CM_LISTEN_WAIT)
            # The server ends with its client; if the client failed it may wait for ever: bounded.
            s_rc, s_out = s_job.wait(grace=5 if program.server_persists else 60 if c_rc == 0 else 10)
            with open(os.path.join(cell_dir, "client.out"), "w") as f:
                f.write(c_out)
            with open(os.path.join(cell_dir, "server.out"), "w") as f:
                f.write(s_out)
            cell.result = program.result(c_out) or program.result(s_out)
            # The exit race (Program.last_ack_race): one side passed and left, and the other, whose last ACK
            # was lost, resent to a QP that is gone until it gave up (uroce: retry-exceeded, retry_cnt 7 being
            # 7 retries) or was stopped (rxe retries for ever). Judged below, with the capture.
            race_possible = cell.loss and program.last_ack_race and not program.server_persists and cell.result

            def gave_up(rc, out):
                return rc in STOPPED or "retry counter exceeded" in out or "status 12" in out
            # The server passed and left; its ACK of the client's last message was lost.
            client_exit_race = race_possible and s_rc == 0 and c_rc != 0 and gave_up(c_rc, c_out)
            if c_rc != 0 and not client_exit_race:
                cell.notes.append(f"client rc {c_rc}{' (timeout)' if c_rc in (124, 137) else ''}: {tail(c_out)}")
            # The client passed and left; its ACK of the server's last message was lost.
            exit_race = race_possible and c_rc == 0 and s_rc != 0 and gave_up(s_rc, s_out)
            # The client passed and left; its DREQ was lost, and it no longer resends it (Program.dreq_race).
            dreq_race = bool(cell.loss and program.dreq_race and cell.result and c_rc == 0 and s_rc in STOPPED)
            if s_rc != 0 and not exit_race and not dreq_race and not (program.server_persists and s_rc in STOPPED):
                cell.notes.append(f"server rc {s_rc}{' (timeout)' if s_rc in (124, 137) else ''}: {tail(s_out)}")
            if c_rc == 0 and not cell.result:  # (a persistent server is stopped: its rc says nothing)
                cell.notes.append("no result (or a zero one) in the output: " + tail(c_out, 4))
        finally:
            if cell.loss:
                self.loss("clear")
            if delayed:
                delayed.clear_delay()
            if daemon:
                daemon.stop()
            if tcpdump:
                time.sleep(1)  # what it has not read yet when it is stopped is lost
                tcpdump.send_signal(signal.SIGINT)
                tcpdump.wait(20)
            cell.seconds = time.time() - start
        cap = check(self.uroce, cell.capture)
        cell.traffic = cap
        if exit_race:
            # When uroce was the client, its capture shows whether it had ACKed what the server kept resending
            # (the ACK then was lost on the bridge); rxe's side of that is not in any capture.
            if server is not self.host and client is self.host and not cap["last_retransmission_acked"]:
                cell.notes.append(f"server rc {s_rc} after its client had left, and the capture does not show the "
                                  f"client's ACK of what the server resent: {tail(s_out)}")
            else:
                cell.info.append("server stopped after its client had left: the client's last ACK was lost (the "
                                 "exit race of the pingpongs and perftest's latency tests)")
        if dreq_race:
            # uroce's capture has what reached it, after the loss: as the server, it must not have had a DREQ
            # from its client (had it, not ending the connection would be uroce's bug); as the client, it
            # must have sent its own.
            client_addresses = {getattr(client, k, None) for k in ("ip", "roce_ip", "ip6")} - {None}
            client_dreq = any(message == "DREQ" and src in client_addresses for src, message in cap["cm"])
            if server is self.host and client_dreq:
                cell.notes.append(f"server rc {s_rc}: it had its client's DREQ and did not end the connection: "
                                  f"{tail(s_out)}")
            elif client is self.host and not client_dreq:
                cell.notes.append(f"server rc {s_rc}, and the capture has no DREQ from the uroce client: {tail(s_out)}")
            else:
                cell.info.append("server stopped after its client had left: the client's DREQ was lost, and "
                                 "destroying its rdma_cm ID had ended the DREQ's retransmission")
        if client_exit_race:
            # The capture ends with the client resending a request that the server had answered with a new
            # message of its own, which in a ping-pong it sends only once it has ours: it had the request.
            if cap["last_request_answered"]:
                cell.info.append("client gave up after its server had left: the server's last ACK was lost (the "
                                 "exit race of the pingpongs and perftest's latency tests, server side)")
            else:
                cell.notes.append(f"client rc {c_rc}, and the capture does not show that the server had its last "
                                  f"request: {tail(c_out)}")
        if cell.direction.startswith("vlan") and cap["ok"]:
            # udaddy's server answers each datagram through ibv_create_ah_from_wc, whose SL is the completion's
            # wc.sl: on a RoCE completion uroce reports the packet's type there, as ConnectX does (0xA, RoCE v2
            # over IPv4; UCX needs it), so the replies go at priority 0xA & 7 = 2, as a ConnectX's would.
            # rxe leaves wc.sl 0 and tags by its VLAN device's egress map.
            replies = {"uroce": 2} if program.name.startswith("udaddy") and server is self.host_vlan else None
            v = check_vlan(cell.capture, VLAN_ID, {UROCE_VLAN_IP: "uroce", VLAN_GUEST_IP: "rxe"},
                           {"uroce": int(VLAN_PRIORITY)}, replies)
            if v["error"]:
                cell.notes.append("capture: " + v["error"])
            elif cell.result:
                cell.result += f"; VLAN {VLAN_ID}, priority: " + ", ".join(
                    f"{who} {'/'.join(map(str, sorted(p)))}" for who, p in v["priorities"].items())
        if not cap["ok"]:
            cell.notes.append("capture: " + cap["error"])
        elif program.ipv6 and cap["roce_ipv6"] != cap["roce"]:
            cell.notes.append(f"capture: {cap['roce'] - cap['roce_ipv6']} of {cap['roce']} RoCE frames not over IPv6")
        cell.ok = not cell.notes and bool(cell.result)
        cell.listen_race = (not cell.ok and program.listen_race and "Event rejected" in c_out
                            and 8 in cap.get("rej_reasons", []))

    def tcpdump(self, pcap, cell_dir):
        err = open(os.path.join(cell_dir, "tcpdump.log"), "w")
        proc = subprocess.Popen(["ip", "netns", "exec", self.args.netns, "tcpdump", "-i", "br0", "--immediate-mode", "-U", "-s", "0",
                                 "-w", pcap, "udp port 4791 or arp"], stdout=err, stderr=err)
        record_pid(self.args.run, proc.pid)
        deadline = time.time() + 30
        while time.time() < deadline:
            with open(err.name) as f:
                if "listening on" in f.read():
                    break
            time.sleep(0.1)
        return proc


def tail(text, n=2):
    lines = [l.strip() for l in text.strip().splitlines() if l.strip()]
    return " / ".join(lines[-n:])[-300:] if lines else "(no output)"


def cell_text(cell):
    if cell is None:
        return "—"
    t = getattr(cell, "traffic", None) or {}
    traffic = f"retrans {t.get('retrans', 0)}, NAK {t.get('naks', 0)}, RNR {t.get('rnr', 0)}" if t else ""
    if cell.ok:
        return f"PASS{'*' if cell.info else ''} {cell.result} ({traffic})"
    return f"**FAIL** ({traffic})" if traffic else "**FAIL**"


def markdown(cells, accel, kernel, started):
    dirs = [d for d in DIRECTIONS if any(c.direction == d for c in cells)]
    rows = []
    for c in cells:
        key = (c.name, c.loss)
        if key not in rows:
            rows.append(key)
    out = [f"# uroce ↔ Linux Soft-RoCE (rxe) interop matrix", "",
           f"{started:%Y-%m-%d %H:%M}; rxe: Linux {kernel}'s rdma_rxe in a QEMU VM ({accel}).",
           "", "| program | loss | " + " | ".join(DIRECTIONS[d][0] for d in dirs) + " |",
           "|---|---|" + "---|" * len(dirs)]
    for name, loss in rows:
        row = [f"`{name}`", f"{loss}%" if loss else "none"]
        for d in dirs:
            match = [c for c in cells if (c.name, c.loss, c.direction) == (name, loss, d)]
            row.append(cell_text(match[0] if match else None))
        out.append("| " + " | ".join(row) + " |")
    passed = sum(c.ok for c in cells)
    out += ["", f"{passed} of {len(cells)} cells passed. Traffic counts from `uroce explain` over each cell's capture "
            "(uroced's, or the bridge's for rxe ↔ rxe); every frame's ICRC checked by `uroce dissect`, the "
            "protocol's rules by `uroce check`. "
            "No lossy UD cells (`ibv_ud_pingpong`, `udaddy`, `mckey`): UD does not retransmit, so one lost "
            "datagram stalls them by design. No lossy iSER cells: libiscsi ends a session after a second "
            "without a completion (programs.py).", ""]
    remarks = [c for c in cells if c.ok and c.info]
    if remarks:
        out += ["## Remarks (PASS*)", ""]
        out += [f"- `{c.name}`, {DIRECTIONS[c.direction][0]}, loss {c.loss}%: " + "; ".join(c.info) for c in remarks]
        out.append("")
    failed = [c for c in cells if not c.ok]
    if failed:
        out.append("## Failures")
        out.append("")
        for c in failed:
            out.append(f"- `{c.name}`, {DIRECTIONS[c.direction][0]}, loss {c.loss}%: " + "; ".join(c.notes))
        out.append("")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", required=True)
    ap.add_argument("--netns", required=True)
    ap.add_argument("--build", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--cells", default="", help="comma-separated substrings of program names, or directions (pci, control, ...), to run (with --full)")
    ap.add_argument("--retries", type=int, default=0,
                    help="run a failed cell again up to N times (a pass is then marked, with the failures)")
    ap.add_argument("--accel", default="?")
    ap.add_argument("--kernel", default="?")
    args = ap.parse_args()
    args.build = os.path.abspath(args.build)
    BUILD["dir"] = args.build
    plan = full_cells() if args.full else CI_CELLS
    if args.cells:
        wanted = args.cells.split(",")
        plan = [c for c in plan if any(w in c[0] or w == c[1] for w in wanted)]
    if not os.path.exists(os.path.join(args.run, "vm1", "share", "ready")):
        plan = [c for c in plan if c[1] != "control"]
    runner = Runner(args)
    started = datetime.datetime.now()
    cells = []
    for i, (name, direction, loss) in enumerate(plan, 1):
        failures = []
        attempt, races = 0, 0
        while attempt < 1 + args.retries + races:
            cell = Cell(name, direction, loss)
            try:
                runner.run(cell, i if attempt == 0 else f"{i}-{attempt + 1}")
            except Exception as e:  # noqa: BLE001 -- a broken cell is reported, the matrix goes on
                cell.notes.append(f"harness error: {e}")
            attempt += 1
            if cell.ok:
                break
            if cell.listen_race and races < 2:
                races += 1
                failures.append("REJ invalid service ID: the REQ came before qperf's rdma_listen (qperf's race)")
            else:
                failures.append("; ".join(cell.notes))
        if cell.ok and failures:  # passed on a later attempt: said so, with what went wrong before
            cell.info.append(f"passed on attempt {len(failures) + 1}; before: " + " | ".join(failures))
        cells.append(cell)
        with open(args.out, "w") as f:  # after every cell: a run stopped by its time limit still leaves a matrix
            f.write(markdown(cells, args.accel, args.kernel, started) + "\n")
        print(f"[interop] {i}/{len(plan)} {name} | {DIRECTIONS[direction][0]} | loss {loss}%: "
              f"{'PASS' if cell.ok else 'FAIL'} {cell.result or ''} ({cell.seconds:.0f} s) {'; '.join(cell.notes)}",
              file=sys.stderr, flush=True)
    closing = runner.close()
    text = markdown(cells, args.accel, args.kernel, started)
    if closing:
        text += f"\n**{closing}**\n"
    with open(args.out, "w") as f:
        f.write(text + "\n")
    print(text)
    return 0 if all(c.ok for c in cells) and not closing else 1


if __name__ == "__main__":
    sys.exit(main())
