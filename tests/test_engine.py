"""Decode engines: the compiled engine decodes exactly like the eager one; a failed compile is stamped eager.

Compiling costs seconds per graph on a busy 2-core machine, so one module-wide engine serves
every test, and the models are tiny (graphs are reused per (model, token count)).
"""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from inferlab.core import engine as engine_module
from inferlab.core.engine import EagerEngine, make_engine
from inferlab.core.engine_rows import by_engine
from inferlab.core.generate import generate
from inferlab.jobs.contention import contention_stamp, is_contended, load_snapshot, rep_spread
from inferlab.kvcache.bench import time_generation
from inferlab.speculative.decode import SamplingSettings, speculative_decode
from inferlab.speculative.summary import best_groups_by_engine
from tests.test_speculative import similar_pair


@pytest.fixture(scope="module")
def compiled():
    engine = make_engine("compiled")
    if engine.engine_used != "compiled":
        pytest.skip(f"torch.compile unavailable here: {engine.engine_fallback_reason}")
    return engine


@pytest.fixture(scope="module")
def pair():
    return similar_pair()


def test_compiled_greedy_generation_matches_eager(compiled, pair):
    target, _ = pair
    prompt = torch.tensor([[3, 1, 4, 1]])
    eager = generate(target, prompt, 24, keep_logits=True, engine=EagerEngine())
    fast = generate(target, prompt, 24, keep_logits=True, engine=compiled)
    assert len(set(eager.new_tokens(4)[0].tolist())) > 2, "degenerate model: the test would be vacuous"
    assert torch.equal(eager.tokens, fast.tokens)
    torch.testing.assert_close(torch.stack(fast.step_logits), torch.stack(eager.step_logits), atol=1e-4, rtol=0)
    assert any(label.endswith(":T1:B1") for label in compiled.compile_ms), "the decode step was not compiled"


def test_compiled_speculative_greedy_identity_and_rollback(compiled, pair):
    """Greedy speculative decoding on the compiled engine equals target-only greedy decoding, and
    every round's cached logits (after rejections too) equal a fresh uncached forward."""
    target, draft = pair
    prompt, k = [3, 1, 4], 3
    reference = generate(target, torch.tensor([prompt]), 40).new_tokens(len(prompt))[0].tolist()
    trace: list[dict] = []
    result = speculative_decode(target, draft, prompt, 40, k, SamplingSettings(greedy=True), trace=trace,
                                engine=compiled)
    assert result.new_tokens(len(prompt)) == reference
    assert 0 < result.stats.accepted < result.stats.proposed, "need both acceptances and rejections"
    seq = result.tokens[0].tolist()
    with torch.no_grad():
        for entry in trace:
            n, drafts = entry["n"], entry["drafts"]
            context = torch.tensor([seq[:n] + drafts])
            torch.testing.assert_close(entry["target_logits"], target(context)[0, n - 1:], atol=1e-4, rtol=1e-4)
    assert any(label.endswith(f":T{k + 1}:B1") for label in compiled.compile_ms), "verify step not compiled"


