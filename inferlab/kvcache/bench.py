"""Experiment 1: decoding with the KV cache against recomputing the whole sequence each step.

Four pieces, each testable on its own:
- timing: whole greedy generations in both modes, alternating so drift hits both
  (`time_generation`), and single decode steps at chosen sequence lengths (`time_steps`);
- the KV cache's size, measured from the cache tensors and checked against 2·L·d·bytes
  (`measure_kv_bytes_per_token`);
- the explanation: a least-squares fit of the uncached step time as a + b·positions
  (`fit_line`, `fit_table`) and the lesson-1 FLOP count of the ratio (`flop_estimate_ratio`);
- a torch.profiler breakdown of one cached step into time inside operators and time
  outside them (`profile_cached_step`).

Vocabulary: a generation of `length` new tokens after a prompt of P tokens takes `length`
forward passes. Uncached, pass j (0-based) runs over P + j positions; cached, pass 0 is the
prefill over P positions and pass j >= 1 runs one token at position P + j - 1.
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

from inferlab.core.config import GPTConfig
from inferlab.core.engine import EagerEngine, Engine
from inferlab.core.engine_rows import engine_columns
from inferlab.core.generate import decode_one_token, generate, prefill
from inferlab.core.model import GPT, kv_bytes_per_token
from inferlab.core.timing import synchronize, timed_ms

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

    Both modes run on `engine` (eager when None); its compile time falls in the warm-up, which
    must be >= 1 for a compiled engine. One row per (rep, mode). same_output compares the
    tokens of the two modes within a rep. Afterwards the KV cache's bytes per token are
    measured and checked (check_kv_bytes).
    """
    engine = engine or EagerEngine()
    rows = []
    bar = tqdm(total=2 * (warmup + reps), desc=f"kvcache len={length}", file=progress_file,
               disable=progress_file is None, mininterval=2.0, ascii=True)
    for _ in range(warmup):
        for mode in MODES:
            generate(model, prompt, length, use_cache=mode == "cache", engine=engine)
            bar.update()
    for rep in range(reps):
        tokens = {}
        for mode in _mode_order(rep):
            result, ms = timed_ms(lambda m=mode: generate(model, prompt, length, use_cache=m == "cache",
                                                          engine=engine), device)
            tokens[mode] = result.tokens
            rows.append({"rep": rep, "mode": mode, "total_ms": ms, "ms_per_token": ms / length})
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


def _cached_step_fn(engine: Engine, model: GPT, sequence: torch.Tensor, positions: int
                    ) -> tuple[Callable[[], object], Callable[[], None]]:
    """(step, close). Cache filled with the first positions-1 tokens; the timed step decodes the
    last one, attending over `positions` keys, exactly like a step of a cached generation."""
    session = engine.open(model, sequence.size(0), positions)
    if positions > 1:
        session.forward(sequence[:, : positions - 1], 0)
    token = sequence[:, positions - 1: positions]
    return (lambda: session.forward(token, positions - 1)), session.close


def _uncached_step_fn(engine: Engine, model: GPT, sequence: torch.Tensor, positions: int
                      ) -> tuple[Callable[[], object], Callable[[], None]]:
    prefix = sequence[:, :positions]
    return (lambda: engine.recompute_last(model, prefix)), (lambda: None)


def time_steps(model: GPT, sequence: torch.Tensor, positions: list[int], reps: int, warmup: int,
               device: str, progress_file: TextIO | None = None, engine: Engine | None = None) -> pd.DataFrame:
    """Single forward passes: uncached over `positions` tokens, cached for one token after them.

    sequence: (1, >= max(positions)) tokens to run on. One row per (rep, mode, positions).
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
                step, close = make_step(engine, model, sequence, n)
                try:
                    _, ms = timed_ms(step, device)
                finally:
                    close()
                if rep >= 0:
                    rows.append({"rep": rep, "mode": mode, "positions": n, "step_ms": ms})
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


# ---------------------------------------------------------------------------- FLOPs


def matmul_params(config: GPTConfig) -> int:
    """Weights that take part in a matmul per token: the blocks' Linears plus the tied head."""
    per_layer = (4 + 2 * config.mlp_ratio) * config.d_model ** 2  # qkv 3d², proj d², MLP 2·r·d²
    return config.n_layer * per_layer + config.vocab_size * config.d_model


