"""What every bench measures the same way: timing loops, percentiles, CPU accounting, the
met / not met table and the baseline checkout (``--baseline-worktree``).

Timing loops. :func:`lanes` is the closed loop (``concurrency`` callers, each starting its
next call when the previous one ended: one at a time is one lane); :func:`paced` the open
loop (items sent at a fixed rate whatever the answers do); :func:`interleaved` runs two
paths in alternating halves so that a shared machine's noise lands on both.

CPU accounting. A process's CPU time from ``/proc/<pid>/stat`` (utime + stime), the whole
machine's busy time from ``/proc/stat``, the local broker found by its listening port;
``others`` is the machine's busy time minus the processes a bench knows about: the CPUs
other users of a shared machine kept busy meanwhile, printed beside the figures.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import re
import statistics
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parents[2]
CONTENDED_CPUS = 0.3  # other users' CPUs above which a shared machine's figures are flagged

T = TypeVar("T")

# ------------------------------------------------------------------------ percentiles


def percentiles(values: Iterable[float]) -> dict[str, float]:
    """p50, p90, p99 and the maximum of ``values`` (nearest rank); empty when there are none."""
    ordered = sorted(values)
    if not ordered:
        return {}
    return {f"p{p}": ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] for p in (50, 90, 99)} | {
        "max": ordered[-1]
    }


def median_or_none(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def ratio(value: float | None, floor: float | None) -> float | None:
    """``value / floor``, or None where either is unknown (or the floor is 0)."""
    if value is None or floor is None or floor <= 0 or math.isnan(value):
        return None
    return value / floor


# ---------------------------------------------------------------------- timing loops


async def lanes(call: Callable[[], Awaitable[Any]], calls: int, concurrency: int) -> list[float]:
    """Milliseconds of each of ``calls`` calls, ``concurrency`` lanes each starting its next
    call when its previous one returned (the closed loop; one lane is one at a time). A call
    that returns ``False`` gave up: it is not counted and its lane stops."""
    out: list[float] = []
    queue = iter(range(calls))

    async def lane() -> None:
        for _ in queue:
            start = time.perf_counter()
            if await call() is False:
                return
            out.append((time.perf_counter() - start) * 1000)

    await asyncio.gather(*(lane() for _ in range(max(1, concurrency))))
    return out


async def paced(
    rate: float, items: Sequence[T], send: Callable[[T], Awaitable[Any]]
) -> tuple[list[Any], float]:
    """Send ``items`` at ``rate`` per second (the open loop: the schedule does not wait for
    answers); returns what each ``send`` returned and the seconds the sending took."""
    started = time.monotonic()
    out = []
    for i, item in enumerate(items):
        delay = started + i / rate - time.monotonic()
        if delay > 0.002:
            await asyncio.sleep(delay)
        out.append(await send(item))
    return out, time.monotonic() - started


async def interleaved(
    first: Callable[[], Awaitable[Any]],
    second: Callable[[], Awaitable[Any]],
    calls: int,
    concurrency: int,
    halves: int = 2,
) -> tuple[list[float], list[float]]:
    """:func:`lanes` of two paths in ``halves`` alternating parts each (the same machine
    noise on both); the milliseconds of each path's calls."""
    one: list[float] = []
    two: list[float] = []
    for _ in range(halves):
        one += await lanes(first, calls // halves, concurrency)
        two += await lanes(second, calls // halves, concurrency)
    return one, two


# ----------------------------------------------------------------------- CPU accounting

TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
BROKER_PID_FILE = ROOT / "ops" / "kafka" / ".data" / "kafka.pid"


def broker_pid(bootstrap: str) -> int | None:
    """The local broker's pid, to read its CPU time; None for a remote broker.

    The process listening on the bootstrap port (found through /proc, so a broker
    started from another checkout counts too), else ``ops/kafka/kafka.sh``'s pid file.
    """
    host, _, port = bootstrap.split(",")[0].rpartition(":")
    if host not in ("127.0.0.1", "localhost", "::1", "[::1]") or not port.isdigit():
        return None
    return listener_pid(int(port)) or _pid_file()


def _pid_file() -> int | None:
    try:
        return int(BROKER_PID_FILE.read_text().strip())
    except (OSError, ValueError):
        return None


def listener_pid(port: int) -> int | None:
    """The pid of the process with a socket listening on ``port`` (readable /proc only)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # LISTEN
                    inodes.add(f"socket:[{fields[9]}]")
    if not inodes:
        return None
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            for fd in (proc / "fd").iterdir():
                with contextlib.suppress(OSError):
                    if os.readlink(fd) in inodes:
                        return int(proc.name)
    return None


def process_cpu(pid: int | None) -> float:
    """CPU seconds (user + system) a process has used so far; 0 when unknown."""
    if pid is None:
        return 0.0
    with contextlib.suppress(OSError, ValueError, IndexError):
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(stat[11]) + int(stat[12])) / TICKS
    return 0.0


def descendants(pid: int) -> list[int]:
    """The pids of every living process below ``pid`` (children, their children, ...)."""
    parents: dict[int, list[int]] = {}
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
                parents.setdefault(ppid, []).append(int(proc.name))
    out, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def cpu_snapshot(broker: int | None) -> tuple[float, float, float]:
    """(busy CPU seconds of the whole machine, the broker's CPU seconds, wall time)."""
    busy = 0.0
    with contextlib.suppress(OSError, ValueError, IndexError):
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        busy = (sum(fields[:8]) - fields[3] - fields[4]) / TICKS  # all but idle and iowait
    return busy, process_cpu(broker), time.monotonic()


class Load:
    """The machine's CPUs over a window: ``others`` is its busy time minus the processes the
    bench names (``known``) and this process, per second of the window."""

    def __init__(self, broker: int | None, *known: int | None) -> None:
        self.broker = broker
        self.known = known
        self.before = cpu_snapshot(broker)
        self.own_before = time.process_time()
        self.known_before = [process_cpu(pid) for pid in known]
        self.after = self.before
        self.own = 0.0
        self.known_cpu = [0.0 for _ in known]

    def stop(self) -> Load:
        self.after = cpu_snapshot(self.broker)
        self.own = time.process_time() - self.own_before
        self.known_cpu = [process_cpu(pid) - b for pid, b in zip(self.known, self.known_before, strict=True)]
        return self

    @property
    def window(self) -> float:
        return max(1e-9, self.after[2] - self.before[2])

    @property
    def broker_cpu(self) -> float:
        return self.after[1] - self.before[1]

    def others(self, extra_cpu: float = 0.0) -> float:
        """CPUs other users kept busy: the machine minus the broker, the named processes, this
        process and ``extra_cpu`` (CPU seconds the bench measured otherwise)."""
        busy = self.after[0] - self.before[0]
        return max(0.0, busy - self.broker_cpu - sum(self.known_cpu) - self.own - extra_cpu) / self.window


def machine_others(seconds: float = 1.0) -> float:
    """CPUs busy over ``seconds`` right now (the whole machine: before a bench starts, all of
    it is other users' work)."""
    before = cpu_snapshot(None)
    time.sleep(seconds)
    after = cpu_snapshot(None)
    return (after[0] - before[0]) / max(1e-9, after[2] - before[2])


# ---------------------------------------------------------------- met / not met table


def target(name: str, value: float | None, goal: str, met: bool | None, note: str = "") -> dict[str, Any]:
    """One row of the targets table; ``met`` None where the run did not measure it."""
    return {"target": name, "measured": value, "goal": goal, "met": met, "note": note}


def at_most(value: float | None, limit: float) -> bool | None:
    return None if value is None else value <= limit


def at_least(value: float | None, limit: float) -> bool | None:
    return None if value is None else value >= limit


def both(*verdicts: bool | None) -> bool | None:
    """Met when every part is met; None when any part was not measured."""
    if any(v is None for v in verdicts):
        return None
    return all(verdicts)


def verdict(met: bool | None) -> str:
    return {True: "met", False: "NOT MET", None: "not run"}[met]


def print_targets(rows: list[dict[str, Any]]) -> None:
    header = f"{'target':<62}{'measured':>10}  {'goal':<42}{'':<8}"
    print(header)
    print("-" * len(header))
    for row in rows:
        measured = "-" if row["measured"] is None else f"{row['measured']:,.2f}"
        print(f"{row['target']:<62}{measured:>10}  {row['goal']:<42}{verdict(row['met']):<8}")
        if row["note"]:
            print(f"{'':<64}{row['note']}")


def opt(value: float | None, spec: str) -> str:
    """``value`` formatted with ``spec`` (e.g. ``8,.0f``), or a dash as wide."""
    width = int(spec.split(",")[0].split(".")[0])
    return f"{'-':>{width}}" if value is None else f"{value:{spec}}"


def print_percentiles(label: str, row: dict[str, float], floor: dict[str, float] | None = None) -> None:
    """p50 p90 p99 max of ``row``; with ``floor``, each also as a multiple of the floor's."""
    cells = "".join(f"{row[k]:>8.1f}" for k in ("p50", "p90", "p99", "max"))
    if floor:
        cells += "   x floor " + " ".join(
            opt(ratio(row[k], floor.get(k)), "5.2f") for k in ("p50", "p90", "p99", "max")
        )
    print(f"{label:<44}{cells}")


# ------------------------------------------------------------------ baseline checkout


def short_commit(checkout: Path) -> str:
    """The short hash of a checkout's HEAD (git worktree); empty when git cannot tell."""
    return subprocess.run(
        ["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()


def describe(checkout: Path) -> str:
    """``path at <short commit>`` of a checkout (git worktree)."""
    return f"{checkout} at {short_commit(checkout) or 'an unknown commit'}"


def baseline_problem(checkout: str, script: str) -> str | None:
    """Why ``checkout`` cannot serve as the baseline (its ``script`` is missing), or None."""
    if not (Path(checkout) / script).is_file():
        return f"--baseline-worktree {checkout}: no {script} there"
    return None


def gate_knows(checkout: Path, name: str) -> bool:
    """Whether the checkout's contract loader names the field ``name``."""
    with contextlib.suppress(OSError):
        return name in (checkout / "worker" / "toolgate" / "gate" / "_contracts.py").read_text()
    return False


def knows_state_topic(checkout: Path) -> bool:
    """Whether the checkout's configuration has the state changelog topic."""
    with contextlib.suppress(OSError):
        text = (checkout / "worker" / "toolgate" / "_config.py").read_text()
        return re.search(r"^\s+state: str", text, re.M) is not None
    return False
