"""Experiment 1 (KV cache): equivalence of the two decoding modes, cache size, fit and FLOP arithmetic."""

import numpy as np
import pandas as pd
import pytest
import torch

from inferlab.core.config import GPTConfig, kv_bytes_per_token
from inferlab.core.engine import CompiledEngine, EagerEngine, make_engine
from inferlab.core.generate import generate
from inferlab.core.model import GPT
from inferlab.core.timing import BURST, BURST_WARMUP
from inferlab.kvcache import bench as kvbench
from inferlab.kvcache import flops as kvflops
from inferlab.kvcache import summary as kvsummary
from tests.test_speculative import CountingEngine

TINY = GPTConfig(vocab_size=61, d_model=32, n_layer=2, head_dim=16, max_seq_len=64)


def tiny_model(config: GPTConfig = TINY, seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    model = GPT(config).eval()
    # Larger weights than the init so the logits are not nearly flat and argmax ties cannot hide bugs.
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.3)
    return model


@pytest.mark.parametrize("batch", [1, 2])
def test_cached_and_uncached_greedy_agree(batch):
    model = tiny_model()
    prompt = torch.randint(0, TINY.vocab_size, (batch, 5), generator=torch.Generator().manual_seed(1))
    cached = generate(model, prompt, 30, use_cache=True, keep_logits=True)
    uncached = generate(model, prompt, 30, use_cache=False, keep_logits=True)
    assert torch.equal(cached.tokens, uncached.tokens)
    assert len(cached.step_logits) == len(uncached.step_logits) == 30
    worst = max((a - b).abs().max().item() for a, b in zip(cached.step_logits, uncached.step_logits, strict=True))
    assert worst <= 1e-4
    # The tokens are not degenerate (a constant output would make the comparison vacuous).
    assert cached.new_tokens(5).unique().numel() > 3


@pytest.mark.parametrize("config", [TINY, GPTConfig(vocab_size=40, d_model=64, n_layer=3, head_dim=32,
                                                    max_seq_len=64)])
def test_kv_bytes_measured_from_cache_match_formula(config):
    model = tiny_model(config)
    measured = kvbench.measure_kv_bytes_per_token(model, torch.tensor([[1, 2, 3]]), 10)
    assert measured["filled_positions"] == measured["expected_positions"] == 3 + 10 - 1
    assert measured["kv_bytes_per_token"] == measured["kv_bytes_per_token_theory"]
    assert measured["kv_bytes_per_token"] == 2 * config.n_layer * config.d_model * 4
    kvbench.check_kv_bytes(measured)
    assert not model.has_cache


def test_ref_baseline_cache_is_8192_bytes_per_token():
    assert kv_bytes_per_token(GPTConfig()) == 8192


def test_check_kv_bytes_rejects_mismatch():
    with pytest.raises(AssertionError, match="bytes/token"):
        kvbench.check_kv_bytes({"filled_positions": 4, "expected_positions": 4,
                                "kv_bytes_per_token": 4096.0, "kv_bytes_per_token_theory": 8192})
    with pytest.raises(AssertionError, match="positions"):
        kvbench.check_kv_bytes({"filled_positions": 3, "expected_positions": 4,
                                "kv_bytes_per_token": 8192.0, "kv_bytes_per_token_theory": 8192})


def test_time_generation_rows_alternate_and_compare_outputs():
    model = tiny_model()
    table = kvbench.time_generation(model, torch.tensor([[1, 2, 3, 4]]), 6, reps=3, warmup=1, device="cpu")
    assert len(table) == 6
    assert list(table["mode"]) == ["cache", "no_cache", "no_cache", "cache", "cache", "no_cache"]
    assert table["same_output"].all()
    assert (table["kv_bytes_per_token"] == 2 * TINY.n_layer * TINY.d_model * 4).all()
    assert np.allclose(table["ms_per_token"], table["total_ms"] / 6)
    assert set(table.columns) >= {"device", "threads", "length", "mode", "rep", "total_ms", "ms_per_token",
                                  "same_output", "kv_bytes_per_token"}


