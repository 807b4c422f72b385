"""Experiment 1: decoding with the KV cache against recomputing the whole sequence each step.

Four pieces, each testable on its own:
- timing: whole greedy generations in both modes, alternating so drift hits both
  (`time_generation`), and single decode steps at chosen sequence lengths (`time_steps`);
- the KV cache's size, measured from the cache tensors and checked against 2·L·d·bytes
  (`measure_kv_bytes_per_token`);
- the explanation, in torch-free modules the summary job reads: a least-squares fit of the
  uncached step time as a + b·positions (`inferlab.kvcache.summary`) and the lesson-1 FLOP
  count of the ratio (`inferlab.kvcache.flops`);
- a torch.profiler breakdown of one cached step into time inside operators and time
  outside them (`profile_cached_step`), and on the compiled engine where a step's time goes:
  our Python around the package's call, the package's own code between kernels, and its kernels
  (`compiled_step_split`).

Passes and positions are counted as in `inferlab.kvcache.flops`'s docstring.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import TextIO

import numpy as np
import pandas as pd
import torch
from torch.profiler import ProfilerActivity, profile, record_function
from tqdm import tqdm

from inferlab.core.config import kv_bytes_per_token
from inferlab.core.engine import PACKAGE_CALL, CompiledEngine, EagerEngine, Engine, own_rows
from inferlab.core.engine_rows import eager_call_counter, engine_columns
from inferlab.core.generate import decode_one_token, generate, prefill
from inferlab.core.model import GPT
from inferlab.core.timing import BURST_WARMUP, burst_median_ms, settle_heap, synchronize, timed_calls_ms, timed_ms
from inferlab.kvcache.step_split import STEP_SPLIT_COLUMNS

MODES = ("cache", "no_cache")
STEP_LABEL = "inferlab::cached_decode_step"


# ---------------------------------------------------------------------------- timing


def _mode_order(rep: int) -> tuple[str, str]:
    # ABBA: even reps run the cache first, odd reps the recomputation first, so slow drift
    # (thermal, a neighbour's load) and any first-run advantage fall on both modes.
    return MODES if rep % 2 == 0 else MODES[::-1]


def time_generation(model: GPT, prompt: torch.Tensor, length: int, reps: int, warmup: int,
                    device: str, progress_file: TextIO | None = None, engine: Engine | None = None
                    ) -> pd.DataFrame:
    """Greedy generations of `length` tokens, `reps` per mode after `warmup` untimed pairs.

    Both modes run on `engine` (eager when None); loading its packages falls in the warm-up, which
    must be >= 1 for a compiled engine. One row per (rep, mode). same_output compares the
    tokens of the two modes within a rep; eager_calls counts the row's own forwards that ran eagerly
    (on the compiled engine, the prompt's when its length has no package). Afterwards the KV cache's
    bytes per token are measured and checked (check_kv_bytes).
    """
    engine = engine or EagerEngine()
    rows = []
    bar = tqdm(total=2 * (warmup + reps), desc=f"kvcache len={length}", file=progress_file,
               disable=progress_file is None, mininterval=2.0, ascii=True)
    for _ in range(warmup):
        for mode in MODES:
            generate(model, prompt, length, use_cache=mode == "cache", engine=engine)
            bar.update()
    settle_heap()
    for rep in range(reps):
        tokens = {}
        for mode in _mode_order(rep):
            eager_calls = eager_call_counter(engine)
            result, ms = timed_ms(lambda m=mode: generate(model, prompt, length, use_cache=m == "cache",
                                                          engine=engine), device)
            tokens[mode] = result.tokens
            rows.append({"rep": rep, "mode": mode, "total_ms": ms, "ms_per_token": ms / length,
                         "eager_calls": eager_calls()})
            bar.update()
        same = bool(torch.equal(tokens["cache"], tokens["no_cache"]))
        for row in rows[-2:]:
            row["same_output"] = same
    bar.close()
    kv = measure_kv_bytes_per_token(model, prompt, length)
    check_kv_bytes(kv)
    table = pd.DataFrame(rows)
    table["kv_bytes_per_token"] = kv["kv_bytes_per_token"]
    table["kv_bytes_per_token_theory"] = kv["kv_bytes_per_token_theory"]
    table.insert(0, "length", length)
    table.insert(0, "prompt_tokens", prompt.size(1))
    table.insert(0, "threads", torch.get_num_threads())
    table.insert(0, "device", device)
    return table.assign(**engine_columns(engine))


def step_positions(prompt_len: int, max_new_tokens: int, points: int) -> list[int]:
    """Sequence lengths spanning what an uncached generation of max_new_tokens runs over."""
    lo, hi = prompt_len, prompt_len + max_new_tokens - 1
    if points < 2 or hi == lo:
        return [hi]
    return sorted({round(lo + (hi - lo) * i / (points - 1)) for i in range(points)})


def steps_sequence(model: GPT, prompt: torch.Tensor, max_length: int, points: int) -> tuple[torch.Tensor, list[int]]:
    """The tokens a real greedy generation of max_length runs over, and the step_positions timed on them."""
    return generate(model, prompt, max_length).tokens, step_positions(prompt.size(1), max_length, points)


def build_kvcache_graphs(model: GPT, prompt: torch.Tensor, max_length: int, points: int, device: str,
                         engine: Engine) -> None:
    """Runs once every graph Experiment 1 runs on `engine` (on an engine that builds, that builds their
    packages): both modes of the longest generation (every shorter one's graphs are among its), each timed
    step, and the profiled step with its kernel events."""
    time_generation(model, prompt, max_length, 0, 1, device, engine=engine)
    sequence, positions = steps_sequence(model, prompt, max_length, points)
    time_steps(model, sequence, positions, 0, 1, device, engine=engine)
    profile_cached_step(model, sequence, positions[len(positions) // 2], 1, device, engine=engine)


def _cached_step_fn(engine: Engine, model: GPT, sequence: torch.Tensor, positions: int
                    ) -> tuple[Callable[[], object], Callable[[], None]]:
    """(step, close). Cache filled with the first positions-1 tokens; the timed step decodes the
    last one, attending over `positions` keys, exactly like a step of a cached generation."""
    session = engine.open(model, sequence.size(0), positions)
    if positions > 1:
        session.fill(sequence[:, : positions - 1])
    token = own_rows(sequence[:, positions - 1: positions])  # its own row, as a decode's step passes it
    return (lambda: session.step(token, positions - 1)), session.close


def _uncached_step_fn(engine: Engine, model: GPT, sequence: torch.Tensor, positions: int
                      ) -> tuple[Callable[[], object], Callable[[], None]]:
    prefix = sequence[:, :positions]
    return (lambda: engine.recompute_last(model, prefix)), (lambda: None)


def time_steps(model: GPT, sequence: torch.Tensor, positions: list[int], reps: int, warmup: int,
               device: str, progress_file: TextIO | None = None, engine: Engine | None = None) -> pd.DataFrame:
    """Single forward passes: uncached over `positions` tokens, cached for one token after them.

    sequence: (1, >= max(positions)) tokens to run on. One row per (rep, mode, positions). Each
    (rep, positions, mode) fills its cache once and times its step as a decode loop runs it, in a
    burst (core/timing.burst_median_ms); the `warmup` reps before run each step once, untimed, so
    that a compiled engine loads its packages outside them. eager_calls counts the forwards of a row's
    own work that ran eagerly: its cache fill (on the compiled engine, eager unless its length has a
    package) and every call of its burst.
    """
    engine = engine or EagerEngine()
    if max(positions) > sequence.size(1):
        raise ValueError(f"sequence of {sequence.size(1)} tokens is shorter than {max(positions)}")
    rows = []
    bar = tqdm(total=(warmup + reps) * len(positions), desc="kvcache steps", file=progress_file,
               disable=progress_file is None, mininterval=2.0, ascii=True)
    for rep in range(-warmup, reps):
        for n in positions:
            for mode in _mode_order(rep + n):
                make_step = _cached_step_fn if mode == "cache" else _uncached_step_fn
                eager_calls = eager_call_counter(engine)
                step, close = make_step(engine, model, sequence, n)
                try:
                    if rep < 0:
                        step()
                        continue
                    step_ms = burst_median_ms(step, device)
                finally:
                    close()
                rows.append({"rep": rep, "mode": mode, "positions": n, "step_ms": step_ms,
                             "eager_calls": eager_calls()})
            bar.update()
    bar.close()
    table = pd.DataFrame(rows)
    table.insert(0, "threads", torch.get_num_threads())
    table.insert(0, "device", device)
    return table.assign(**engine_columns(engine))


# ---------------------------------------------------------------------------- KV cache size


@torch.no_grad()
def measure_kv_bytes_per_token(model: GPT, prompt: torch.Tensor, new_tokens: int) -> dict:
    """Fills a cache by greedy decoding, then measures bytes per cached token from the tensors.

    The filled prefix is found from the data (positions whose keys are not all zero), not from
    the loop counter, so a cache that skipped or duplicated writes would show up here.
    """
    batch, total = prompt.size(0), prompt.size(1) + new_tokens
    model.setup_caches(batch, total)
    try:
        logits = prefill(model, prompt)
        position = prompt.size(1)
        for _ in range(new_tokens - 1):
            token = logits.argmax(-1, keepdim=True)  # (B, 1)
            logits = decode_one_token(model, token, position)
            position += 1
        tensors = model.kv_cache_tensors()  # each (B, nh, S, hs)
        written = tensors[0].ne(0).any(dim=(0, 1, 3))  # (S,)
        filled = int(written.sum())
        if not bool(written[:filled].all()):
            raise RuntimeError("the KV cache's written positions are not a contiguous prefix")
        prefix_bytes = sum(t[:, :, :filled].numel() * t.element_size() for t in tensors)
    finally:
        model.clear_caches()
    return {"filled_positions": filled, "expected_positions": position,
            "kv_bytes_per_token": prefix_bytes // (filled * batch) if prefix_bytes % (filled * batch) == 0
            else prefix_bytes / (filled * batch),
            "kv_bytes_per_token_theory": kv_bytes_per_token(model.config, tensors[0].dtype)}


def check_kv_bytes(measured: dict) -> None:
    """The cache must hold exactly 2·L·d·bytes per token (8,192 for the fp32 ref_baseline)."""
    if measured["filled_positions"] != measured["expected_positions"]:
        raise AssertionError(f"KV cache holds {measured['filled_positions']} positions, "
                             f"decoding wrote {measured['expected_positions']}")
    if measured["kv_bytes_per_token"] != measured["kv_bytes_per_token_theory"]:
        raise AssertionError(f"KV cache measures {measured['kv_bytes_per_token']} bytes/token, "
                             f"2·L·d·bytes gives {measured['kv_bytes_per_token_theory']}")


# ---------------------------------------------------------------------------- profiler


def operator_share(events, label: str = STEP_LABEL) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Splits each profiled step (a record_function `label`) into operator time and the rest.

    Operator time is the sum of the step's top-level operators' self+child CPU time, i.e. the
    wall time covered by aten ops; what remains is Python, nn.Module calls and dispatch
    between them. Returns (one row per step, one row per (step, top-level op)).
    """
    steps, ops = [], []
    for index, event in enumerate(e for e in events if e.name == label):
        children = list(event.cpu_children)
        op_us = sum(child.cpu_time_total for child in children)
        steps.append({"step": index, "wall_ms": event.cpu_time_total / 1e3, "op_ms": op_us / 1e3,
                      "top_level_ops": len(children)})
        ops.extend({"step": index, "op": child.name, "op_ms": child.cpu_time_total / 1e3} for child in children)
    if not steps:
        raise ValueError(f"no profiled step named {label!r} among the events")
    steps = pd.DataFrame(steps)
    steps["op_share"] = steps["op_ms"] / steps["wall_ms"]
    return steps, pd.DataFrame(ops, columns=["step", "op", "op_ms"])  # none under a package's step


def _total_ms(events) -> float:
    return sum(event.cpu_time_total for event in events) / 1e3


def compiled_step_split(step) -> dict:
    """Where one profiled compiled step's wall time (split_step_ms) goes, in ms, inflated by the
    profiler's own cost per event: the Python before and after the package's call (our engine's call
    path), the package's own code between kernels (its C++ wrapper: allocations, argument handling),
    and the kernels themselves (OpenMP fork/join included), each an event of a package compiled with
    cpp.enable_kernel_profile. The three parts sum to split_step_ms."""
    calls = [event for event in step.cpu_children if event.name == PACKAGE_CALL]
    if not calls:
        raise ValueError(f"no package call ({PACKAGE_CALL!r}) under the profiled step")
    kernels = [kernel for call in calls for kernel in call.cpu_children]
    return {"split_step_ms": step.cpu_time_total / 1e3, "entry_ms": (step.cpu_time_total / 1e3 - _total_ms(calls)),
            "graph_code_ms": _total_ms(calls) - _total_ms(kernels), "kernel_ms": _total_ms(kernels),
            "kernel_events": len(kernels)}


def _profiled_steps(step: Callable[[], object], steps: int, device: str):
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            with record_function(STEP_LABEL):
                step()
            synchronize(device)
    return prof.events()


def _compiled_split(engine: Engine, model: GPT, sequence: torch.Tensor, positions: int, steps: int,
                    device: str) -> dict:
    """compiled_step_split of the median of `steps` steps of a twin engine whose packages emit kernel
    events (packages of their own, so the engine whose steps are timed runs without them); NaN on eager."""
    if not isinstance(engine, CompiledEngine):
        return dict.fromkeys(STEP_SPLIT_COLUMNS, float("nan"))
    step, close = _cached_step_fn(engine.with_kernel_events(), model, sequence, positions)
    try:
        for _ in range(3):
            step()
        events = _profiled_steps(step, steps, device)
    finally:
        close()
    splits = pd.DataFrame([compiled_step_split(e) for e in events if e.name == STEP_LABEL])
    # the median step's own parts (not each part's median), so they still sum to its wall time
    median_step = splits.iloc[int((splits["split_step_ms"] - splits["split_step_ms"].median()).abs().argmin())]
    return {column: float(median_step[column]) for column in STEP_SPLIT_COLUMNS}


def profile_cached_step(model: GPT, sequence: torch.Tensor, positions: int, steps: int, device: str,
                        top: int = 10, engine: Engine | None = None) -> pd.DataFrame:
    """Profiles `steps` cached decode steps at `positions` (CPU activities) after a warm-up.

    One row per top operator (by time per step); the step-level columns (medians over the
    profiled steps) repeat on every row. unprofiled_step_ms times the same step without the
    profiler, whose own bookkeeping inflates wall_ms. On the compiled engine the STEP_SPLIT_COLUMNS
    say where a step's time goes (`compiled_step_split`); they are NaN on eager. eager_calls counts the
    forwards `engine` ran eagerly for these rows (the cache fill, the unprofiled and the profiled steps;
    the split's twin engine keeps its own count).
    """
    engine = engine or EagerEngine()
    counted = eager_call_counter(engine)
    step, close = _cached_step_fn(engine, model, sequence, positions)
    try:
        unprofiled = timed_calls_ms(step, steps, BURST_WARMUP, device)
        events = _profiled_steps(step, steps, device)
    finally:
        close()
    eager_calls = counted()
    split = _compiled_split(engine, model, sequence, positions, steps, device)
    per_step, ops = operator_share(events)
    n = len(per_step)
    top_ops = (ops.groupby("op").agg(calls=("op_ms", "size"), total_ms=("op_ms", "sum")).reset_index()
               .assign(calls_per_step=lambda d: d["calls"] / n, ms_per_step=lambda d: d["total_ms"] / n)
               .sort_values("ms_per_step", ascending=False).head(top).reset_index(drop=True))
    if top_ops.empty:  # a package's step calls no operator the profiler sees: one row keeps the step's columns
        top_ops = pd.DataFrame({"op": ["(none: the step ran inside its package)"], "calls_per_step": [0.0],
                                "ms_per_step": [0.0]})
    wall_ms = float(per_step["wall_ms"].median())
    return pd.DataFrame({
        "rank": np.arange(1, len(top_ops) + 1), "op": top_ops["op"],
        "calls_per_step": top_ops["calls_per_step"], "op_ms_per_step": top_ops["ms_per_step"],
        "share_of_wall": top_ops["ms_per_step"] / wall_ms,
        "device": device, "threads": torch.get_num_threads(), "positions": positions,
        "profiled_steps": n, "wall_ms": wall_ms, "op_ms": float(per_step["op_ms"].median()),
        "op_share": float(per_step["op_share"].median()),
        "outside_share": 1.0 - float(per_step["op_share"].median()),
        "top_level_ops_per_step": float(per_step["top_level_ops"].median()),
        "unprofiled_step_ms": statistics.median(unprofiled), **split, "eager_calls": eager_calls,
        **engine_columns(engine),
    })
