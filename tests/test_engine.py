"""Decode engines: the compiled engine decodes exactly like the eager one; a failed compile is stamped eager.

Compiling costs seconds per graph on a busy 2-core machine, so one module-wide engine serves
every test, and one one-layer target serves them all (each graph of its own token count is compiled
once and reused: the rollback's k = 2 verification is the 3-row forward's graph). Its draft is a
perturbed copy, close enough to accept often and far enough to reject.
"""

from __future__ import annotations

import copy
import dataclasses
import types

import pandas as pd
import pytest
import torch

from inferlab.core import engine as engine_module
from inferlab.core import generated_code
from inferlab.core import static_forward as forward_module
from inferlab.core.checkpoint import save_checkpoint
from inferlab.core.engine import EagerEngine, make_engine, model_label
from inferlab.core.engine_rows import by_engine
from inferlab.core.generate import generate
from inferlab.core.model import GPT
from inferlab.core.static_forward import context_bucket
from inferlab.core.timing import timed_calls_ms
from inferlab.jobs.contention import contention_stamp, is_contended, load_snapshot, rep_spread
from inferlab.kvcache.bench import STEP_LABEL, compiled_step_split, profile_cached_step, time_generation
from inferlab.kvcache.step_split import STEP_SPLIT_COLUMNS, STEP_SPLIT_PARTS
from inferlab.speculative.bench import run_forward_timing
from inferlab.speculative.compile_ahead import HELPER_LABEL, forward_timing_compiled_beside
from inferlab.speculative.decode import SamplingSettings, draft_half_call, speculative_decode
from inferlab.speculative.fused import draft_forward_form, proposals_only, speculative_round
from inferlab.speculative.summary import best_groups_by_engine
from tests.test_speculative import chi_square, chi_square_limit, perturbed, tiny_gpt


@pytest.fixture(scope="module")
def compiled():
    engine = make_engine("compiled")
    if engine.engine_used != "compiled":
        pytest.skip(f"torch.compile unavailable here: {engine.engine_fallback_reason}")
    return engine


@pytest.fixture(scope="module")
def one_layer():
    return tiny_gpt(32, 11, scale=1.0, block_scale=5.0)


@pytest.fixture(scope="module")
def pair(one_layer):
    return one_layer, perturbed(one_layer, 0.1, 1)


def test_compiled_greedy_generation_matches_eager(compiled, pair):
    """(Within the first context bucket, so one graph compiles here; the bucket's edge is the forward
    test's case below.)"""
    target, _ = pair
    prompt = torch.tensor([[3, 1, 4, 1]])
    new_tokens = context_bucket(1, target.config.max_seq_len) - prompt.size(1)
    eager = generate(target, prompt, new_tokens, keep_logits=True, engine=EagerEngine())
    fast = generate(target, prompt, new_tokens, keep_logits=True, engine=compiled)
    assert len(set(eager.new_tokens(4)[0].tolist())) > 2, "degenerate model: the test would be vacuous"
    assert torch.equal(eager.tokens, fast.tokens)
    torch.testing.assert_close(torch.stack(fast.step_logits), torch.stack(eager.step_logits), atol=1e-4, rtol=0)
    assert any(":T1:B1:" in label for label in compiled.compile_ms), "the decode step was not compiled"


def _starts(where: str, rows: int, max_seq_len: int) -> list[int]:
    edge = context_bucket(1, max_seq_len)
    return {"from 0": [0], "ending at the last slot": [max_seq_len - rows],
            "at the first bucket's edge": [edge - rows, edge - rows + 1]}[where]


# Each row count's graphs near both ends, and for 1 and 5 rows at the first context bucket's edge:
# one test each, so that a failure names its case and no test waits on every graph's compile.
FORWARD_CASES = [(rows, where) for rows in (1, 2, 3, 5, 9) for where in ("from 0", "ending at the last slot")]
FORWARD_CASES += [(rows, "at the first bucket's edge") for rows in (1, 5)]


