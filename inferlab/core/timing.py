"""Wall-clock timing shared by the benchmarks: one helper, with device synchronisation."""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable

import torch


def settle_heap() -> None:
    """Collects garbage once and moves every object alive now out of the collector's reach (gc.freeze),
    after a warm-up and before what is timed: with torch's compiler stack loaded a full collection walks
    millions of objects, and one that falls inside a timed decode adds its whole pause to that decode."""
    gc.collect()
    gc.freeze()


def synchronize(device: str) -> None:
    """Waits for queued device work, so a wall-clock interval covers the kernels it launched."""
    if device == "cuda":
        torch.cuda.synchronize()
    elif device == "mps":
        torch.mps.synchronize()


def timed_ms(fn: Callable[[], object], device: str = "cpu") -> tuple[object, float]:
    """Runs fn once; returns its result and the wall time in milliseconds."""
    synchronize(device)
    start = time.perf_counter()
    out = fn()
    synchronize(device)
    return out, (time.perf_counter() - start) * 1e3


def timed_calls_ms(fn: Callable[[], object], reps: int, warmup: int, device: str = "cpu") -> list[float]:
    """fn run warmup times untimed (a compiled call's first one compiles), then reps times timed; ms each."""
    for _ in range(warmup):
        fn()
    return [timed_ms(fn, device)[1] for _ in range(reps)]


# A forward is timed as a decode loop runs it, back to back on a warm session, not as the first
# call after a prefill or after another graph: those first calls of a compiled graph run several times
# slower, and a loop that runs one graph over and over never pays them. Timed one call after a fresh
# prefill, a verification's cost in target steps came out too high (measurements: docs/engines.md).
BURST_WARMUP = 3
BURST = 4


def burst_median_ms(fn: Callable[[], object], device: str = "cpu") -> float:
    """The median of BURST timed calls of fn, back to back after BURST_WARMUP untimed ones."""
    return statistics.median(timed_calls_ms(fn, BURST, BURST_WARMUP, device))


BURST_IN_WORDS = f"{BURST_WARMUP} untimed + {BURST} timed per rep, back to back"
