"""Is the machine busy? A load snapshot before and after each timing job, and a `contended` verdict.

Timings taken while other processes share the cores are slower and noisier, often by a large factor,
so they are flagged rather than silently reported.

The documented rule (CONTENDED_OTHER_SHARE, CONTENDED_LOAD_PER_CORE): a job is contended when,
before or after it, other processes used more than 25% of the machine's CPU time over a short
window (psutil), or, where psutil is missing, when the 1-minute load average exceeded 1.25 per
core (the job's own threads are idle at the snapshots, so the load is the neighbours').
"""

from __future__ import annotations

import os
import time

CONTENDED_OTHER_SHARE = 0.25
CONTENDED_LOAD_PER_CORE = 1.25


def _other_cpu_share(window_s: float) -> float | None:
    """Fraction of all cores' time that processes other than this one used during window_s."""
    try:
        import psutil
    except ImportError:
        return None
    me = psutil.Process()
    total_before, mine_before = psutil.cpu_times(), me.cpu_times()
    time.sleep(window_s)
    total_after, mine_after = psutil.cpu_times(), me.cpu_times()
    busy = sum(getattr(total_after, f) - getattr(total_before, f) for f in ("user", "system", "nice"))
    mine = (mine_after.user - mine_before.user) + (mine_after.system - mine_before.system)
    capacity = window_s * (psutil.cpu_count() or 1)
    return max(0.0, (busy - mine) / capacity)


def load_snapshot(window_s: float = 0.5) -> dict:
    """Load average (1, 5 min), cores, and the other processes' CPU share (None without psutil)."""
    load1, load5, _ = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    return {"loadavg_1m": load1, "loadavg_5m": load5, "cores": os.cpu_count() or 1,
            "other_cpu_share": _other_cpu_share(window_s), "unix_time": time.time()}


def is_contended(snapshot: dict) -> bool:
    share = snapshot.get("other_cpu_share")
    if share is not None:
        return share > CONTENDED_OTHER_SHARE
    return snapshot["loadavg_1m"] / snapshot["cores"] > CONTENDED_LOAD_PER_CORE


def rep_spread(values) -> float:
    """(max - min) / median of a timing's reps: how much the reps disagree."""
    values = sorted(float(v) for v in values)
    if not values:
        return float("nan")
    median = values[len(values) // 2] if len(values) % 2 else 0.5 * sum(values[len(values) // 2 - 1:][:2])
    return (values[-1] - values[0]) / median if median > 0 else float("nan")


def contention_stamp(before: dict, after: dict, spread: float | None = None) -> dict:
    """Provenance block of one timing job; contended if either snapshot was."""
    return {"load_before": before, "load_after": after, "rep_spread": spread,
            "contended": is_contended(before) or is_contended(after),
            "contended_rule": (f"other processes > {CONTENDED_OTHER_SHARE:.0%} of CPU (psutil), else "
                               f"1-min load > {CONTENDED_LOAD_PER_CORE} per core, before or after the job")}
