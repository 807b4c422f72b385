"""Wall-clock timing shared by the benchmarks: one helper, with device synchronisation."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch


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
# call after a prefill or after another graph: those first calls of a compiled graph run up to 4x
# slower, and a loop that runs one graph over and over never pays them. Measured, median over
# reps of the n-th call, ms: ref_baseline's cached step at 256 positions after an eager prefill
# 1.30, 0.74, 0.54, then 0.32-0.39 (2-core AMD EPYC, trained shape, random weights); Experiment
# 3's target step 0.89, 0.81, 0.70, then 0.62-0.66, its 4-row verification 1.25, 1.25, 0.96, then
# 0.82-0.84, the c1_dim64 draft step 0.50, 0.29, then 0.21 (2-core Xeon, context 53). Timed one
# call after a fresh prefill, the verification of k = 4 cost 1.53 target steps instead of 1.33
# (1.37 over 200 consecutive calls).
BURST_WARMUP = 3
BURST = 4


def burst_median_ms(fn: Callable[[], object], device: str = "cpu") -> float:
    """The median of BURST timed calls of fn, back to back after BURST_WARMUP untimed ones."""
    return statistics.median(timed_calls_ms(fn, BURST, BURST_WARMUP, device))


BURST_IN_WORDS = f"{BURST_WARMUP} untimed + {BURST} timed per rep, back to back"
