"""Speculative sampling: the accept/reject rule reproduces the target, caches stay consistent."""

from __future__ import annotations

import copy
import itertools
import math

import pandas as pd
import pytest
import torch

from inferlab.core.config import GPTConfig
from inferlab.core.engine import EagerEngine
from inferlab.core.generate import generate
from inferlab.core.model import GPT
from inferlab.core.sampler import logits_to_probs
from inferlab.core.timing import BURST, BURST_WARMUP, timed_calls_ms
from inferlab.kvcache.roofline import step_bound_ms
from inferlab.speculative import bench
from inferlab.speculative.bench import run_forward_timing
from inferlab.speculative.decode import (
    SamplingSettings,
    autoregressive_decode,
    overlap,
    residual_probs,
    speculative_decode,
    verify_greedy,
    verify_sampled,
)
from inferlab.speculative.forwards import forward_calls
from inferlab.speculative.summary import (
    best_groups,
    expected_tokens_per_round,
    summarise,
    theoretical_speedup,
    with_compile_seconds,
    with_marginal_draft_step,
    with_step_bounds,
)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def tiny_gpt(d_model: int, seed: int, vocab: int = 16, scale: float = 3.0, n_layer: int = 1,
             block_scale: float = 1.0) -> GPT:
    """A random GPT with its embedding (and optionally its block weights) scaled up, so that its
    next-token distributions are peaked: at init they are almost uniform, which would make
    every test trivially pass. With a large embedding alone the model mostly copies the last
    token; scaling the blocks makes its greedy continuations varied."""
    torch.manual_seed(seed)
    model = GPT(GPTConfig(vocab_size=vocab, d_model=d_model, n_layer=n_layer, head_dim=16, max_seq_len=96)).eval()
    with torch.no_grad():
        model.tok_emb.weight.mul_(scale)
        for name, param in model.named_parameters():
            if name.startswith("blocks") and param.dim() == 2:
                param.mul_(block_scale)
    return model


def perturbed(model: GPT, sigma: float, seed: int) -> GPT:
    """A draft that agrees with the target often but not always: its weights plus noise."""
    draft = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in draft.parameters():
            param.add_(torch.randn(param.shape, generator=gen) * param.std() * sigma)
    return draft


def similar_pair() -> tuple[GPT, GPT]:
    target = tiny_gpt(32, 0, scale=1.0, n_layer=2, block_scale=3.0)
    return target, perturbed(target, 0.1, 1)


def chi_square(counts: torch.Tensor, probs: torch.Tensor) -> tuple[float, int]:
    """Pearson's statistic with cells of expected count < 5 merged; impossible cells must be empty."""
    n = counts.sum()
    expected = probs * n
    assert counts[probs == 0].sum() == 0, "a token the target never produces was emitted"
    small = (expected < 5) & (probs > 0)
    obs = torch.cat([counts[expected >= 5], counts[small].sum().view(1)])
    exp = torch.cat([expected[expected >= 5], expected[small].sum().view(1)])
    keep = exp > 0
    obs, exp = obs[keep].double(), exp[keep].double()
    return float(((obs - exp) ** 2 / exp).sum()), int(keep.sum()) - 1


def chi_square_limit(df: int) -> float:
    # about p = 1e-6 for these df: mean df, sd sqrt(2 df)
    return df + 7 * math.sqrt(2 * df)


# --------------------------------------------------------------------------- the accept rule

