"""The harness's registry of what it created (see lib.sh): Python pieces record the processes they
start there too, so that cleanup.sh stops them by PID even if Python itself is killed."""
import os


def _start_time(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def record_pid(work, pid):
    with open(os.path.join(work, "created"), "a") as f:
        f.write(f"pid {pid} {_start_time(pid)}\n")