def forward_flops(config: GPTConfig, n_tokens: int, start: int = 0) -> float:
    """FLOPs of one forward over n_tokens at positions start..start+n_tokens-1 (causal).

    2 FLOPs per weight per token (the head runs on every position, as model() does), plus
    attention: Q·Kᵀ and A·V, 2·d FLOPs each per layer per (query, visible key) pair.
    """
    dense = 2.0 * n_tokens * matmul_params(config)
    visible_keys = n_tokens * start + n_tokens * (n_tokens + 1) / 2
    attention = 4.0 * config.n_layer * config.d_model * visible_keys
    return dense + attention


def generation_flops(config: GPTConfig, prompt_len: int, length: int, use_cache: bool) -> float:
    """All forward FLOPs of a greedy generation of `length` tokens (see the module docstring)."""
    if use_cache:
        return forward_flops(config, prompt_len) + sum(
            forward_flops(config, 1, prompt_len + j) for j in range(length - 1))
    return sum(forward_flops(config, prompt_len + j) for j in range(length))


def flop_estimate_ratio(config: GPTConfig, prompt_len: int, length: int) -> float:
    """Lesson 1's prediction of the no-cache / cache time ratio: the ratio of FLOPs."""
    return generation_flops(config, prompt_len, length, False) / generation_flops(config, prompt_len, length,
                                                                                  True)


# ---------------------------------------------------------------------------- fit