@pytest.mark.parametrize(("rows", "where"), FORWARD_CASES)
def test_compiled_forward_equals_eager_near_both_ends_and_after_a_rewrite(compiled, one_layer, rows, where):
    """Every row count a decode step or a verification uses, at positions from 0 and ending at the
    last slot, and again after rewriting slots already written (a rollback): the compiled step's
    logits equal an uncached eager forward of the true context. For 1 and 5 rows also at the first
    context bucket's edge: ending on its last slot, and one position later (into the next bucket).
    (One layer: each graph's C++ GEMM kernels take seconds to compile, and a second layer would
    test nothing new.)"""
    target = one_layer
    compiled.want_token_counts(rows)
    S = target.config.max_seq_len
    starts = _starts(where, rows, S)
    gen = torch.Generator().manual_seed(rows)
    session = compiled.open(target)
    with torch.no_grad():
        for start in starts:
            ids = torch.randint(target.config.vocab_size, (1, start + rows), generator=gen)
            if start:
                session.forward(ids[:, :start], 0)
            for attempt in range(2):  # the second writes other tokens over the same slots
                got = session.forward(ids[:, start:], start)[0]
                torch.testing.assert_close(got, target(ids)[0, start:], atol=1e-4, rtol=0)
                ids = torch.cat([ids[:, :start], (ids[:, start:] + 1 + attempt) % target.config.vocab_size], 1)
    assert {f":T{rows}:B1:S{context_bucket(start + rows, S)}" for start in starts} <= {
        label[label.index(":T"):] for label in compiled.compile_ms}


def test_a_slice_of_a_longer_row_runs_the_graph_its_shape_compiled(compiled, one_layer):
    """Dynamo guards the strides of a graph's inputs: a step fed ids[:, start:] out of rows of other
    lengths runs the one graph of its shape, instead of compiling it again for every row length."""
    session = compiled.open(one_layer)
    gen = torch.Generator().manual_seed(12)
    compiles = len(compiled.compile_ms)
    with torch.no_grad():
        for length in (8, 13, 21):
            ids = torch.randint(one_layer.config.vocab_size, (1, length), generator=gen)
            session.forward(ids[:, :6], 0)
            got = session.forward(ids[:, 6:7], 6)[0]
            torch.testing.assert_close(got, one_layer(ids[:, :7])[0, 6:], atol=1e-4, rtol=0)
    assert len(compiled.compile_ms) - compiles <= 1, sorted(compiled.compile_ms)


def test_compiled_speculative_greedy_identity_and_rollback(compiled, pair):
    """Greedy speculative decoding on the compiled engine equals target-only greedy decoding, and
    every round's cached logits (after rejections too) equal a fresh uncached forward."""
    target, draft = pair
    prompt, k = [3, 1, 4], 2  # 18 tokens: the first context bucket (its edges: the forward test above)
    reference = generate(target, torch.tensor([prompt]), 18).new_tokens(len(prompt))[0].tolist()
    trace: list[dict] = []
    result = speculative_decode(target, draft, prompt, 18, k, SamplingSettings(greedy=True), trace=trace,
                                engine=compiled)
    assert result.new_tokens(len(prompt)) == reference
    assert 0 < result.stats.accepted < result.stats.proposed, "need both acceptances and rejections"
    seq = result.tokens[0].tolist()
    with torch.no_grad():
        for entry in trace:
            n, drafts = entry["n"], entry["drafts"]
            context = torch.tensor([seq[:n] + drafts])
            torch.testing.assert_close(entry["target_logits"], target(context)[0, n - 1:], atol=1e-4, rtol=1e-4)
    assert any(f":T{k + 1}:B1:" in label for label in compiled.compile_ms), "verify step not compiled"


def test_fused_round_is_exact_greedy_and_one_graph(compiled, pair):
    """A whole round as one graph: greedy speculative output equals target-only greedy decoding,
    with rejections and full accepts both exercised, and the stamp shows the round's graph and the
    C++ GEMM template in it (the kernels read from inductor's generated code)."""
    target, draft = pair
    # 16 tokens: every round in the first context bucket; 3-token prompts, whose 2-token prefill runs
    # a graph the reference rounds above compiled already
    for prompt in ([3, 1, 4], [5, 0, 3]):
        reference = generate(target, torch.tensor([prompt]), 16).new_tokens(len(prompt))[0].tolist()
        result = speculative_decode(target, draft, prompt, 16, 2, SamplingSettings(greedy=True), engine=compiled)
        assert result.new_tokens(len(prompt)) == reference
        assert 0 < result.stats.accepted < result.stats.proposed
        assert {0, 2} & set(result.stats.accepted_per_round) == {0, 2}  # a round rejected at once, one accepted whole
    kernels = compiled.stamp()["kernels"]
    rounds = [label for label in kernels if label.startswith("round:") and ":k2:" in label]
    assert rounds, f"no fused round was compiled: {sorted(kernels)}"
    assert kernels[rounds[0]]["kernel_launches"] > 0 and kernels[rounds[0]]["cpp_gemm_template"] > 0
    # at k = 2 the draft's forwards go through the template too (fused.draft_gemv_max_rows): the round has
    # more template GEMMs than the target's 3-row verification alone (the forward test's graph, loaded here)
    compiled.want_token_counts(3)
    with torch.no_grad():
        compiled.open(target).forward(torch.tensor([[3, 1, 4]]), 0)
    bucket = context_bucket(3, target.config.max_seq_len)
    verification = compiled.stamp()["kernels"][f"{model_label(target)}:T3:B1:S{bucket}"]
    assert kernels[rounds[0]]["cpp_gemm_template"] > verification["cpp_gemm_template"]
    assert not any(label.startswith("d64xL1:") for label in kernels), "the smoke compile's toy is not stamped"


