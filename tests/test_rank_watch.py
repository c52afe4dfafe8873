#!/usr/bin/env python3
"""scripts/rank_watch.py, which scripts/bench-netns waits for a run's ranks with, on local
processes standing in for ranks: a run where one rank exited and the other hangs on a lock ends
with one line naming the run, the hung rank, the kernel wait and the Python line it hangs at (a
torch rank once hung so, and the bench waited out its whole limit); a rank that fails ends the run
at once; ranks that compute, or write, for longer than the stall limit are no hang."""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from rank_watch import wait_for_ranks  # noqa: E402

# A rank that, like a deadlocked one, sleeps on a lock it already holds, after registering
# faulthandler for SIGUSR1 as examples/torch_gpt's scripts do.
HANGS = """
import faulthandler, signal, threading
faulthandler.register(signal.SIGUSR1, all_threads=True)
lock = threading.Lock()
def waits_for_its_peer():
    lock.acquire()
    lock.acquire()
waits_for_its_peer()
"""
COMPUTES = "import time\nend = time.monotonic() + 3\nwhile time.monotonic() < end: pass\n"
WRITES = "import time\nfor _ in range(10):\n    print('step', flush=True)\n    time.sleep(0.3)\n"


def run(directory, programs, **settings):
    logs = [os.path.join(directory, f"rank{rank}.log") for rank in range(len(programs))]
    processes = []
    for program, log in zip(programs, logs):
        with open(log, "w") as out:
            processes.append(subprocess.Popen([sys.executable, "-c", program], stdout=out, stderr=subprocess.STDOUT))
    try:
        return wait_for_ranks(processes, "the-run", logs=logs, **{"timeout": 600, "stall_seconds": 2, **settings})
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
            process.wait()


def check(condition, what):
    if not condition:
        sys.exit(f"FAILED: {what}")


def main():
    with tempfile.TemporaryDirectory() as directory:
        line = run(directory, ["pass", HANGS], ask_python=True)
        print(line)
        check(line and line.startswith("the-run: no progress for 2 s"), f"a stall reported: {line}")
        check("rank 0 exited 0" in line and "rank 1 asleep in" in line, f"the ranks named: {line}")
        check("futex" in line, f"the kernel wait (a futex) named: {line}")
        check("in waits_for_its_peer" in line, f"the Python function named: {line}")
        check("\n" not in line, "one line")

        line = run(directory, ["import sys; sys.exit(3)", "import time; time.sleep(600)"],
                   why=lambda rank: f" (rank {rank}'s reason)")
        print(line)
        check(line == "the-run: rank 0 exited with 3 (rank 0's reason)", f"the failed rank at once: {line}")

        line = run(directory, ["import time; time.sleep(600)"], timeout=1, stall_seconds=600)
        print(line)
        check(line and line.startswith("the-run: still running after 1 s: rank 0 asleep in"), f"timeout: {line}")

        check(run(directory, [COMPUTES, "pass"], stall_seconds=1) is None, "a rank computing is progress")
        check(run(directory, [WRITES, "pass"], stall_seconds=1) is None, "a rank writing its log is progress")
    print("rank_watch: ok")


if __name__ == "__main__":
    main()