def test_time_steps_covers_positions_and_modes():
    model = tiny_model()
    sequence = generate(model, torch.tensor([[1, 2, 3]]), 20).tokens
    positions = kvbench.step_positions(3, 20, 4)
    assert positions == [3, 9, 16, 22]
    steps = kvbench.time_steps(model, sequence, positions, reps=2, warmup=1, device="cpu")
    assert len(steps) == 2 * 2 * 4
    assert set(steps["mode"]) == {"cache", "no_cache"} and (steps["step_ms"] > 0).all()
    assert not model.has_cache


class StepLog(CountingEngine):
    """CountingEngine that also logs each uncached step, as (d_model, positions, None)."""

    def recompute_last(self, model, sequence):
        self.forwards.append((model.config.d_model, sequence.size(1), None))
        return super().recompute_last(model, sequence)


def test_time_steps_fills_each_cache_once_and_times_its_step_back_to_back():
    """Each timed cell is one prefill, then the step's calls in one burst, as a decode loop runs
    it; a warm-up rep runs each step once."""
    model, engine, positions = tiny_model(), StepLog(), [3, 9]
    sequence = generate(model, torch.tensor([[1, 2, 3]]), 12).tokens
    kvbench.time_steps(model, sequence, positions, reps=2, warmup=1, device="cpu", engine=engine)
    d, expected = model.config.d_model, []
    for rep in range(-1, 2):
        calls = 1 if rep < 0 else BURST_WARMUP + BURST
        for n in positions:
            for mode in kvbench._mode_order(rep + n):
                prefill = [(d, n - 1, 0)] if mode == "cache" else []
                expected += prefill + [(d, 1, n - 1) if mode == "cache" else (d, n, None)] * calls
    assert engine.forwards == expected
    assert engine.opened == [d] * 3 * len(positions)


def test_eager_rows_count_every_forward_of_their_own_work():
    """On the eager engine every forward is an eager call; each row counts its own: a generation of n tokens n
    forwards (the prompt, then n - 1 steps; or n uncached passes), a step probe its fill and its burst, the
    profile its fill and every step it ran. The engine's total covers the warm-ups as well."""
    model, engine, prompt = tiny_model(), EagerEngine(), torch.tensor([[1, 2, 3, 4]])
    table = kvbench.time_generation(model, prompt, 6, reps=2, warmup=1, device="cpu", engine=engine)
    assert table["eager_calls"].tolist() == [6] * 4
    assert engine.eager_calls == 6 * 2 * 3  # two modes, a warm-up rep and two timed ones
    sequence = generate(model, prompt, 12).tokens
    steps = kvbench.time_steps(model, sequence, [3, 9], reps=2, warmup=1, device="cpu", engine=EagerEngine())
    burst = BURST_WARMUP + BURST
    assert steps.set_index(["rep", "positions", "mode"])["eager_calls"].to_dict() == {
        (rep, n, mode): burst + (mode == "cache") for rep in range(2) for n in (3, 9) for mode in kvbench.MODES}
    profile = kvbench.profile_cached_step(model, sequence, 10, steps=2, device="cpu", top=3)
    assert set(profile["eager_calls"]) == {1 + BURST_WARMUP + 2 + 2}  # fill, warm-up, unprofiled, profiled


