"""Waits for the ranks of one run of scripts/bench-netns, and ends a run that hangs instead of
waiting for its whole time limit: a run stalls when, for a number of seconds, no rank exits,
writes to its files, or has its main thread running or runnable (a rank that computes, or waits
for the CPU on a loaded machine, is progress; one asleep on a lock, a socket or a peer is not). The
failure is one line naming the run, each rank still running and what it waits for: the kernel
function it sleeps in (/proc/PID/wchan), the Python line it is at (asked with SIGUSR1 from ranks
that registered faulthandler for it) and its namespace's TCP connections."""
import os
import re
import signal
import time

# What a thread asleep in a kernel function (/proc/PID/wchan, which kernels name variously) waits for.
WAITS = (("futex", "a lock or another thread"), ("ep_poll", "a socket or pipe (epoll)"),
         ("poll", "a socket or pipe (poll)"), ("select", "a socket or pipe (select)"),
         ("inet_csk_accept", "a peer's connection (accept)"), ("sk_wait_data", "data from a peer (recv)"),
         ("sk_stream_wait", "room to send to a peer"), ("inet_wait_for_connect", "a peer to accept (connect)"),
         ("do_wait", "a child process"), ("nanosleep", "a timer"), ("pipe", "a pipe"))
TCP_STATES = {"01": "established", "02": "syn-sent", "03": "syn-recv", "04": "fin-wait-1", "05": "fin-wait-2",
              "06": "time-wait", "07": "close", "08": "close-wait", "09": "last-ack", "0A": "listen",
              "0B": "closing"}


def read(path, default=""):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:  # the process or thread ended meanwhile
        return default


def stat_fields(path):
    """The fields of a /proc stat file after the command's name (which may hold spaces and
    parentheses): [state, ppid, ...]; [] if it is gone."""
    text = read(path)
    return text[text.rfind(")") + 2:].split() if ")" in text else []


def threads(pid):
    return os.listdir(f"/proc/{pid}/task") if os.path.isdir(f"/proc/{pid}/task") else []


def process_tree(pid):
    """`pid` and its descendants, parents first (`ip netns exec` may run the rank as its child)."""
    tree, todo = [], [pid]
    while todo:
        current = todo.pop(0)
        tree.append(current)
        for thread in threads(current):
            todo.extend(int(child) for child in read(f"/proc/{current}/task/{thread}/children").split())
    return tree


def busy(pid):
    """Whether the main thread of `pid` or of a descendant is running, runnable or in
    uninterruptible I/O. Other threads do not count: torch's gloo loop wakes every 10 ms, so on a
    loaded machine a hung rank's helper threads are often runnable."""
    for process in process_tree(pid):
        fields = stat_fields(f"/proc/{process}/stat")  # the main thread's
        if fields and fields[0] in ("R", "D"):
            return True
    return False


def rank_process(pid):
    """The rank's own process: `pid` itself where `ip netns exec` exec'd the command, else the
    child it forked."""
    tree = process_tree(pid)
    return next((p for p in tree if read(f"/proc/{p}/comm").strip() != "ip"), pid)


def python_line(log_path, offset):
    """The main thread's innermost frame in the faulthandler dump written to the log after
    `offset`, as 'file:line in function'; '' when there is none."""
    text = read(log_path)[offset:]
    for block in re.split(r"\n(?=(?:Current thread|Thread) 0x)", text):
        frames = re.findall(r'File "([^"]+)", line (\d+) in (\S+)', block)
        if frames and frames[-1][2] == "<module>":  # the main thread's outermost frame is the script
            path, line, function = frames[0]
            return f"{os.path.basename(path)}:{line} in {function}"
    return ""


def tcp_connections(pid):
    """The TCP connections of the process's network namespace by state, e.g. '2 established, 1 listen'."""
    counts = {}
    for table in ("tcp", "tcp6"):
        for row in read(f"/proc/{pid}/net/{table}").splitlines()[1:]:
            fields = row.split()
            if len(fields) > 3:
                state = TCP_STATES.get(fields[3], fields[3])
                counts[state] = counts.get(state, 0) + 1
    return ", ".join(f"{n} {state}" for state, n in sorted(counts.items())) or "none"


def what_it_waits_for(pid, log_path, ask_python):
    """One rank's wait: 'asleep in futex_wait_queue (a lock or another thread) at
    train_torch.py:178 in <module>, TCP: 2 established'."""
    process = rank_process(pid)
    wchan = read(f"/proc/{process}/wchan").strip() or "?"
    meaning = next((words for key, words in WAITS if key in wchan), "")
    where = f"asleep in {wchan}" + (f" ({meaning})" if meaning else "")
    if ask_python:
        offset = len(read(log_path))
        try:
            os.kill(process, signal.SIGUSR1)  # faulthandler writes every thread's stack to the log
        except ProcessLookupError:
            pass
        line = ""
        for _ in range(20):  # the handler needs the process scheduled, not the GIL
            time.sleep(0.1)
            line = python_line(log_path, offset)
            if line:
                break
        where += f" at {line}" if line else " (no Python stack came)"
    return f"{where}, TCP: {tcp_connections(process)}"


def wait_for_ranks(processes, name, timeout, stall_seconds, logs, watched=(), ask_python=False, why=None,
                   interval=0.5):
    """Waits until the ranks' processes (rank order) end. None if every one exited 0; else one line
    saying what failed: the first rank seen to exit non-zero (with why(rank) appended), or the ranks
    still running when the run stalled for `stall_seconds` or ran `timeout` seconds, each with what it
    waits for. `logs` are the ranks' logs; they and `watched` (more files) growing is progress.
    `ask_python`: the ranks are Python processes that dump their stacks on SIGUSR1."""
    started = last_progress = time.monotonic()
    files = [*logs, *watched]
    sizes = None
    exited = {}
    while True:
        for rank, process in enumerate(processes):
            code = process.poll()
            if code is None or rank in exited:
                continue
            exited[rank] = code
            if code:
                return f"{name}: rank {rank} exited with {code}{why(rank) if why else ''}"
        running = [rank for rank in range(len(processes)) if rank not in exited]
        if not running:
            return None
        now = time.monotonic()
        current = [os.path.getsize(f) if os.path.exists(f) else -1 for f in files] + [len(exited)]
        if current != sizes or any(busy(processes[rank].pid) for rank in running):
            sizes, last_progress = current, now
        stalled = now - last_progress >= stall_seconds
        if stalled or now - started >= timeout:
            done = f"rank{'s' if len(exited) > 1 else ''} {', '.join(map(str, sorted(exited)))} exited 0; " \
                if exited else ""
            waits = "; ".join(f"rank {rank} {what_it_waits_for(processes[rank].pid, logs[rank], ask_python)}"
                              for rank in running)
            how = (f"no progress for {stall_seconds:g} s (no rank exited, wrote or ran)" if stalled
                   else f"still running after {timeout:g} s")
            return f"{name}: {how}: {done}{waits} (logs in {os.path.dirname(logs[0]) or '.'})"
        time.sleep(interval)