def fit_line(x, y) -> tuple[float, float, float]:
    """Least squares y = a + b·x; returns (a, b, r²)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    design = np.column_stack([np.ones_like(x), x])
    (a, b), *_ = np.linalg.lstsq(design, y, rcond=None)
    residual = y - (a + b * x)
    total = ((y - y.mean()) ** 2).sum()
    r2 = 1.0 - (residual ** 2).sum() / total if total > 0 else float("nan")
    return float(a), float(b), float(r2)


def step_positions_of_generation(prompt_len: int, length: int) -> np.ndarray:
    """Positions each uncached pass runs over: P, P+1, ..., P+length-1."""
    return prompt_len + np.arange(length)


def predicted_no_cache_ms(a: float, b: float, prompt_len: int, length: int) -> float:
    """total_ms(n) = Σ over the n uncached passes of (a + b·positions)."""
    return float((a + b * step_positions_of_generation(prompt_len, length)).sum())


def fit_totals(lengths, totals_ms, prompt_len: int) -> tuple[float, float, float]:
    """Fits a, b from whole-generation times: total = n·a + b·Σpositions, no intercept."""
    n = np.asarray(lengths, dtype=float)
    sums = np.array([step_positions_of_generation(prompt_len, int(k)).sum() for k in lengths], dtype=float)
    y = np.asarray(totals_ms, dtype=float)
    (a, b), *_ = np.linalg.lstsq(np.column_stack([n, sums]), y, rcond=None)
    residual = y - (a * n + b * sums)
    total = ((y - y.mean()) ** 2).sum()
    r2 = 1.0 - (residual ** 2).sum() / total if total > 0 else float("nan")
    return float(a), float(b), float(r2)


def paired_ratios(timings: pd.DataFrame) -> pd.DataFrame:
    """no_cache / cache total time for each (length, rep): the pairs ran back to back."""
    wide = timings.pivot_table(index=["length", "rep"], columns="mode", values="total_ms").reset_index()
    wide["speed_ratio"] = wide["no_cache"] / wide["cache"]
    return wide


def summarize_timings(timings: pd.DataFrame) -> pd.DataFrame:
    """Median/min/max per (length, mode); the speed ratio repeats on both rows of a length.

    speed_ratio is the median of the per-rep ratios (each pair ran back to back);
    ratio_of_medians is median(no_cache)/median(cache), for reference.
    """
    stats = (timings.groupby(["length", "mode"])
             .agg(reps=("rep", "nunique"),
                  total_ms_median=("total_ms", "median"), total_ms_min=("total_ms", "min"),
                  total_ms_max=("total_ms", "max"),
                  ms_per_token_median=("ms_per_token", "median"), ms_per_token_min=("ms_per_token", "min"),
                  ms_per_token_max=("ms_per_token", "max"),
                  same_output_all=("same_output", "all"),
                  kv_bytes_per_token=("kv_bytes_per_token", "first"))
             .reset_index())
    ratios = (paired_ratios(timings).groupby("length")["speed_ratio"]
              .agg(speed_ratio="median", speed_ratio_min="min", speed_ratio_max="max").reset_index())
    medians = stats.pivot(index="length", columns="mode", values="total_ms_median")
    ratios["ratio_of_medians"] = (medians["no_cache"] / medians["cache"]).reindex(ratios["length"]).to_numpy()
    meta = timings.groupby("length")[["device", "threads", "prompt_tokens"]].first().reset_index()
    return stats.merge(ratios, on="length").merge(meta, on="length")


def fit_table(timings: pd.DataFrame, summary: pd.DataFrame, steps: pd.DataFrame, config: GPTConfig) -> pd.DataFrame:
    """One row per length: the fit (repeated), the ratio it predicts, and the FLOP estimate.

    The main fit uses the single-step probe (uncached passes timed at several sequence
    lengths, every rep a point); a second fit from whole-generation totals is a cross-check.
    The measured times and ratio belong to `summary` (summarize_timings); they are read from
    it, not stored again, so each number lives in one table.
    """
    prompt_len = int(timings["prompt_tokens"].iloc[0])
    uncached = steps[steps["mode"] == "no_cache"]
    cached = steps[steps["mode"] == "cache"]
    a, b, r2 = fit_line(uncached["positions"], uncached["step_ms"])
    a_c, b_c, r2_c = fit_line(cached["positions"], cached["step_ms"])
    no_cache = timings[timings["mode"] == "no_cache"]
    a_t, b_t, r2_t = fit_totals(no_cache["length"], no_cache["total_ms"], prompt_len)
    rows = []
    for length, group in summary.groupby("length"):
        by_mode = group.set_index("mode")
        cache_ms = float(by_mode.loc["cache", "total_ms_median"])
        predicted_ms = predicted_no_cache_ms(a, b, prompt_len, int(length))
        rows.append({
            "length": int(length), "prompt_tokens": prompt_len,
            "a_ms": a, "b_ms_per_position": b, "r2": r2, "fit_points": len(uncached),
            "a_cache_ms": a_c, "b_cache_ms_per_position": b_c, "r2_cache": r2_c,
            "a_ms_from_totals": a_t, "b_ms_per_position_from_totals": b_t, "r2_from_totals": r2_t,
            "predicted_no_cache_total_ms": predicted_ms,
            # Share of the uncached generation that is the fixed per-step cost n·a.
            "fixed_share_no_cache": int(length) * a / predicted_ms,
            "predicted_ratio": predicted_ms / cache_ms,
            "prediction_error": predicted_ms / cache_ms / float(by_mode.loc["cache", "speed_ratio"]) - 1.0,
            "flop_estimate_ratio": flop_estimate_ratio(config, prompt_len, int(length)),
            "cache_flops_per_token": generation_flops(config, prompt_len, int(length), True) / length,
            "no_cache_flops_per_token": generation_flops(config, prompt_len, int(length), False) / length,
        })
    return pd.DataFrame(rows)


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
    return steps, pd.DataFrame(ops)


def profile_cached_step(model: GPT, sequence: torch.Tensor, positions: int, steps: int, device: str,
                        top: int = 10, engine: Engine | None = None) -> pd.DataFrame:
    """Profiles `steps` cached decode steps at `positions` (CPU activities) after a warm-up.

    One row per top operator (by time per step); the step-level columns (medians over the
    profiled steps) repeat on every row. unprofiled_step_ms times the same step without the
    profiler, whose own bookkeeping inflates wall_ms.
    """
    engine = engine or EagerEngine()
    step, close = _cached_step_fn(engine, model, sequence, positions)
    try:
        for _ in range(3):
            step()
        unprofiled = [timed_ms(step, device)[1] for _ in range(steps)]
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(steps):
                with record_function(STEP_LABEL):
                    step()
                synchronize(device)
    finally:
        close()
    per_step, ops = operator_share(prof.events())
    n = len(per_step)
    top_ops = (ops.groupby("op").agg(calls=("op_ms", "size"), total_ms=("op_ms", "sum")).reset_index()
               .assign(calls_per_step=lambda d: d["calls"] / n, ms_per_step=lambda d: d["total_ms"] / n)
               .sort_values("ms_per_step", ascending=False).head(top).reset_index(drop=True))
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
        "unprofiled_step_ms": statistics.median(unprofiled),
        **engine_columns(engine),
    })
