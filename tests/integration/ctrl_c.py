"""Presses Ctrl-C on a command's terminal, as a user would.

    ctrl_c.py METRICS PRESSES LOG CMD...

Runs CMD on a new pseudo-terminal (its own session, so the terminal's SIGINT goes to CMD's
foreground process group only), waits until METRICS holds a "step" event, then types Ctrl-C
PRESSES times, 0.2 s apart. Everything CMD writes goes to LOG. Prints "EXIT SECONDS": CMD's exit
code and the seconds from the last Ctrl-C to its exit. Exits 1 if no step event came within
120 s or CMD did not end within 120 s of the last Ctrl-C (then CMD's process group is killed).
"""
import os
import pty
import signal
import sys
import threading
import time

metrics, presses, log_path, cmd = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]

pid, fd = pty.fork()
if pid == 0:
    # A shell started in the background ignores SIGINT, and an ignored signal stays ignored
    # through exec: give CMD the default, as a terminal's foreground job has.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)
    os.execvp(cmd[0], cmd)


def drain():  # the terminal's output must be read, or CMD blocks on a full pty
    with open(log_path, "wb") as log:
        while True:
            try:
                data = os.read(fd, 4096)
            except OSError:
                return
            if not data:
                return
            log.write(data)
            log.flush()


threading.Thread(target=drain, daemon=True).start()


def has_step():
    try:
        with open(metrics) as f:
            return '"event":"step"' in f.read()
    except OSError:
        return False


def ended(limit):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    return None


deadline = time.monotonic() + 120
while not has_step():
    if time.monotonic() > deadline or ended(0) is not None:
        print("no step event", flush=True)
        os.killpg(pid, signal.SIGKILL)
        sys.exit(1)
    time.sleep(0.1)
time.sleep(0.5)
for i in range(presses):
    if i:
        time.sleep(0.2)
    os.write(fd, b"\x03")  # the terminal turns it into SIGINT for the foreground process group
pressed = time.monotonic()
code = ended(120)
if code is None:
    print("still running 120 s after Ctrl-C", flush=True)
    os.killpg(pid, signal.SIGKILL)
    sys.exit(1)
print(code, f"{time.monotonic() - pressed:.1f}", flush=True)
