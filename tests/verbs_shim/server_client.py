"""One server/client run of an unmodified verbs program through uroce-run, as the pingpongs and perftest
need it: the server in the background, the client retried while the server is not listening yet (it
fails at once then), both stopped by PID if they hang. Shared by test_programs.py and test_setups.py."""
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
        assert c.returncode == 0, f"client ({self.what}) rc {c.returncode}:\n{c.stdout}{c.stderr}"
        assert self.server_rc == 0, f"server ({self.what}) rc {self.server_rc}:\n{self.server_out}{self.server_err}"


def run_server_client(uroce_run, server_socket, client_socket, command, what, timeout, retry_pause=0.2):
    """`command` through server_socket as the server, `command localhost` through client_socket."""
    server = subprocess.Popen([uroce_run, "--socket", server_socket, *command],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 10
        while True:
            client = subprocess.run([uroce_run, "--socket", client_socket, *command, "localhost"],
                                    capture_output=True, text=True, timeout=timeout)
            if client.returncode == 0 or time.time() > deadline or server.poll() is not None:
                break
            if "Couldn't connect" not in client.stderr + client.stdout:
                break
            time.sleep(retry_pause)
        s_out, s_err = server.communicate(timeout=timeout)
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
    return Run(what, client, server.returncode, s_out, s_err)