def test_compiled_rows_count_the_forwards_that_found_no_package(tmp_path):
    """On the compiled engine a row's eager_calls are the forwards of its own work that found no package. A
    compile job builds a 4-token prompt's forward and the decode step; an engine that only loads them runs a
    5-token prompt, and every uncached pass, op by op, and the rest from those packages."""
    model = tiny_model(GPTConfig(vocab_size=61, d_model=32, n_layer=1, head_dim=16, max_seq_len=16))
    four, five = torch.tensor([[1, 2, 3, 4]]), torch.tensor([[1, 2, 3, 4, 5]])
    fast_compile: dict = {}  # inductor's defaults: no autotuning
    builder = CompiledEngine(build_dir=tmp_path, inductor_options=fast_compile)
    session = builder.open(model)
    session.forward(four, 0)  # builds the prompt's package
    session.forward(torch.tensor([[5]]), 4)  # ... and the step's
    session.close()
    assert len(builder.built) == 2 and builder.eager_calls == 0
    loader = make_engine("compiled", graph_dirs=[tmp_path], inductor_options=fast_compile)
    table = kvbench.time_generation(model, five, 3, reps=2, warmup=1, device="cpu", engine=loader)
    # cached: the prompt eager, its two steps packaged; uncached: all three passes eager
    assert table.groupby("mode")["eager_calls"].agg(list).to_dict() == {"cache": [1, 1], "no_cache": [3, 3]}
    sequence = generate(model, five, 3).tokens
    steps = kvbench.time_steps(model, sequence, [5, 6], reps=1, warmup=1, device="cpu", engine=loader)
    burst = BURST_WARMUP + BURST
    # a cache is filled a step at a time (session.fill): the 4 steps that end in the first bucket (4 of 16
    # slots) have no package there; the timed steps (ending at 5 and 6, in the second) have theirs
    assert steps.set_index(["positions", "mode"])["eager_calls"].to_dict() == {
        (5, "cache"): 4, (6, "cache"): 4, (5, "no_cache"): burst, (6, "no_cache"): burst}
    # summarised per (length, mode): the reps' total, NaN (unknown, not a smaller total) where any lacks a count
    summary = kvsummary.summarize_timings(table)
    assert summary.set_index("mode")["eager_calls"].to_dict() == {"cache": 2, "no_cache": 6}
    assert kvsummary.summarize_timings(table.drop(columns="eager_calls"))["eager_calls"].isna().all()
    uncounted = table["eager_calls"].where((table["mode"] == "no_cache") | (table["rep"] == 0))
    assert kvsummary.summarize_timings(table.assign(eager_calls=uncounted))["eager_calls"].isna().tolist() == [
        True, False]  # rep 1's cached generation lacks its count: the cache row's total is unknown


def test_fit_recovers_a_and_b_from_synthetic_step_times():
    rng = np.random.default_rng(0)
    positions = np.repeat(np.arange(5, 261, 16), 5)
    times = 4.0 + 0.03 * positions + rng.normal(0, 0.05, positions.size)
    a, b, r2 = kvsummary.fit_line(positions, times)
    assert a == pytest.approx(4.0, abs=0.05)
    assert b == pytest.approx(0.03, rel=0.02)
    assert r2 > 0.99


def test_fit_from_totals_recovers_a_and_b():
    prompt_len, lengths = 5, [32, 64, 128, 256]
    totals = [kvsummary.predicted_no_cache_ms(2.5, 0.01, prompt_len, n) for n in lengths]
    # by hand for n=32: 32·2.5 + 0.01·(5 + ... + 36)
    assert totals[0] == pytest.approx(32 * 2.5 + 0.01 * sum(range(5, 37)))
    a, b, r2 = kvsummary.fit_totals(lengths, totals, prompt_len)
    assert (a, b) == pytest.approx((2.5, 0.01))
    assert r2 == pytest.approx(1.0)