def test_failed_compile_falls_back_and_stamps_eager(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("no C++ compiler found\nsecond line")

    monkeypatch.setattr(engine_module, "_smoke_compile", broken)
    engine = make_engine("compiled")
    assert isinstance(engine, EagerEngine)
    assert engine.engine_used == "eager"
    assert engine.stamp()["engine_fallback_reason"] == "RuntimeError: no C++ compiler found"


def test_unknown_engine_name_is_an_error():
    with pytest.raises(ValueError, match="engine must be one of"):
        make_engine("turbo")


def test_contention_flag_follows_the_documented_thresholds():
    quiet = {"loadavg_1m": 0.5, "cores": 2, "other_cpu_share": 0.05}
    busy = {**quiet, "other_cpu_share": 0.6}
    assert not is_contended(quiet) and is_contended(busy)
    # without psutil the load average decides
    assert is_contended({"loadavg_1m": 3.0, "cores": 2, "other_cpu_share": None})
    assert not is_contended({"loadavg_1m": 1.0, "cores": 2, "other_cpu_share": None})
    assert contention_stamp(quiet, busy, 0.1)["contended"]
    assert rep_spread([1.0, 2.0, 3.0]) == pytest.approx(2.0 / 2.0)
    snapshot = load_snapshot(window_s=0.05)
    assert snapshot["cores"] >= 1 and snapshot["loadavg_1m"] >= 0


def test_by_engine_never_mixes_engines():
    rows = pd.DataFrame({"engine": ["eager", "eager", "compiled", "compiled"],
                         "engine_used": ["eager", "eager", "compiled", "compiled"],
                         "engine_fallback_reason": [""] * 4, "ms": [4.0, 6.0, 1.0, 3.0]})
    means = by_engine(lambda t: pd.DataFrame({"mean_ms": [t["ms"].mean()], "n": [len(t)]}), rows)
    assert means.columns[:3].tolist() == ["engine", "engine_used", "engine_fallback_reason"]
    assert means.set_index("engine")["mean_ms"].to_dict() == {"eager": 5.0, "compiled": 2.0}
    assert (means["n"] == 2).all()


def test_best_groups_by_engine_keeps_one_overall_choice():
    base = {"alpha": 0.7, "tokens_per_target_forward": 2.0, "formula_tokens_per_target_forward": 2.0,
            "speedup_theory_params": 1.5, "c_params": 0.1, "c_time": 0.5, "wall_speedup_min": 0.9,
            "wall_speedup_max": 1.1, "speedup_forward_model": 1.0, "engine_fallback_reason": ""}
    summary = pd.DataFrame([
        {**base, "engine": "eager", "engine_used": "eager", "draft": "a", "k": 1, "speedup_theory_time": 0.9,
         "wall_speedup": 0.8},
        {**base, "engine": "eager", "engine_used": "eager", "draft": "b", "k": 3, "speedup_theory_time": 1.0,
         "wall_speedup": 0.85},
        {**base, "engine": "compiled", "engine_used": "compiled", "draft": "a", "k": 3,
         "speedup_theory_time": 1.4, "wall_speedup": 1.2},
    ])
    best = best_groups_by_engine(summary)
    assert (best["criterion"] == "chosen").sum() == 1 and best["overall_choice"].sum() == 1
    top = best.iloc[0]
    assert (top["criterion"], top["engine"], top["draft"], int(top["k"])) == ("chosen", "compiled", "a", 3)
    per_engine = best[best["criterion"] == "chosen_for_engine"].set_index("engine")
    assert (per_engine.loc["eager", "draft"], int(per_engine.loc["eager", "k"])) == ("b", 3)


def test_timing_tables_carry_the_engine_actually_used(pair):
    target, _ = pair
    fallback = EagerEngine(fallback_reason="RuntimeError: no compiler", requested="compiled")
    table = time_generation(target, torch.tensor([[1, 2]]), 3, reps=1, warmup=0, device="cpu", engine=fallback)
    assert set(table["engine"]) == {"compiled"} and set(table["engine_used"]) == {"eager"}
    assert set(table["engine_fallback_reason"]) == {"RuntimeError: no compiler"}
    assert table["same_output"].all()


def test_decode_reductions_equal_gemm_and_sdpa():
    """The decode step's reduction forms compute what F.linear and SDPA compute, masked slots included."""
    torch.manual_seed(0)
    linear = torch.nn.Linear(48, 80, bias=False)
    x = torch.randn(2, 3, 48)  # batch x tokens = 6 rows
    torch.testing.assert_close(engine_module.gemv_linear(linear, x), linear(x), atol=1e-5, rtol=1e-5)
    q, k, v = torch.randn(1, 2, 2, 8), torch.randn(1, 2, 16, 8), torch.randn(1, 2, 16, 8)
    mask = torch.arange(16)[None, :] <= torch.tensor([5, 6])[:, None]
    k_garbage, v_garbage = k.clone(), v.clone()
    k_garbage[:, :, 7:], v_garbage[:, :, 7:] = 1e4, -1e4  # slots past every query: must not count
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    got = engine_module.masked_attention(q, k_garbage, v_garbage, mask)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_gemv_leaves_other_modules_to_their_own_forward():
    """A quantised kernel or a biased layer is called as it is, never read as a plain weight."""
    biased = torch.nn.Linear(8, 4, bias=True)
    x = torch.randn(1, 1, 8)
    torch.testing.assert_close(engine_module.gemv_linear(biased, x), biased(x))
    calls = []

    class Recording(torch.nn.Module):
        def forward(self, inputs):
            calls.append(inputs.shape)
            return inputs[..., :4]

    engine_module.gemv_linear(Recording(), x)
    assert calls == [x.shape]