def test_a_rounds_draft_half_is_timed_as_the_round_runs_it(compiled, pair):
    """The draft half timed on its own (Experiment 3's role "draft_half") is the round's own code:
    from the same caches and uniforms it proposes the tokens the whole round proposes, and it is a
    graph of its own, which the timed call runs without compiling it again."""
    target, draft = pair
    k, seq = 2, [3, 1, 4, 1, 5]
    sessions = [compiled.open(model) for model in (target, draft)]
    for session in sessions:
        session.forward(torch.tensor([seq[:-1]]), 0)
    (t, d), context = sessions, context_bucket(len(seq) + k, target.config.max_seq_len)
    uniforms = torch.rand(2 * k + 1, generator=torch.Generator().manual_seed(3))
    common = (torch.tensor([seq[-2:]]), torch.tensor([len(seq)]), uniforms, torch.tensor(False), 1.0, 1.0, context)
    half = compiled.call(proposals_only, (draft,), "half", (d.k_caches, d.v_caches), *common)
    whole = compiled.call(speculative_round, (target, draft), "round", (t.k_caches, t.v_caches),
                          (d.k_caches, d.v_caches), *common)
    assert half.tolist() == whole[:k].tolist()
    compiled_before = dict(compiled.compile_ms)
    with draft_half_call(draft, 6, k, SamplingSettings(), engine=compiled) as timed_half:
        times = timed_calls_ms(timed_half, reps=2, warmup=1)
    assert len(times) == 2 and min(times) > 0
    # the same shapes in the same bucket: the graph compiled above serves it (a slice of a longer
    # row would have compiled it again, as dynamo guards strides)
    assert compiled.compile_ms == compiled_before
    with pytest.raises(ValueError, match="fused rounds"):
        with draft_half_call(draft, 6, k, SamplingSettings(), engine=EagerEngine()):
            pass


def test_a_helper_process_finds_the_forward_timings_graphs_under_the_jobs_keys(compiled, pair, tmp_path):
    """A group job's helper (speculative/compile_ahead.py) rebuilds the job's models from their checkpoints
    and its engine from the job's options and thread count, so its graphs are the job's: the forward timing's
    graphs this process compiled (or an earlier test did), it loads from inductor's on-disk cache, compiling
    none. (So what it compiles on a cold cache, the job loads; the full run's stamps count those.)"""
    target, draft = pair
    for name, model in (("target", target), ("draft", draft)):
        save_checkpoint(model, {"name": name, "val_loss": 0.0}, tmp_path / name)
    k, context = 2, 6
    table = run_forward_timing(target, draft, context, k, reps=1, engine=compiled, settings=SamplingSettings())
    # the draft half's row names the form of its projections (k = 2: template GEMMs), the others none
    forms = table.set_index("role")["draft_form"]
    assert forms["draft_half"] == draft_forward_form(k) == "template GEMMs"
    assert forms.drop("draft_half").isna().all()
    job = make_engine("compiled", check=False)  # the job's engine: `compiled`'s options, nothing compiled
    request = {"target_dir": str(tmp_path / "target"), "draft_dir": str(tmp_path / "draft"), "vocab_sha256": None,
               "context": context, "k": k, "settings": vars(SamplingSettings())}
    with forward_timing_compiled_beside(job, request):
        pass
    helper = job.compiled_beside[HELPER_LABEL]
    assert helper is not None, "the helper failed (its log is on this test's stderr)"
    # each model's step, the 3-row verification and the draft half
    assert (helper["graphs_from_cache"], helper["graphs_compiled"]) == (4, 0), helper["graph_cache_loads"]
    assert any(label.startswith("draft_half:") for label in helper["graph_cache_loads"])