def test_fit_table_predicts_ratio_from_fit():
    a, b, cache_step, prompt_len = 3.0, 0.02, 2.0, 5
    rows = []
    for length in (32, 64):
        for rep in range(3):
            for mode, total in (("cache", cache_step * length),
                                ("no_cache", kvsummary.predicted_no_cache_ms(a, b, prompt_len, length))):
                rows.append({"device": "cpu", "threads": 1, "prompt_tokens": prompt_len, "length": length,
                             "rep": rep, "mode": mode, "total_ms": total * (1 + 0.01 * rep),
                             "ms_per_token": total / length, "same_output": True, "kv_bytes_per_token": 8192.0})
    timings = pd.DataFrame(rows)
    positions = np.arange(5, 70, 8)
    steps = pd.DataFrame([{"mode": m, "positions": p, "rep": 0, "step_ms": (a + b * p) if m == "no_cache"
                           else cache_step} for m in ("cache", "no_cache") for p in positions])
    summary = kvsummary.summarize_timings(timings)
    fit = kvsummary.fit_table(timings, summary, steps, GPTConfig())
    assert fit["a_ms"].iloc[0] == pytest.approx(a) and fit["b_ms_per_position"].iloc[0] == pytest.approx(b)
    measured = summary[summary["mode"] == "cache"].set_index("length")["speed_ratio"]
    assert np.allclose(fit["predicted_ratio"], measured.loc[fit["length"]].to_numpy(), rtol=0.02)
    assert np.allclose(fit["prediction_error"], 0.0, atol=0.02)
    assert (fit["flop_estimate_ratio"] > measured.loc[fit["length"]].to_numpy()).all()
    assert len(summary) == 4 and summary["same_output_all"].all()
    row = summary[(summary["length"] == 64) & (summary["mode"] == "cache")].iloc[0]
    assert row["total_ms_min"] == pytest.approx(128.0) and row["total_ms_max"] == pytest.approx(128.0 * 1.02)


def test_flop_counts():
    config = GPTConfig()
    # Matmul weights plus RMSNorm weights are every parameter of ref_baseline.
    assert kvflops.matmul_params(config) + (2 * config.n_layer + 1) * config.d_model == 3_688_704
    # A causal forward over T tokens costs what T single cached steps cost.
    assert kvflops.forward_flops(config, 20) == pytest.approx(
        sum(kvflops.forward_flops(config, 1, t) for t in range(20)))
    ratios = [kvflops.flop_estimate_ratio(config, 5, n) for n in (32, 64, 128, 256)]
    assert all(r2 > r1 > 1 for r1, r2 in zip(ratios, ratios[1:], strict=False))
    # Without attention the ratio is Σ(P+j) / (P + n - 1) positions' worth of dense FLOPs.
    dense_only = sum(5 + j for j in range(256)) / (5 + 255)
    assert ratios[-1] == pytest.approx(dense_only, rel=0.15)


def test_profile_splits_step_into_operator_and_other_time():
    model = tiny_model()
    sequence = generate(model, torch.tensor([[1, 2, 3]]), 12).tokens
    table = kvbench.profile_cached_step(model, sequence, 10, steps=2, device="cpu", top=5)
    assert len(table) == 5 and table["profiled_steps"].iloc[0] == 2
    share = table["op_share"].iloc[0]
    assert 0 < share <= 1 and table["outside_share"].iloc[0] == pytest.approx(1 - share)
    assert table["op_ms"].iloc[0] <= table["wall_ms"].iloc[0]
    assert "aten::linear" in set(table["op"])
    assert table["top_level_ops_per_step"].iloc[0] > 10
    assert not model.has_cache


def test_a_steps_bound_reads_every_weight_and_the_cache_before_it_once():
    from inferlab.core.config import GPTConfig
    from inferlab.kvcache.flops import forward_flops
    from inferlab.kvcache.roofline import step_bound_ms

    config = GPTConfig(d_model=64, n_layer=2, vocab_size=100, max_seq_len=64)
    weights, cache = 10_000 * 4, 2 * 2 * 64 * 4 * 10  # fp32 weights; K and V of 2 layers at 10 positions
    assert step_bound_ms(config, 10_000, 10, 1, 1e9, 1e15) == pytest.approx((weights + cache) / 1e9 * 1e3)
    assert step_bound_ms(config, 10_000, 10, 3, 1e15, 1e6) == pytest.approx(forward_flops(config, 3, 10) / 1e6 * 1e3)
