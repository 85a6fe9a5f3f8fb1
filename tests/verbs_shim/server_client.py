"""One server/client run of an unmodified verbs program through uroce-run, as the pingpongs and perftest
need it: the server in the background, the client retried while the server is not listening yet (it
fails at once then), both stopped by PID if they hang; and a server that stays up for many clients (qperf).
Shared by the tests of tests/verbs_shim/."""
import os
import select
import signal
import subprocess
import time


class Run:
    def __init__(self, what, client, server_rc, server_out, server_err):
        self.what = what
        self.client = client            # subprocess.CompletedProcess
        self.server_rc = server_rc
        self.server_out = server_out
        self.server_err = server_err

    def assert_both_exited_0(self):
        c = self.client
        server = f"server rc {self.server_rc}:\n{self.server_out}{self.server_err}"
        assert c.returncode == 0, f"client ({self.what}) rc {c.returncode}:\n{c.stdout}{c.stderr}--- {server}"
        assert self.server_rc == 0, f"{server} ({self.what})"


def run_server_client(uroce_run, server_socket, client_socket, command, what, timeout, retry_pause=0.2,
                      server_wrap=(), client_wrap=(), client_command=None, not_listening=("Couldn't connect",),
                      server_ready=None):
    """`command` through server_socket as the server, `command localhost` (or `client_command localhost`)
    through client_socket (each a path, or a list of paths: one device each); each side run under its
    `*_wrap` command if given (e.g. strace). The client is run again while it says one of `not_listening`
    (it ran before the server listened), for up to 10 s: whatever its exit status, since some programs
    (DAPL's dtestsrq) exit 0 after any failure. With `server_ready`, the client starts only once the server's
    stdout has said it (the server must print it line by line: under `stdbuf -oL` if need be), for a
    client whose many connections could otherwise meet a server that starts to listen halfway through; and
    `client_command` may then be a function of what the server said (an address it printed)."""
    server = subprocess.Popen([uroce_run, *socket_options(server_socket), *server_wrap, *command],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    said = ""
    try:
        if server_ready is not None:
            said = wait_for_line(server, server_ready, timeout)
            if callable(client_command):
                client_command = client_command(said)
        deadline = time.time() + 10
        while True:
            client = subprocess.run([uroce_run, *socket_options(client_socket), *client_wrap,
                                     *(client_command or command), "localhost"],
                                    capture_output=True, text=True, timeout=timeout)
            if time.time() > deadline or server.poll() is not None:
                break
            if not any(says in client.stderr + client.stdout for says in not_listening):
                break
            time.sleep(retry_pause)
        try:
            s_out, s_err = server.communicate(timeout=timeout)
        except subprocess.TimeoutExpired as e:
            e.client = client  # what the client did, for a caller that tells a hang at exit from a failure
            raise
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
    return Run(what, client, server.returncode, said + s_out, s_err)


def run_again_while(run_once, spoiled, attempts, why):
    """`run_once()` again while `spoiled(run)` says the run went wrong in a way that is the test program's and
    says nothing about uroce (perftest failing to sample the CPU clock, dtest racing with itself), up to
    `attempts` runs in all, printing `why(run)` before each new one. Returns the last run, which the caller
    checks as any other: the last spoiled run fails there."""
    for attempt in range(1, attempts + 1):
        run = run_once()
        if attempt == attempts or not spoiled(run):
            return run
        print(f"(again: {why(run)}, attempt {attempt})", flush=True)


def wait_for_line(process, text, timeout):
    """Reads `process`'s stdout until it contains `text`; returns what it read. AssertionError if the
    process ends first or `timeout` passes. Reads the pipe itself (os.read), not through the file object:
    a buffered readline could take more than it returns, and communicate() reads the pipe directly, so
    whatever sat in that buffer would be lost to the caller."""
    seen = b""
    fd = process.stdout.fileno()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        seen += chunk
        if text.encode() in seen:
            return seen.decode(errors="replace")
    raise AssertionError(f"no '{text}' from the program within {timeout} s:\n{seen.decode(errors='replace')}")


def socket_options(sockets):
    """uroce-run's options for one daemon's socket (a path) or several (a list: one device each)."""
    return [arg for path in ([sockets] if isinstance(sockets, str) else sockets) for arg in ("--socket", path)]


def server_client(uroce_run, server_socket, client_socket, server_cmd, client_cmd, what, retry_on=(), timeout=60,
                  server_started=None):
    """The server in the background, the client retried while the server is not listening yet (rdma_cm
    programs: they name their addresses themselves). Each side's socket is a path or a list of paths.
    `server_started`, if given, is called once the first server has started, before the first client.

    A retry starts a fresh server too: a client can be refused after it got part of the way (perftest -R
    makes two connections, and the server listens for the second only after the first is done: a client
    that is quick gets REJ "invalid service ID" for it, as from Linux's CM), and a server left in that
    second phase would take the next client's first connection for its second."""
    def start_server():
        return subprocess.Popen([uroce_run, *socket_options(server_socket), *server_cmd],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    server = start_server()
    try:
        if server_started is not None:
            server_started()
        deadline = time.time() + 15
        while True:
            client = subprocess.run([uroce_run, *socket_options(client_socket), *client_cmd],
                                    capture_output=True, text=True, timeout=timeout)
            if client.returncode == 0 or time.time() > deadline or server.poll() is not None:
                break
            if not any(s in client.stdout + client.stderr for s in retry_on):
                break
            server.kill()
            server.communicate()
            server = start_server()
            time.sleep(0.3)
        s_out, s_err = server.communicate(timeout=timeout)
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
    assert client.returncode == 0, f"{what}: client rc {client.returncode}:\n{client.stdout}{client.stderr}"
    assert server.returncode == 0, f"{what}: server rc {server.returncode}:\n{s_out}{s_err}"
    return client.stdout + client.stderr, s_out + s_err


class PersistentServer:
    """A server that serves one client after another (qperf's): `command` through uroce-run on `socket`,
    in a session of its own so that it and the children it forks per client are stopped together, by its
    process group, also when one of them hangs. Its output goes to `log_path`; new_output() is what it
    printed since the last call (qperf's server prints nothing unless a test fails on its side)."""

    def __init__(self, uroce_run, socket, command, log_path):
        self.argv = [uroce_run, "--socket", socket, *command]
        self.log_path = log_path
        self.proc = None
        self.start()

    def start(self):
        self.log = open(self.log_path, "a")
        self.read_to = self.log.tell()
        self.proc = subprocess.Popen(self.argv, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)

    def new_output(self):
        with open(self.log_path) as f:
            f.seek(self.read_to)
            text = f.read()
        self.read_to += len(text.encode())
        return text

    def stop(self):
        if self.proc and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)  # its own group: the server and its children only
            except ProcessLookupError:
                pass
            self.proc.wait()
        self.log.close()

    def restart(self):
        self.stop()
        self.start()
