"""Experiment 3 on real checkpoints: one group (draft, k) and its target-only baseline.

The decoding itself is in inferlab.speculative.decode; this module runs the grid of prompts x seeds x
reruns and times it. inferlab.speculative.summary turns the counters into the per-group table.
"""

from __future__ import annotations

from contextlib import ExitStack
from functools import partial
from typing import TextIO

import pandas as pd
import torch
from tqdm import tqdm

from inferlab.core.engine import EagerEngine, Engine
from inferlab.core.engine_rows import eager_call_counter, engine_columns
from inferlab.core.generate import generate
from inferlab.core.model import GPT
from inferlab.core.timing import BURST_WARMUP, burst_median_ms, settle_heap, timed_calls_ms, timed_ms
from inferlab.speculative.decode import (
    SamplingSettings,
    autoregressive_decode,
    draft_half_call,
    fused_rounds,
    sampled_steps,
    speculative_decode,
)
from inferlab.speculative.forwards import forward_calls, forward_timing_context, open_sessions_of
from inferlab.speculative.fused import draft_forward_form


def _bar(total: int, desc: str, progress_file: TextIO | None) -> tqdm:
    return tqdm(total=total, desc=desc, file=progress_file, mininterval=2.0, ascii=True,
                disable=progress_file is None)


def _speculative_run(target: GPT, draft: GPT, prompt: dict, seed: int, new_tokens: int, k: int,
                     settings: SamplingSettings, engine: Engine) -> dict:
    generator = torch.Generator().manual_seed(seed)
    eager_calls = eager_call_counter(engine)
    result, wall_ms = timed_ms(partial(speculative_decode, target, draft, prompt["ids"], new_tokens, k, settings,
                                       generator, engine=engine))
    s = result.stats
    return {"k": k, "prompt_index": prompt["prompt_index"], "prompt": prompt["prompt"],
            "prompt_tokens": len(prompt["ids"]), "prompt_unk": prompt["prompt_unk"], "seed": seed,
            "new_tokens": new_tokens, "rounds": s.rounds, "target_forwards": s.target_forwards,
            "draft_forwards": s.draft_forwards, "drafted": s.drafted, "proposed": s.proposed,
            "accepted": s.accepted, "generated": s.generated,
            "overlap_sum": s.overlap_sum, "overlap_sum_drafted": s.overlap_sum_drafted,
            "wall_ms": wall_ms, "ms_per_token": wall_ms / new_tokens, "prefill_ms": s.prefill_ms,
            "accepted_per_round": s.accepted_per_round, "eager_calls": eager_calls(),
            "new_token_ids": result.new_tokens(len(prompt["ids"]))}


def _target_only_run(target: GPT, prompt: dict, seed: int, new_tokens: int, settings: SamplingSettings,
                     engine: Engine) -> dict:
    generator = torch.Generator().manual_seed(seed)
    timings: dict[str, float] = {}
    eager_calls = eager_call_counter(engine)
    tokens, wall_ms = timed_ms(partial(autoregressive_decode, target, prompt["ids"], new_tokens, settings,
                                       generator, engine=engine, timings=timings))
    return {"prompt_index": prompt["prompt_index"], "prompt": prompt["prompt"],
            "prompt_tokens": len(prompt["ids"]), "seed": seed, "new_tokens": new_tokens,
            "target_forwards": new_tokens, "wall_ms": wall_ms, "ms_per_token": wall_ms / new_tokens,
            "prefill_ms": timings["prefill_ms"], "eager_calls": eager_calls(),
            "new_token_ids": tokens[0, len(prompt["ids"]):].tolist()}


def _decoders(target: GPT, draft: GPT, new_tokens: int, k: int, settings: SamplingSettings,
              engine: Engine) -> dict:
    """The group's two decoders, each (prompt, seed) -> its run's row."""
    return {
        "speculative": partial(_speculative_run, target, draft, new_tokens=new_tokens, k=k, settings=settings,
                               engine=engine),
        "target_only": partial(_target_only_run, target, new_tokens=new_tokens, settings=settings, engine=engine),
    }


def _run_each_once(decoders: dict, prompt: dict) -> None:
    """One untimed run of each decoder: it warms the allocator and kernels."""
    for decode in decoders.values():
        decode(prompt, 0)


def build_target_only_graphs(target: GPT, prompts: list[dict], new_tokens: int, settings: SamplingSettings,
                             engine: Engine) -> None:
    """Runs target-only sampling once over every prompt, and binds its step in every context bucket a decode
    of any seed can reach: on an engine that builds, that builds the packages every group's baseline runs."""
    for prompt in prompts:
        _target_only_run(target, prompt, 0, new_tokens, settings, engine)
        with open_sessions_of(engine, [target], len(prompt["ids"]) + new_tokens) as (session,):
            steps = sampled_steps(engine, session, settings)
            steps.bind_every_bucket(len(prompt["ids"]), len(prompt["ids"]) + new_tokens - 1)


def build_group_graphs(target: GPT, draft: GPT, prompts: list[dict], new_tokens: int, k: int,
                       settings: SamplingSettings, engine: Engine) -> None:
    """Runs once everything a group job runs on `engine`: each decoder over every prompt, a round in every
    context bucket a decode of any seed can reach (each bucket is a graph of its own), greedy identity and
    the forward timing."""
    decoders = _decoders(target, draft, new_tokens, k, settings, engine)
    for prompt in prompts:
        _run_each_once(decoders, prompt)
        first, length = len(prompt["ids"]), len(prompt["ids"]) + new_tokens + k
        with open_sessions_of(engine, [target, draft], length) as (target_session, draft_session):
            rounds = fused_rounds(engine, target_session, draft_session, k, settings)
            rounds.bind_every_bucket(max(first, 2) + k, first + new_tokens - 1 + k)
    run_greedy_identity(target, draft, prompts, new_tokens, k, engine=engine)
    run_forward_timing(target, draft, forward_timing_context(prompts, new_tokens), k, 0, engine=engine,
                       settings=settings)


