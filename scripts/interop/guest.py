"""Running commands in an interop VM through its guest agent (guest-agent.sh): a shell script dropped
into the VM's shared directory as NAME.cmd runs in the guest; NAME.out gets its output, NAME.rc its
exit status. Every script bounds its program with `timeout` (rxe retries forever with retry_cnt 7), and
the host stops waiting a little after that bound."""
import itertools
import os
import shlex
import shutil
import time

from vlan import VLAN_ID, VLAN_PRIORITY

_ids = itertools.count(1)


class GuestJob:
    def __init__(self, guest, name, limit):
        self.guest, self.name, self.limit = guest, name, limit
        self.started = time.time()

    def _path(self, ext):
        return os.path.join(self.guest.share, f"{self.name}.{ext}")

    def done(self):
        return os.path.exists(self._path("rc"))

    def wait_listening(self, port, timeout):
        """True once the script saw a TCP socket listening on PORT in the guest (it touches
        NAME.listening); False if the job ended first or TIMEOUT passed."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if os.path.exists(self._path("listening")):
                return True
            if self.done():
                return False
            time.sleep(0.1)
        return False

    def stop(self):
        """Asks the guest to stop the program (the script watches for NAME.kill)."""
        open(self._path("kill"), "w").close()

    def wait(self, grace=None):
        """(exit status, output); status None if the guest never reported (VM stuck). With GRACE, the
        program is stopped if it has not ended within GRACE seconds."""
        deadline = self.started + self.limit + 30
        stop_at = time.time() + grace if grace is not None else None
        while not self.done() and time.time() < deadline:
            if stop_at and time.time() > stop_at:
                self.stop()
                stop_at = None
            time.sleep(0.1)
        out = ""
        if os.path.exists(self._path("out")):
            with open(self._path("out"), errors="replace") as f:
                out = f.read()
        if not self.done():
            return None, out + "\n[interop: the guest did not report an exit status]"
        with open(self._path("rc")) as f:
            return int(f.read().strip() or "255"), out


class Guest:
    """One VM: its name, address, rxe device and GID index (IPv4 RoCEv2 GID: index 1)."""
    device, gid, gid6 = "rxe0", "1", "2"  # GID 2: ip6, added after the rxe device
    netdev = "eth0"  # rxe's

    def __init__(self, work, name, ip):
        self.name, self.ip = name, ip
        self.roce_ip = ip  # rxe's address is the VM kernel's
        self.ip6 = "fd99::" + ip.rsplit(".", 1)[1]  # guest-agent.sh adds it to eth0
        self.share = os.path.join(work, name, "share")

    def script(self, name):
        """A script of this folder as the guest reaches it: copied into the shared directory (the guest
        caches the host's root, so it could see an older copy of a file that changed since it booted)."""
        shutil.copy(os.path.join(os.path.dirname(os.path.abspath(__file__)), name), os.path.join(self.share, name))
        return os.path.join("/run/interop", name)

    def start(self, argv, limit, env=None, listen_port=None):
        """Starts ARGV in the guest, bounded by LIMIT seconds. With LISTEN_PORT, the script touches
        NAME.listening once a TCP socket listens on that port (for servers: wait_listening)."""
        name = f"job{os.getpid()}-{next(_ids)}"  # unique within the share, also across runs
        prog = " ".join(shlex.quote(a) for a in argv)
        envs = " ".join(f"{k}={shlex.quote(v)}" for k, v in (env or {}).items())
        script = [f"cd /tmp", f"{envs + ' ' if envs else ''}timeout -k 5 {limit} stdbuf -oL -eL {prog} &", "p=$!"]
        if listen_port:
            marker = os.path.join("/run/interop", f"{name}.listening")
            script.append(f"(while kill -0 $p 2>/dev/null; do if ss -Hltn 'sport = :{listen_port}' | grep -q .; "
                          f"then touch {marker}; break; fi; sleep 0.1; done) &")
        kill = os.path.join("/run/interop", f"{name}.kill")
        # Stopped by the host (NAME.kill): first say what the program and rxe's QPs were doing.
        script.append(f"(while kill -0 $p 2>/dev/null; do if [ -e {kill} ]; then echo '[interop: stopped; state:]'; "
                      "ps -o pid,stat,wchan:24,args --ppid $p; rdma res show qp; kill $p; break; fi; "
                      "sleep 0.2; done) &")
        script.append("wait $p")
        tmp = os.path.join(self.share, f"{name}.tmp")
        with open(tmp, "w") as f:
            f.write("\n".join(script) + "\n")
        os.rename(tmp, os.path.join(self.share, f"{name}.cmd"))
        return GuestJob(self, name, limit)

    def run(self, argv, limit):
        return self.start(argv, limit).wait()

    def delay_tcp_from(self, port, ms):
        """Delays the TCP segments the guest sends from PORT by MS milliseconds (netem, which this guest's
        kernel has and the host's lacks), leaving everything else, RoCE included, as it is."""
        rc, out = self.run(["sh", "-c", "modprobe -a sch_prio sch_netem cls_u32 && "
                            "tc qdisc replace dev eth0 root handle 1: prio && "
                            f"tc qdisc replace dev eth0 parent 1:3 handle 30: netem delay {int(ms)}ms && "
                            "tc filter add dev eth0 parent 1: protocol ip prio 1 u32 match ip protocol 6 0xff "
                            f"match ip sport {int(port)} 0xffff flowid 1:3"], 60)
        if rc != 0:
            raise RuntimeError(f"cannot delay TCP in {self.name} (rc {rc}): {out.strip()[-300:]}")

    def clear_delay(self):
        self.run(["sh", "-c", "tc qdisc del dev eth0 root 2>/dev/null; true"], 60)


def mapped_gid(ipv4):
    """An IPv4 address as sysfs shows its RoCE GID: eight groups of four hex digits, v4-mapped."""
    a, b, c, d = (int(x) for x in ipv4.split("."))
    return f"0000:0000:0000:0000:0000:ffff:{a:02x}{b:02x}:{c:02x}{d:02x}"


class GuestVlan:
    """The VM's rxe on 802.1Q VLAN 100, as Linux runs RoCE on a VLAN: guest-agent.sh made a VLAN device
    eth0.100 with an address of its own, whose GID the rxe device of eth0 has too (RoCE GIDs follow the
    port netdev's upper VLAN devices) and whose frames leave through eth0.100, tagged with priority 3 by
    its egress map (rxe's packets have skb priority 0). The programs exchange QP numbers and GIDs over TCP
    with the VM's untagged address, as on the other cells."""
    device, gid6 = "rxe0", None
    sl = VLAN_PRIORITY

    def __init__(self, guest, roce_ip):
        self.guest, self.roce_ip = guest, roce_ip
        self.ip = guest.ip
        self.name = f"{guest.name} on VLAN {VLAN_ID}"
        self.share = guest.share
        self._gid = None

    @property
    def gid(self):
        """The index of roce_ip's GID on rxe0, the one whose netdev is eth0.100 (read from sysfs once)."""
        if self._gid is None:
            dev = f"eth0.{VLAN_ID}"
            want = mapped_gid(self.roce_ip)
            rc, out = self.guest.run(["sh", "-c", f"""
for i in $(seq 100); do
  # One grep over the table's 1024 entries: a cat of each took 35 s in a TCG guest.
  for g in $(grep -lx {want} /sys/class/infiniband/rxe0/ports/1/gids/* 2>/dev/null); do
    n=${{g##*/}}
    if [ "$(cat /sys/class/infiniband/rxe0/ports/1/gid_attrs/ndevs/$n 2>/dev/null)" = {dev} ]; then
      echo "gid index $n"; exit 0
    fi
  done
  sleep 0.1
done
echo "rxe0 has no GID {want} on {dev}"; ip -d addr show {dev}; exit 1
"""], 120)
            if rc != 0 or "gid index" not in out:
                raise RuntimeError(f"{self.name}: no GID (rc {rc}): {out.strip()[-300:]}")
            self._gid = out.split("gid index")[-1].split()[0]
        return self._gid

    def script(self, name):
        return self.guest.script(name)

    def start(self, argv, limit, env=None, listen_port=None):
        return self.guest.start(argv, limit, env, listen_port)

    def run(self, argv, limit):
        return self.guest.run(argv, limit)

    def delay_tcp_from(self, port, ms):
        self.guest.delay_tcp_from(port, ms)

    def clear_delay(self):
        self.guest.clear_delay()