def toy_pair(vocab: int = 6, seed: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    p = torch.rand(vocab, generator=gen) ** 3
    q = torch.rand(vocab, generator=gen) ** 3
    return p / p.sum(), q / q.sum()


def test_residual_is_normalised_positive_part():
    p, q = toy_pair()
    r = residual_probs(p, q)
    assert torch.isclose(r.sum(), torch.tensor(1.0))
    assert torch.all(r[q >= p] == 0)
    assert torch.allclose(r * (1 - overlap(p, q)), torch.clamp(p - q, min=0), atol=1e-6)
    # no residual mass (only rounding can reject here): fall back to the target's p
    assert torch.equal(residual_probs(p, p + 1e-7), p)


def test_first_token_follows_target_and_accept_rate_is_overlap():
    p, q = toy_pair()
    bonus = torch.full_like(p, 1 / p.numel())
    gen = torch.Generator().manual_seed(0)
    n = 20000
    counts = torch.zeros_like(p)
    draft_counts = torch.zeros_like(p)
    accepts = 0
    for _ in range(n):
        x = torch.multinomial(q, 1, generator=gen)
        m, nxt = verify_sampled(torch.stack([p, bonus]), q.view(1, -1), x, gen)
        first = int(x) if m == 1 else nxt
        counts[first] += 1
        draft_counts[int(x)] += 1
        accepts += m
    stat, df = chi_square(counts, p)
    assert stat < chi_square_limit(df), stat
    # the test has power: the draft's own samples fail it
    assert chi_square(draft_counts, p)[0] > 10 * chi_square_limit(df)
    a = float(overlap(p, q))
    assert abs(accepts / n - a) < 5 * math.sqrt(a * (1 - a) / n)


def test_rounds_of_k3_emit_iid_target_tokens():
    """Context-free p and q: every emitted token must be an independent draw from p, whatever
    path produced it (accepted draft, residual after a rejection, bonus)."""
    p, q = toy_pair(vocab=5, seed=7)
    k = 3
    gen = torch.Generator().manual_seed(1)
    pairs = torch.zeros(p.numel() ** 2)
    for _ in range(8000):
        stream: list[int] = []
        while len(stream) < 2:
            drafts = torch.multinomial(q, k, replacement=True, generator=gen)
            m, nxt = verify_sampled(p.expand(k + 1, -1), q.expand(k, -1), drafts, gen)
            stream += [*drafts[:m].tolist(), nxt]
        pairs[stream[0] * p.numel() + stream[1]] += 1
    stat, df = chi_square(pairs, torch.outer(p, p).flatten())
    assert stat < chi_square_limit(df), stat


def test_verify_greedy_accepts_the_matching_prefix():
    logits = torch.tensor([[0.0, 5.0, 1.0], [3.0, 0.0, 1.0], [0.0, 0.0, 9.0], [1.0, 0.0, 0.0]])  # argmax 1,0,2,0
    assert verify_greedy(logits, torch.tensor([1, 0, 2])) == (3, 0)  # all accepted, bonus = argmax
    assert verify_greedy(logits, torch.tensor([1, 2, 2])) == (1, 0)  # mismatch at 1: take argmax 0
    assert verify_greedy(logits, torch.tensor([0, 0, 2])) == (0, 1)


# --------------------------------------------------------------------------- the decode loop

def test_draft_identical_to_target_accepts_everything():
    target = tiny_gpt(32, 0)
    draft = copy.deepcopy(target)
    for k in (1, 3, 4):
        result = speculative_decode(target, draft, [1, 2, 3], 40, k, SamplingSettings(),
                                    torch.Generator().manual_seed(k))
        s = result.stats
        assert s.accepted == s.proposed == s.drafted == k * s.rounds
        assert s.accepted_per_round == [k] * s.rounds
        assert s.generated / s.target_forwards == k + 1
        assert s.overlap_sum == pytest.approx(s.proposed, rel=1e-4)


@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_greedy_identity_with_a_different_draft(k):
    target, draft = similar_pair()
    accepted = proposed = 0
    for prompt in ([4], [1, 2, 3], [7, 7, 0, 5, 9]):
        reference = generate(target, torch.tensor([prompt]), 40).new_tokens(len(prompt))[0].tolist()
        result = speculative_decode(target, draft, prompt, 40, k, SamplingSettings(greedy=True))
        assert result.new_tokens(len(prompt)) == reference
        accepted += result.stats.accepted
        proposed += result.stats.proposed
    assert 0 < accepted < proposed  # both acceptances and rejections were exercised


@pytest.mark.parametrize("greedy", [False, True])
def test_cached_logits_after_rollback_equal_a_fresh_forward(greedy):
    """Every round's logits from the caches equal an uncached forward of the true context,
    for target and draft, after rejections as well as after fully accepted rounds."""
    target, draft = similar_pair()
    prompt, k = [3, 1, 4], 3
    trace: list[dict] = []
    result = speculative_decode(target, draft, prompt, 48, k, SamplingSettings(temperature=1.3, greedy=greedy),
                                torch.Generator().manual_seed(5), trace=trace)
    seq = result.tokens[0].tolist()
    outcomes = {entry["accepted"] for entry in trace}
    assert min(outcomes) < k, "no rejection happened"
    assert k in outcomes, "no fully accepted round happened"
    with torch.no_grad():
        for entry in trace:
            n, drafts = entry["n"], entry["drafts"]
            context = torch.tensor([seq[:n] + drafts])
            fresh_target = target(context)[0, n - 1:]  # (k+1, V)
            fresh_draft = draft(context)[0, n - 1:n - 1 + k]  # row i: after draft token i
            torch.testing.assert_close(entry["target_logits"], fresh_target, atol=1e-4, rtol=1e-4)
            torch.testing.assert_close(entry["draft_logits"], fresh_draft, atol=1e-4, rtol=1e-4)


def test_counters_are_consistent_and_rounds_yield_1_to_k_plus_1():
    target, draft = tiny_gpt(32, 0), tiny_gpt(16, 1)
    for k in (1, 2, 4):
        result = speculative_decode(target, draft, [2, 5], 37, k, SamplingSettings(),
                                    torch.Generator().manual_seed(11))
        s = result.stats
        assert result.tokens.shape == (1, 2 + 37)
        assert all(0 <= m <= k for m in s.accepted_per_round)  # 1..k+1 tokens per round
        assert s.rounds == s.target_forwards == len(s.accepted_per_round)
        assert s.draft_forwards == s.drafted == k * s.rounds
        assert s.accepted == sum(s.accepted_per_round)
        assert s.generated == s.accepted + s.rounds
        assert s.proposed == sum(min(m + 1, k) for m in s.accepted_per_round)
        assert 37 <= s.generated <= 37 + k
        assert 0 < s.overlap_sum <= s.proposed


def test_same_seed_same_output():
    target, draft = tiny_gpt(32, 0), tiny_gpt(16, 1)
    runs = [speculative_decode(target, draft, [1, 2], 30, 3, SamplingSettings(), torch.Generator().manual_seed(9))
            for _ in range(2)]
    assert torch.equal(runs[0].tokens, runs[1].tokens)
    other = speculative_decode(target, draft, [1, 2], 30, 3, SamplingSettings(), torch.Generator().manual_seed(10))
    assert not torch.equal(runs[0].tokens, other.tokens)


def test_two_token_joint_distribution_matches_the_target():
    """End to end on a GPT pair with V=4 and top-p truncation: the joint of the first two new
    tokens from speculative decoding matches the target's exact joint. k=1 makes the second
    token come from the bonus row after an accept, or from a second round after a rejection."""
    target, draft = tiny_gpt(32, 0, vocab=4), tiny_gpt(16, 1, vocab=4)
    settings = SamplingSettings(temperature=1.0, top_p=0.9)
    prompt = [2]  # one token: no prefill forward, the first round starts at position 0
    with torch.no_grad():
        first = logits_to_probs(target(torch.tensor([prompt]))[0, -1], top_p=0.9)  # (V,)
        contexts = torch.tensor([[*prompt, a] for a in range(4)])
        second = logits_to_probs(target(contexts)[:, -1], top_p=0.9)  # (V, V)
    joint = (first[:, None] * second).flatten()
    gen = torch.Generator().manual_seed(2)
    counts = torch.zeros(16)
    for _ in range(2000):
        a, b = speculative_decode(target, draft, prompt, 2, 1, settings, gen).new_tokens(1)
        counts[a * 4 + b] += 1
    stat, df = chi_square(counts, joint)
    assert stat < chi_square_limit(df), (stat, df)


def test_baseline_decoder_matches_generate_under_greedy():
    target = tiny_gpt(32, 0)
    tokens = autoregressive_decode(target, [1, 2, 3], 25, SamplingSettings(greedy=True))
    reference = generate(target, torch.tensor([[1, 2, 3]]), 25).tokens
    assert torch.equal(tokens, reference)


def test_group_times_target_only_sampling_beside_each_speculative_run(monkeypatch):
    """The wall clock's baseline is timed in the group's own run, each prompt x seed right beside its
    speculative run with the order alternating, never in a separate block or job."""
    calls = []

    def speculative(target, draft, ids, new_tokens, k, settings, generator, engine=None):
        calls.append(("speculative", tuple(ids), generator.initial_seed()))
        return speculative_decode(target, draft, ids, new_tokens, k, settings, generator, engine=engine)

    def target_only(target, ids, new_tokens, settings, generator, engine=None, timings=None):
        calls.append(("target_only", tuple(ids), generator.initial_seed()))
        return autoregressive_decode(target, ids, new_tokens, settings, generator, engine=engine, timings=timings)

    monkeypatch.setattr(bench, "speculative_decode", speculative)
    monkeypatch.setattr(bench, "autoregressive_decode", target_only)
    target, draft = similar_pair()
    prompts = [{"prompt_index": i, "prompt": str(ids), "ids": ids, "prompt_unk": 0}
               for i, ids in enumerate(([1, 2], [3]))]
    runs, baseline = bench.run_group(target, draft, prompts, [5, 6], 8, 2, SamplingSettings(), timing_reps=2)
    warm_up, timed = calls[:4], calls[4:]  # after one untimed run of each decoder over each prompt
    assert [(c[0], c[1]) for c in warm_up] == [("speculative", (1, 2)), ("target_only", (1, 2)),
                                               ("speculative", (3,)), ("target_only", (3,))]
    pairs = [timed[i:i + 2] for i in range(0, len(timed), 2)]
    assert len(pairs) == 2 * 2 * 2
    assert all(a[1:] == b[1:] and {a[0], b[0]} == {"speculative", "target_only"} for a, b in pairs)
    assert [a[0] for a, _ in pairs] == ["speculative", "target_only"] * 4
    assert len(runs) == len(baseline) == 8 and (baseline["wall_ms"] > 0).all()
    # each decode's prompt caching is timed inside its wall time: prompt [1, 2] caches a token, [3] none
    for table in (runs, baseline):
        assert (table["prefill_ms"] < table["wall_ms"]).all()
        two = table[table["prompt_index"] == 0]["prefill_ms"].median()
        assert two > 5 * table[table["prompt_index"] == 1]["prefill_ms"].median()
    assert list(baseline["ran_first"]) == [i % 2 == 1 for i in range(8)]
    assert list(runs["ran_first"]) == [i % 2 == 0 for i in range(8)]
    assert runs[["rep", "prompt_index", "seed"]].equals(baseline[["rep", "prompt_index", "seed"]])
    reference = autoregressive_decode(target, [3], 8, SamplingSettings(), torch.Generator().manual_seed(6))
    last = baseline.iloc[-1]
    assert (last["prompt_index"], last["seed"]) == (1, 6) and last["new_token_ids"] == reference[0, 1:].tolist()


def test_forward_calls_give_one_time_per_rep():
    with forward_calls(tiny_gpt(16, 0), context=10, token_counts=(3,)) as calls:
        times = timed_calls_ms(calls[3], reps=4, warmup=1)
    assert len(times) == 4 and all(t > 0 for t in times)


class CountingEngine(EagerEngine):
    """The eager engine, logging every session it opens and every forward, as (d_model, rows, start)."""

    def __init__(self):
        super().__init__()
        self.opened: list[int] = []
        self.forwards: list[tuple[int, int, int]] = []

    def open(self, model, batch_size=1, max_seq_len=None):
        self.opened.append(model.config.d_model)
        session = super().open(model, batch_size, max_seq_len)
        forward = session.forward

        def logged(tokens, start):
            self.forwards.append((model.config.d_model, tokens.size(1), start))
            return forward(tokens, start)

        session.forward = session.step = logged  # a step is a forward of one token per row
        return session


def test_forward_timing_runs_each_case_back_to_back_on_one_prefilled_session_per_model():
    """A forward is timed as a decode loop runs it: one prefill per model, never one per rep, and
    each rep's calls of a case consecutive (warm-up, then the timed burst), cases interleaved."""
    engine, reps, k, context = CountingEngine(), 3, 2, 10
    table = run_forward_timing(tiny_gpt(32, 0), tiny_gpt(16, 1), context, k, reps, engine=engine)
    assert sorted(engine.opened) == [16, 32]
    assert sorted(f for f in engine.forwards if f[2] == 0) == [(16, context, 0), (32, context, 0)]
    cases = [(32, 1), (16, 1), (32, k + 1)]
    calls = [(d, rows) for d, rows, start in engine.forwards if start == context]
    bursts = [(case, len(list(run))) for case, run in itertools.groupby(calls)]
    burst = BURST_WARMUP + BURST
    assert bursts == [(case, 3) for case in cases] + [(case, burst) for case in cases * reps]
    assert len(table) == len(cases) * reps and (table["forward_ms"] > 0).all()
    assert table["draft_form"].isna().all()  # no fused rounds, so no draft half
    assert table.groupby(["role", "tokens_per_forward"])["rep"].nunique().eq(reps).all()


def test_each_row_counts_the_forwards_it_ran_eagerly():
    """On the eager engine every forward of a row's own work is an eager call: a speculative run's k drafts and
    one verification a round, plus each model's prefill of a prompt longer than one token; target-only
    sampling's forward a token plus its prefill; a forward timing's burst; a greedy identity case's
    speculative decode (its reference decodes on an engine of its own). The summary adds up a group's rows."""
    target, draft, k, new_tokens = *similar_pair(), 2, 8
    prompts = [{"prompt_index": i, "prompt": str(ids), "ids": ids, "prompt_unk": 0}
               for i, ids in enumerate(([1, 2], [3]))]
    runs, baseline = bench.run_group(target, draft, prompts, [5, 6], new_tokens, k, SamplingSettings(),
                                     timing_reps=1, engine=EagerEngine())
    prefilled = (runs["prompt_tokens"] > 1).astype(int)
    assert runs["eager_calls"].tolist() == (runs["target_forwards"] + runs["draft_forwards"] + 2 * prefilled).tolist()
    assert baseline["eager_calls"].tolist() == (new_tokens + prefilled).tolist()  # the pairs' order is the runs'
    forward = run_forward_timing(target, draft, 10, k, reps=2, engine=EagerEngine())
    assert forward["eager_calls"].tolist() == [BURST_WARMUP + BURST] * len(forward)
    identity = bench.run_greedy_identity(target, draft, prompts, new_tokens, k, engine=EagerEngine())
    assert identity["eager_calls"].tolist() == (identity["rounds"] * (k + 1) + [2, 0]).tolist()
    group = {"draft": "d", "k": k}
    row = summarise(runs.assign(**group), forward.assign(**group), baseline.assign(**group), {"d": 1, "t": 2},
                    "t").iloc[0]
    assert row["eager_calls"] == sum(table["eager_calls"].sum() for table in (runs, baseline, forward))
    # a table from before the count leaves the group's total unknown, never a smaller number
    old = summarise(runs.assign(**group), forward.assign(**group).drop(columns="eager_calls"),
                    baseline.assign(**group), {"d": 1, "t": 2}, "t")
    assert old["eager_calls"].isna().all()


# --------------------------------------------------------------------------- summary arithmetic

def test_formula_and_speedup():
    assert expected_tokens_per_round(0.0, 4) == 1.0
    assert expected_tokens_per_round(1.0, 4) == 5.0
    assert expected_tokens_per_round(0.5, 1) == pytest.approx(1.5)
    assert expected_tokens_per_round(0.8, 3) == pytest.approx(1 + 0.8 + 0.64 + 0.512)
    assert theoretical_speedup(3.0, 4, 0.5) == pytest.approx(1.0)


def test_summarise_counts_alpha_and_pairs_reruns():
    runs = pd.DataFrame([
        {"draft": "d", "k": 2, "seed": s, "rep": r, "new_tokens": 10, "rounds": 5, "target_forwards": 5,
         "draft_forwards": 10, "drafted": 10, "proposed": 8, "accepted": 6, "generated": 11,
         "overlap_sum": 5.6, "wall_ms": 10.0 * (r + 1), "prefill_ms": 1.0, "prompt_index": 0,
         "new_token_ids": [s, 1, 2]}
        for s in (0, 1) for r in (0, 1)])
    forward = pd.DataFrame([
        {"draft": "d", "k": 2, "role": role, "tokens_per_forward": n, "forward_ms": ms}
        for role, n, ms in (("target", 1, 2.0), ("draft", 1, 0.5), ("target", 3, 3.0))])
    # each group's own target-only runs; another group's, timed at another moment, must not enter its ratio
    baseline = pd.DataFrame([{"draft": "d", "k": k, "seed": s, "rep": r, "wall_ms": wall, "prefill_ms": 4.0}
                             for k, wall in ((2, 30.0), (3, 90.0)) for s in (0, 1) for r in (0, 1)])
    row = summarise(runs, forward, baseline, {"d": 25, "t": 100}, "t").iloc[0]
    assert row["alpha"] == pytest.approx(12 / 16)
    assert row["overlap_mean"] == pytest.approx(11.2 / 16)
    assert row["tokens_per_target_forward"] == pytest.approx(22 / 10)
    assert row["formula_tokens_per_target_forward"] == pytest.approx(1 + 0.75 + 0.75 ** 2)
    assert row["c_params"] == pytest.approx(0.25) and row["c_time"] == pytest.approx(0.25)
    assert row["speedup_theory_params"] == pytest.approx((1 + 0.75 + 0.5625) / 1.5)
    assert row["speedup_forward_model"] == pytest.approx((1 + 0.75 + 0.5625) * 2.0 / (2 * 0.5 + 3.0))
    # rerun 0: 60/20 = 3, rerun 1: 60/40 = 1.5
    assert (row["wall_speedup_min"], row["wall_speedup_max"]) == (1.5, 3.0)
    assert row["wall_speedup"] == pytest.approx(2.25) and row["baseline_wall_ms"] == pytest.approx(60.0)
    # without each decoder's prefill (two decodes per rerun): (60 - 8) / (20 - 2) and (60 - 8) / (40 - 2)
    assert row["wall_speedup_without_prefill"] == pytest.approx((52 / 18 + 52 / 38) / 2)
    # a round (10 per rerun, 30 ms median) = 2 draft steps 1.0 + verification 3.0 + prefill 0.2 + rest -1.2
    assert (row["round_ms"], row["round_prefill_ms"]) == pytest.approx((3.0, 0.2))
    assert row["round_rest_ms"] == pytest.approx(-1.2)
    assert row["reruns_identical"]


def test_the_marginal_draft_step_is_fitted_within_each_form_of_the_drafts_projections():
    """Rounds of k = 1, 2 (template GEMMs, 0.1 ms a step over 0.3) and k = 3, 4, 6 (reductions, 0.2 ms a step
    over 0.1): one line through all five would give neither slope."""
    def drafts_ms(k):
        return 0.3 + 0.1 * k if k <= 2 else 0.1 + 0.2 * k
    forms = {1: "template GEMMs", 2: "template GEMMs", 3: "reductions", 4: "reductions", 6: "reductions"}
    summary = pd.DataFrame([{"draft": "d", "k": k, "draft_form": form, "round_draft_ms": drafts_ms(k),
                             "target_step_ms": 0.5} for k, form in forms.items()])
    rows = with_marginal_draft_step(summary).set_index("k")
    assert rows.loc[[1, 2], "draft_step_marginal_ms"].tolist() == pytest.approx([0.1, 0.1])
    assert rows.loc[[3, 4, 6], "draft_step_marginal_ms"].tolist() == pytest.approx([0.2] * 3)
    assert rows.loc[[1, 6], "c_time_marginal"].tolist() == pytest.approx([0.2, 0.4])
    assert rows.loc[[1, 6], "draft_step_marginal_ks"].tolist() == ["1,2", "3,4,6"]
    single = with_marginal_draft_step(summary.assign(draft_form=""))
    assert single["draft_step_marginal_ms"].iloc[0] != pytest.approx(0.1)


def test_a_verifications_bound_grows_with_its_rows_once_its_arithmetic_outlasts_the_weights_read():
    """ref_baseline's shape at position 100: with the 2-core EPYC's probe (137 GB/s, 166 GFLOP/s) two rows'
    FLOPs take less time than the weights' read, five rows' take more; with unlimited FLOP/s every row
    count costs the weights' read (and a few more cache slots). speedup_at_bound is then the forward model
    at those bounds, and with a verification at one step's bound it is E / (k c + 1), c the bounds' ratio."""
    config, params, position = GPTConfig(), 3_688_704, 100
    bound = {rows: step_bound_ms(config, params, position, rows, 137e9, 166e9) for rows in (1, 2, 5)}
    unlimited = {rows: step_bound_ms(config, params, position, rows, 137e9, math.inf) for rows in (1, 5)}
    assert unlimited[5] == pytest.approx(unlimited[1]) and bound[1] == pytest.approx(unlimited[1])
    assert bound[1] == bound[2] < bound[5] and bound[5] / bound[1] > 1.9
    summary = pd.DataFrame([{"draft": "d", "k": k, "target_step_ms": 1.0, "draft_step_ms": 0.5,
                             "verify_forward_ms": 1.5,
                             "formula_tokens_per_target_forward": expected_tokens_per_round(0.6, k)}
                            for k in (1, 4)])
    rows = with_step_bounds(summary, {"t": bound[1], "d": 0.1 * bound[1]}, "t", {1: bound[2], 4: bound[5]})
    assert rows["verify_bound_ratio"].tolist() == pytest.approx([1.0, bound[5] / bound[1]])
    assert rows["verify_over_bound"].tolist() == pytest.approx([1.5 / bound[2], 1.5 / bound[5]])
    assert rows["speedup_at_bound"].tolist() == pytest.approx(
        [expected_tokens_per_round(0.6, k) * bound[1] / (k * 0.1 * bound[1] + verify)
         for k, verify in ((1, bound[2]), (4, bound[5]))])
    at_one_step = with_step_bounds(summary, {"t": 2.0, "d": 0.2}, "t", {1: 2.0, 4: 2.0})
    assert at_one_step["speedup_at_bound"].tolist() == pytest.approx(
        [theoretical_speedup(expected_tokens_per_round(0.6, k), k, 0.1) for k in (1, 4)])


def test_each_groups_compile_time_is_that_of_the_packages_its_job_ran():
    summary = pd.DataFrame([{"draft": d, "k": k, "engine": e} for d in ("a", "b") for k in (1, 4)
                            for e in ("eager", "compiled")])
    compiled = {("a", 1): (65_000.0, 4), ("a", 4): (121_500.0, 3), ("b", 1): (30_000.0, 5)}
    stamped = {(d, k, "compiled"): {"package_compile_ms_total": ms, "packages": n}
               for (d, k), (ms, n) in compiled.items()}
    stamped |= {(d, k, "eager"): {"compile_ms_total": 0.0} for d, k in compiled}
    table = with_compile_seconds(summary, stamped).set_index(["draft", "k", "engine"])
    rows = table["compile_s"]
    assert rows["a", 4, "compiled"] == 121.5 and rows["b", 1, "compiled"] == 30.0
    assert math.isnan(rows["b", 4, "compiled"])  # a job whose stamp is missing is not taken as free
    assert table.loc[("b", 1, "compiled"), "packages"] == 5
    assert math.isnan(table.loc[("a", 1, "eager"), "packages"])  # eager runs no package


def test_best_groups_puts_the_choice_first():
    base = {"alpha": 0.7, "tokens_per_target_forward": 2.0, "formula_tokens_per_target_forward": 2.0,
            "c_params": 0.1, "c_time": 0.3, "wall_speedup_min": 1.0, "wall_speedup_max": 1.2,
            "speedup_forward_model": 1.0, "speedup_at_bound": 1.4}
    summary = pd.DataFrame([
        {**base, "draft": "small", "k": 3, "speedup_theory_params": 1.9, "speedup_theory_time": 1.2,
         "wall_speedup": 1.1},
        {**base, "draft": "big", "k": 8, "tokens_per_target_forward": 4.0, "speedup_theory_params": 1.1,
         "speedup_theory_time": 0.8, "wall_speedup": 1.3}])
    best = best_groups(summary).set_index("criterion")
    assert best.index[0] == "chosen"
    assert (best.loc["chosen", "draft"], best.loc["chosen", "k"]) == ("small", 3)
    assert best.loc["tokens_per_target_forward", "draft"] == "big"
    assert best.loc["wall_speedup", "draft"] == "big"
    assert best.loc["speedup_theory_params", "runner_up_draft"] == "big"
    assert "small k=3" in best.loc["chosen", "reason"]
    assert "no group beats target-only" not in best.loc["chosen", "reason"]
    slow = best_groups(summary.assign(wall_speedup=[0.8, 0.9])).iloc[0]["reason"]
    assert "no group beats target-only sampling on the wall clock (best median 0.90x)" in slow