def run_group(target: GPT, draft: GPT, prompts: list[dict], seeds: list[int], new_tokens: int, k: int,
              settings: SamplingSettings, timing_reps: int, progress_file: TextIO | None = None,
              engine: Engine | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Speculative sampling and its baseline, target-only sampling, for every prompt x seed,
    timing_reps times each, on `engine`: (speculative runs, target-only runs).

    Each prompt x seed runs both decoders back to back, the first of the two alternating from one
    pair to the next (column ran_first), so the wall-clock speedup divides two timings taken
    moments apart in one job. Timed in separate jobs, they could differ by the machine's drift
    alone: a shared VM's speed can move several-fold between the jobs of one run without the
    contention check (load and steal) seeing it.

    Reruns repeat the same seed, so their tokens and counters are identical (CPU decoding is
    deterministic); only wall_ms differs. One untimed run of each decoder over every prompt first warms
    the allocator, the kernels and (on the compiled engine) each prompt's prefill package.
    """
    engine = engine or EagerEngine()
    decoders = _decoders(target, draft, new_tokens, k, settings, engine)
    for prompt in prompts:  # each prompt's own prefill is a package of its own on the compiled engine
        _run_each_once(decoders, prompt)
    settle_heap()
    rows: dict[str, list[dict]] = {name: [] for name in decoders}
    pairs = [(rep, prompt, seed) for rep in range(timing_reps) for prompt in prompts for seed in seeds]
    bar = _bar(len(pairs), f"k={k}: speculative and target-only", progress_file)
    for i, (rep, prompt, seed) in enumerate(pairs):
        order = list(decoders) if i % 2 == 0 else list(decoders)[::-1]
        for name in order:
            rows[name].append(decoders[name](prompt, seed) | {"rep": rep, "ran_first": name == order[0]})
        bar.update()
    bar.close()
    return tuple(pd.DataFrame(rows[name]).assign(**engine_columns(engine)) for name in decoders)


def run_greedy_identity(target: GPT, draft: GPT, prompts: list[dict], new_tokens: int, k: int,
                        engine: Engine | None = None) -> pd.DataFrame:
    """Speculative greedy on `engine` against the eager target-only greedy decoder, token for token;
    eager_calls counts the forwards of the speculative decode that ran eagerly on `engine` (the reference
    decodes on an eager engine of its own)."""
    engine = engine or EagerEngine()
    rows = []
    for prompt in prompts:
        ids = prompt["ids"]
        reference = generate(target, torch.tensor([ids]), new_tokens).new_tokens(len(ids))[0].tolist()
        eager_calls = eager_call_counter(engine)
        result = speculative_decode(target, draft, ids, new_tokens, k, SamplingSettings(greedy=True), engine=engine)
        produced = result.new_tokens(len(ids))
        mismatches = [i for i, (a, b) in enumerate(zip(produced, reference, strict=True)) if a != b]
        rows.append({"k": k, "prompt_index": prompt["prompt_index"], "prompt": prompt["prompt"],
                     "n_tokens": new_tokens, "identical": not mismatches,
                     "first_mismatch": mismatches[0] if mismatches else -1,
                     "rounds": result.stats.rounds, "proposed": result.stats.proposed,
                     "accepted": result.stats.accepted, "eager_calls": eager_calls()})
    return pd.DataFrame(rows).assign(**engine_columns(engine))


def run_forward_timing(target: GPT, draft: GPT, context: int, k: int, reps: int,
                       engine: Engine | None = None, settings: SamplingSettings | None = None) -> pd.DataFrame:
    """Cached forward times: a target step, a draft step, and the target's (k+1)-token verification;
    on an engine that runs fused rounds also the round's draft half, its k draft steps as one graph
    (role "draft_half"), which is what such a round pays for its drafts, with the form its projections
    take there (column draft_form, fused.draft_forward_form; None on the other rows).

    Each model has one session, prefilled once, and each case is warmed up.
    Each rep runs every case in turn as a burst (core/timing.burst_median_ms: untimed calls, then
    timed ones back to back, whose median it keeps); interleaved so a slow stretch of the machine hits all
    of them alike. A row's eager_calls counts the forwards of its burst that ran eagerly.
    """
    engine = engine or EagerEngine()
    settings = settings or SamplingSettings()
    rows = []
    with ExitStack() as sessions:
        target_calls = sessions.enter_context(forward_calls(target, context, (1, k + 1), engine))
        draft_calls = sessions.enter_context(forward_calls(draft, context, (1,), engine))
        cases = [("target", 1, target_calls[1]), ("draft", 1, draft_calls[1]), ("target", k + 1, target_calls[k + 1])]
        forms = {}
        if engine.runs_fused_rounds:
            draft_half = sessions.enter_context(draft_half_call(draft, context, k, settings, engine))
            cases.append(("draft_half", k, lambda: draft_half().tolist()))
            forms["draft_half"] = draft_forward_form(k)
        for _, _, call in cases:  # each case's first call loads (or, on an engine that builds, builds) its package
            timed_calls_ms(call, 0, warmup=BURST_WARMUP)
        for rep in range(reps):
            for role, n_tokens, call in cases:
                eager_calls = eager_call_counter(engine)
                ms = burst_median_ms(call)
                rows.append({"k": k, "role": role, "tokens_per_forward": n_tokens, "context": context, "rep": rep,
                             "forward_ms": ms, "draft_form": forms.get(role), "eager_calls": eager_calls()})
    return pd.DataFrame(rows).assign(**engine_columns(engine))