def test_fused_round_refuses_a_draft_with_another_context(pair):
    target, _ = pair
    short = GPT(dataclasses.replace(target.config, max_seq_len=target.config.max_seq_len // 2)).eval()
    with pytest.raises(ValueError, match=r"draft's context \(48\) to equal the target's \(96\)"):
        speculative_decode(target, short, [3, 1], 4, 2, engine=make_engine("compiled", check=False))


def test_fused_round_emits_the_targets_joint_distribution(compiled, pair):
    """The one-graph round keeps the exact rule: the first two emitted tokens (from accepted
    drafts, a replacement after a rejection, or the bonus) follow the target's joint law."""
    target, draft = pair
    prompt = [3, 1]  # two tokens: the first round is already the fused one
    vocab = target.config.vocab_size
    with torch.no_grad():
        first = torch.softmax(target(torch.tensor([prompt]))[0, -1], -1)
        second = torch.softmax(target(torch.tensor([[*prompt, a] for a in range(vocab)]))[:, -1], -1)
    joint = (first[:, None] * second).flatten()
    gen = torch.Generator().manual_seed(4)
    counts = torch.zeros(vocab * vocab)
    for _ in range(3000):
        a, b = speculative_decode(target, draft, prompt, 2, 2, SamplingSettings(), gen,
                                  engine=compiled).new_tokens(2)
        counts[a * vocab + b] += 1
    stat, df = chi_square(counts, joint)
    assert stat < chi_square_limit(df), (stat, df)


def test_freezing_is_scoped_and_each_model_keeps_its_own_constants(one_layer):
    """Frozen weights are set only around a compiling call, and two models of one shape in one
    process (both on one engine, and one again on a second engine) each run with their own weights.
    (The module's model, whose graph the disk cache may hold: only the other one costs a compile.)"""
    before = torch._inductor.config.freezing
    model = one_layer
    other = copy.deepcopy(model)
    with torch.no_grad():
        for param in other.parameters():
            param.mul_(1.5)
    ids = torch.tensor([[5, 2, 8]])
    first, second = make_engine("compiled", check=False), make_engine("compiled", check=False)
    for engine, each in ((first, model), (first, other), (second, other)):
        session = engine.open(each)
        session.forward(ids[:, :2], 0)
        got = session.forward(ids[:, 2:], 2)[0]
        with torch.no_grad():
            torch.testing.assert_close(got, each(ids)[0, 2:], atol=1e-4, rtol=0)
        assert torch._inductor.config.freezing == before
    assert first.stamp()["frozen_weights"] is True and len(first.compile_ms) == 2


def test_the_engines_settings_reach_its_compiles_and_no_other(one_layer):
    """Freezing and the weights key are applied by dynamo's compile callbacks: an engine's compile
    gets them (its projections reach the C++ GEMM template, which needs frozen weights), even after
    something cleared the callbacks (torch._dynamo.reset() does), and a compile outside the engine,
    in the same process, sees the caller's settings."""
    seen = []

    def recording_backend(graph, example_inputs):
        seen.append(torch._inductor.config.freezing)
        return graph.forward

    before = torch._inductor.config.freezing
    torch._dynamo.callback_handler.clear()
    engine = make_engine("compiled", check=False)
    # the module's model: a graph loaded from the disk cache is one compiled with these settings too,
    # as freezing and the weights key are part of inductor's cache key
    session = engine.open(one_layer)
    session.forward(torch.tensor([[5, 2]]), 0)
    session.forward(torch.tensor([[8]]), 2)
    assert [count["cpp_gemm_template"] > 0 for count in engine.kernels.values()] == [True]
    torch.compile(lambda x: x + 1, backend=recording_backend)(torch.ones(2))
    assert seen == [before] and torch._inductor.config.freezing == before


def test_frozen_graphs_are_cached_on_disk_under_their_weights(one_layer):
    """A second engine compiling a copy of the same weights loads the graph from inductor's on-disk
    cache; a model of the same shape with other weights misses it and runs with its own weights
    (keyed by shape alone, inductor would hand it the first model's packed weights). The first
    engine compiles the module's model, which an earlier test or run may have cached already."""
    model = one_layer
    other = perturbed(model, 0.5, torch.seed())  # weights no earlier test run has cached
    ids = torch.tensor([[5, 2, 8]])
    lookups = engine_module._graph_cache_lookups
    engines = [make_engine("compiled", check=False) for _ in range(3)]
    assert all(engine.stamp()["graph_cache"] for engine in engines)
    outcomes = []
    for engine, each in zip(engines, (model, copy.deepcopy(model), other), strict=True):
        before = lookups()
        session = engine.open(each)
        session.forward(ids[:, :2], 0)
        got = session.forward(ids[:, 2:], 2)[0]
        with torch.no_grad():
            torch.testing.assert_close(got, each(ids)[0, 2:], atol=1e-4, rtol=0)
        after = lookups()
        outcomes.append(("hit" if after[0] > before[0] else "") + ("miss" if after[1] > before[1] else ""))
    assert outcomes[0] in ("hit", "miss") and outcomes[1:] == ["hit", "miss"]
    # each engine's stamp says which of its graphs came from the cache, so a compile time is never a load's
    stamped = [(e.stamp()["graphs_compiled"], e.stamp()["graphs_from_cache"]) for e in engines]
    assert stamped == [(outcomes[0] == "miss", outcomes[0] == "hit"), (0, 1), (1, 0)]


def test_profile_splits_a_compiled_step_into_fixed_costs_and_kernels(one_layer):
    """Experiment 1's profile on the compiled engine: each step's wall time is exactly the Python
    before the compiled frame, the guards, the wrappers, the graph's own code and its kernels; every
    kernel the step's graph launches (and every library call) is one kernel event."""
    # inductor's default lowering: the split does not depend on it, and its twin compiles in seconds
    light = make_engine("compiled", check=False, inductor_options={})
    sequence = generate(one_layer, torch.tensor([[1, 2, 3]]), 12).tokens
    session = light.open(one_layer)
    session.forward(sequence[:, :1], 0)
    label = f"{engine_module.model_label(one_layer)}:T1:B1:S{context_bucket(10, one_layer.config.max_seq_len)}"
    graph = light.stamp()["kernels"][label]
    table = profile_cached_step(one_layer, sequence, 10, steps=3, device="cpu", top=5, engine=light)
    row = table.iloc[0]
    assert row["kernel_events"] == graph["kernel_launches"] + graph["aten_calls"]
    # steps after the first call their graph straight: no guards, the wrappers outside any region
    assert row["kernel_ms"] > 0 and row["wrapper_ms"] > 0 and row["entry_ms"] > 0 and row["guard_ms"] == 0
    assert sum(row[c] for c in STEP_SPLIT_PARTS) == pytest.approx(row["split_step_ms"])  # one step's parts
    new_bucket = context_bucket(10, one_layer.config.max_seq_len) + 1  # a step of a graph not yet compiled
    for position, through_dynamo in ((10, False), (new_bucket, True)):
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            with torch.profiler.record_function(STEP_LABEL):
                session.forward(sequence[:, 10:11], position)
        step = next(e for e in prof.events() if e.name == STEP_LABEL)
        split = compiled_step_split(step)
        assert (split["guard_ms"] > 0) == through_dynamo
        assert sum(split[c] for c in STEP_SPLIT_PARTS) == pytest.approx(split["split_step_ms"]) \
            == step.cpu_time_total / 1e3
    eager = profile_cached_step(one_layer, sequence, 10, steps=2, device="cpu", top=5)
    assert eager[list(STEP_SPLIT_COLUMNS)].isna().all().all()


def _scaled_plus_weight(model: GPT, x: torch.Tensor, y: torch.Tensor, scale: float) -> torch.Tensor:
    return x * scale + 2 * y + model.final_norm.weight.sum()


def _record_calls_and_captures(engine, monkeypatch) -> tuple[list[str], list]:
    """(the label of each call the engine sends through dynamo, every graph its capture hands over)."""
    through_dynamo, taken = [], []
    call_through_dynamo, take = engine._call_through_dynamo, engine._capture.take
    monkeypatch.setattr(engine, "_call_through_dynamo",
                        lambda *a: through_dynamo.append(a[3]) or call_through_dynamo(*a))
    monkeypatch.setattr(engine._capture, "take", lambda: taken.extend(graphs := take()) or graphs)
    return through_dynamo, taken


def test_later_calls_run_their_graph_straight_only_where_dynamo_would_run_it(compiled, one_layer, monkeypatch):
    """After a call through dynamo, a call of the same models and argument layout runs the captured
    graph itself (core/direct_calls.py), with the right result; a changed value dynamo specializes on,
    another shape or stride, or one tensor passed twice goes through dynamo again, never to a graph
    compiled for something else."""
    through_dynamo, taken = _record_calls_and_captures(compiled, monkeypatch)
    weight_sum = one_layer.final_norm.weight.sum()
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    cases = [  # (x, y, scale, through dynamo)
        (x, y, 2.0, True), (x + 1, y - 1, 2.0, False), (x, y, 3.0, True), (x, y, 3, True),
        (torch.randn(3, 3), torch.randn(3, 3), 2.0, True), (torch.randn(3, 2).t(), y, 2.0, True), (x, x, 2.0, True),
        (torch.randn(2, 3), torch.randn(2, 3), 2.0, False), (x.double(), y.double(), 2.0, True)]
    straight_before = compiled.stamp()["graphs_called_straight"]
    for a, b, scale, expect_dynamo in cases:
        before = len(through_dynamo)
        out = compiled.call(_scaled_plus_weight, (one_layer,), "scaled", a, b, scale)
        assert (len(through_dynamo) > before) == expect_dynamo, (a.shape, a.stride(), a is b, scale)
        torch.testing.assert_close(out, a * scale + 2 * b + weight_sum.to(a.dtype))
    # every graph dynamo compiled here serves later calls straight, but the one for a tensor passed twice
    assert compiled.stamp()["graphs_called_straight"] - straight_before == sum(e for *_, e in cases) - 1
    # a graph reached through dynamo again (the tensor passed twice) holds none of its outputs
    compiled.call(_scaled_plus_weight, (one_layer,), "scaled", x, x, 2.0)
    assert taken and not any(graph.first_outputs for graph in taken)


def test_an_engine_told_not_to_call_straight_sends_every_call_through_dynamo(one_layer, monkeypatch):
    """call_straight=False (the engine bench's through_dynamo variant): a repeated call of one layout,
    which the default engine would run straight, goes through dynamo every time, and the stamp says so."""
    engine = make_engine("compiled", check=False, call_straight=False)
    through_dynamo, taken = _record_calls_and_captures(engine, monkeypatch)
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    for scale in (2.0, 2.0, 2.0):
        out = engine.call(_scaled_plus_weight, (one_layer,), "scaled", x, y, scale)
        torch.testing.assert_close(out, x * scale + 2 * y + one_layer.final_norm.weight.sum())
    assert len(through_dynamo) == 3
    # no graph holds its outputs, though none is ever called straight (which would release them)
    assert taken and all(graph.first_outputs == [] for graph in taken)
    assert engine.stamp()["call_straight"] is False and engine.stamp()["graphs_called_straight"] == 0


@pytest.mark.parametrize("change", ["edited in place", "replaced"])
def test_weights_changed_after_freezing_are_refused(compiled, change):
    model = tiny_gpt(32, 4)
    session = compiled.open(model)
    session.forward(torch.tensor([[1]]), 0)
    mlp = model.blocks[0].mlp
    with torch.no_grad():
        if change == "replaced":
            mlp.up.weight = torch.nn.Parameter(mlp.up.weight + 0.1)
        else:
            mlp.up.weight.add_(0.1)
    with pytest.raises(RuntimeError, match="weights changed after the compiled engine froze them"):
        session.forward(torch.tensor([[2]]), 1)


PYTHON_WRAPPER = """
cpp_fused_norm_0 = async_compile.cpp_pybinding(['float*'], r\'\'\'void kernel(float* x) {}\'\'\')
cpp_fused_mm_1 = async_compile.cpp_pybinding(['float*'], r\'\'\'void kernel_micro_gemm(); void kernel() {}\'\'\')
def call(args):
    cpp_fused_norm_0(buf0)
    cpp_fused_mm_1(buf0, constant0, buf1)
    extern_kernels.mm(buf1, arg0, out=buf2)
    cpp_fused_mm_1(buf2, constant1, buf3)
"""
CPP_WRAPPER = """
cpp_wrapper_src = (r\'\'\'
void cpp_fused_mm_1(const float* X, const float* W, float* Y);
void inductor_entry_impl(AtenTensorHandle* input_handles) {
    cpp_fused_norm_0((float*)(buf0.data_ptr()));
    cpp_fused_mm_1((const float*)(buf0.data_ptr()), (const float*)(constant0.data_ptr()), (float*)(buf1.data_ptr()));
    aoti_torch_empty_strided(2, int_array_0, int_array_1, dtype, device, 0, &buf2_handle);
    aoti_torch_cpu_mm_out(buf2, buf1, arg0);
    cpp_fused_mm_1((const float*)(buf2.data_ptr()), (const float*)(constant1.data_ptr()), (float*)(buf3.data_ptr()));
} // inductor_entry_impl
extern "C" void cpp_fused_norm_0(float* x) {}
inline void cpp_fused_mm_1_micro_gemm_kernel() {}
void cpp_fused_mm_1(const float* X, const float* W, float* Y) { cpp_fused_mm_1_micro_gemm_kernel(); }
\'\'\')
"""


@pytest.mark.parametrize("source", [PYTHON_WRAPPER, CPP_WRAPPER], ids=["python wrapper", "cpp_wrapper"])
def test_kernel_count_reads_either_wrapper_inductor_writes(source, tmp_path):
    """Three launches per call, two of them the C++ GEMM template, one library GEMM, whether the graph's
    code is Python calling bindings or one C++ source (the bench's cpp_wrapper variant)."""
    path = tmp_path / "graph.py"
    path.write_text(source)
    module = types.ModuleType("graph")
    module.__file__ = str(path)
    assert generated_code.count_kernels([module]) == {"kernel_launches": 3, "cpp_gemm_template": 2, "aten_calls": 1}


def test_past_dynamos_recompile_limit_the_engine_fails_instead_of_running_eagerly():
    """Dynamo runs a function eagerly once it holds `recompile_limit` graphs of it; the engine makes
    that an error, so a table labelled compiled never holds eager timings."""
    engine = make_engine("compiled", check=False)
    models = [tiny_gpt(32, seed) for seed in (21, 22)]  # graphs no other test compiled
    with torch._dynamo.config.patch(recompile_limit=1), pytest.raises(Exception, match="recompile_limit"):
        for model in models:
            engine.open(model).forward(torch.tensor([[1]]), 0)


def test_building_a_compiled_engine_leaves_the_random_stream_and_checks_the_same_toy(monkeypatch):
    """The toolchain check compiles a toy whose weights are the same in every process (so the
    on-disk cache serves it after the first job), drawn without advancing the caller's stream:
    a job's samples do not depend on which engine it built."""
    toys = []

    def recorded(config):
        toys.append(GPT(config))
        return toys[-1]

    monkeypatch.setattr(engine_module, "GPT", recorded)
    torch.manual_seed(123)
    state = torch.get_rng_state()
    make_engine("compiled")
    assert torch.equal(torch.get_rng_state(), state)
    torch.manual_seed(7)
    make_engine("compiled")
    first, second = (toy.state_dict() for toy in toys)
    assert len(toys) == 2 and all(torch.equal(first[name], second[name]) for name in first)


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
            "wall_speedup_max": 1.1, "speedup_forward_model": 1.0, "speedup_at_bound": 1.3,
            "engine_fallback_reason": ""}
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
    torch.testing.assert_close(forward_module.gemv_linear(linear, x), linear(x), atol=1e-5, rtol=1e-5)
    q, k, v = torch.randn(1, 2, 2, 8), torch.randn(1, 2, 16, 8), torch.randn(1, 2, 16, 8)
    mask = torch.arange(16)[None, :] <= torch.tensor([5, 6])[:, None]
    k_garbage, v_garbage = k.clone(), v.clone()
    k_garbage[:, :, 7:], v_garbage[:, :, 7:] = 1e4, -1e4  # slots past every query: must not count
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    got = forward_module.masked_attention(q, k_garbage, v_garbage, mask)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_gemv_leaves_other_modules_to_their_own_forward():
    """A quantised kernel or a biased layer is called as it is, never read as a plain weight."""
    biased = torch.nn.Linear(8, 4, bias=True)
    x = torch.randn(1, 1, 8)
    torch.testing.assert_close(forward_module.gemv_linear(biased, x), biased(x))
    calls = []

    class Recording(torch.nn.Module):
        def forward(self, inputs):
            calls.append(inputs.shape)
            return inputs[..., :4]

    forward_module.gemv_linear(Recording(), x)
    assert calls == [x.shape]
