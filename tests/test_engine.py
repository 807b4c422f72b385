"""Decode engines: the compiled engine decodes exactly like the eager one; its packages are refused
when they were built from other weights, damaged or missing; a compile rule that could not compile
makes the engine eager, stamped so.

Each package costs seconds to compile on a busy 2-core machine, so one module-wide engine serves
every test, and one one-layer target serves them all (each graph of its own token count is built
once and reused: the rollback's k = 2 verification is the 3-row forward's package). Its draft is a
perturbed copy, close enough to accept often and far enough to reject.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import shutil
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
import pytest
import torch

from inferlab.core import static_forward as forward_module
from inferlab.core.engine import PACKAGE_CALL, EagerEngine, WeightsChanged, make_engine, model_label
from inferlab.core.engine_rows import by_engine, engine_columns
from inferlab.core.generate import generate
from inferlab.core.generated_code import count_kernels
from inferlab.core.model import GPT
from inferlab.core.packages import UNAVAILABLE, WRITTEN_FOR_TORCH, PackageError, generated_sources, weights_digest
from inferlab.core.static_forward import context_bucket, static_forward
from inferlab.core.timing import timed_calls_ms
from inferlab.jobs.contention import contention_stamp, is_contended, load_snapshot, rep_spread
from inferlab.kvcache.bench import profile_cached_step, time_generation
from inferlab.kvcache.step_split import STEP_SPLIT_COLUMNS, STEP_SPLIT_PARTS
from inferlab.speculative.bench import run_forward_timing
from inferlab.speculative.decode import SamplingSettings, draft_half_call, speculative_decode
from inferlab.speculative.fused import draft_forward_form, proposals_only, speculative_round
from inferlab.speculative.summary import best_groups_by_engine
from tests.test_speculative import chi_square, chi_square_limit, perturbed, tiny_gpt

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def compiled():
    # builds each package on first use, in a directory of its own, for the one thread every test runs with
    # (conftest), as the engines a test makes itself do
    return make_engine("compiled", threads=1)


def built(engine) -> set[str]:
    """The labels of the packages an engine ran."""
    return set(engine.stamp()["compile_ms"])


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
    assert any(":T1:B1:" in label for label in built(compiled)), "the decode step did not run as a package"


def _starts(where: str, rows: int, max_seq_len: int) -> list[int]:
    edge = context_bucket(1, max_seq_len)
    return {"from 0": [0], "ending at the last slot": [max_seq_len - rows],
            "at the first bucket's edge": [edge - rows, edge - rows + 1]}[where]


# Each row count's graphs near both ends, and for 1 and 5 rows at the first context bucket's edge:
# one test each, so that a failure names its case and no test waits on every graph's compile.
FORWARD_CASES = [(rows, "from 0") for rows in (1, 2, 3, 5, 9)]
FORWARD_CASES += [(rows, "ending at the last slot") for rows in (1, 9)]
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
        label[label.index(":T"):] for label in built(compiled)}


def test_a_slice_of_a_longer_row_runs_the_package_of_its_shape(compiled, one_layer):
    """A package serves one layout of its inputs: a step fed ids[:, start:] out of rows of other
    lengths runs the one package of its shape, instead of building one per row length."""
    session = compiled.open(one_layer)
    gen = torch.Generator().manual_seed(12)
    compiles = len(built(compiled))
    with torch.no_grad():
        for length in (8, 13, 21):
            ids = torch.randint(one_layer.config.vocab_size, (1, length), generator=gen)
            session.forward(ids[:, :6], 0)
            got = session.forward(ids[:, 6:7], 6)[0]
            torch.testing.assert_close(got, one_layer(ids[:, :7])[0, 6:], atol=1e-4, rtol=0)
    assert len(built(compiled)) - compiles <= 1, sorted(built(compiled))


def test_a_step_is_found_by_its_position_and_the_package_refuses_any_other_token(compiled, one_layer):
    """session.step finds its package by the position alone; a token the package was not built for (another
    dtype, a stride of a longer row, two tokens) is refused by the package's own input checks before any
    kernel runs, so the cache is untouched, and a first step of two tokens is refused in Python."""
    ids = torch.randint(one_layer.config.vocab_size, (1, 9), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        session = compiled.open(one_layer)
        session.fill(ids[:, :7])
        step = session.step(ids[:, 7:8].clone(memory_format=torch.contiguous_format), 7)[0]
        torch.testing.assert_close(step, one_layer(ids[:, :8])[0, 7:], atol=1e-4, rtol=0)
        cache = [c.clone() for c in session.k_caches]
        refused = {"dtype": ids[:, 7:8].int().contiguous(), "stride": ids[:, 7:8], "dim": ids[:, 7:9].contiguous()}
        for what, token in refused.items():
            with pytest.raises(RuntimeError, match=what):
                session.step(token, 7)
        assert all(torch.equal(a, b) for a, b in zip(cache, session.k_caches, strict=True))
        with pytest.raises(ValueError, match="one token per row"):
            session.step(ids[:, :2].contiguous(), 0)


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
    assert any(f":T{k + 1}:B1:" in label for label in built(compiled)), "verify step not run as a package"


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
    with torch.no_grad():
        compiled.open(target).forward(torch.tensor([[3, 1, 4]]), 0)
    bucket = context_bucket(3, target.config.max_seq_len)
    verification = compiled.stamp()["kernels"][f"{model_label(target)}:T3:B1:S{bucket}"]
    assert kernels[rounds[0]]["cpp_gemm_template"] > verification["cpp_gemm_template"]


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
    compiled_before = built(compiled)
    with draft_half_call(draft, 6, k, SamplingSettings(), engine=compiled) as timed_half:
        times = timed_calls_ms(timed_half, reps=2, warmup=1)
    assert len(times) == 2 and min(times) > 0
    # the same shapes in the same bucket: the package built above serves it (a slice of a longer
    # row would have needed another, as a package serves one layout)
    assert built(compiled) == compiled_before
    table = run_forward_timing(target, draft, 6, k, reps=1, engine=compiled, settings=SamplingSettings())
    # the draft half's row names the form of its projections (k = 2: template GEMMs), the others none
    forms = table.set_index("role")["draft_form"]
    assert forms["draft_half"] == draft_forward_form(k) == "template GEMMs"
    assert forms.drop("draft_half").isna().all()
    with pytest.raises(ValueError, match="fused rounds"):
        with draft_half_call(draft, 6, k, SamplingSettings(), engine=EagerEngine()):
            pass


def test_fused_round_refuses_a_draft_with_another_context(pair):
    target, _ = pair
    short = GPT(dataclasses.replace(target.config, max_seq_len=target.config.max_seq_len // 2)).eval()
    with pytest.raises(ValueError, match=r"draft's context \(48\) to equal the target's \(96\)"):
        speculative_decode(target, short, [3, 1], 4, 2, engine=make_engine("compiled"))


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


def _step_package(engine, model) -> Path | None:
    """Runs a one-token step of model at position 0 and returns the file of the package that ran it."""
    with torch.no_grad():
        engine.open(model).forward(torch.tensor([[1]]), 0)
    bucket = context_bucket(1, model.config.max_seq_len)
    name = f"{model_label(model)}_T1_B1_S{bucket}-{weights_digest(model)[:8]}-*.pt2"
    return next((engine.build_dir or engine.graph_dirs[0]).glob(name), None)


@pytest.mark.parametrize("other", ["another checkpoint", "another rope_base"])
def test_a_package_built_from_other_weights_is_refused_naming_both(compiled, one_layer, other, tmp_path):
    """A package's frozen weights and RoPE tables are checked against the model that calls it: one built
    from another checkpoint (or the same weights with another rope_base) is refused with both digests and
    the setting that differs named, and never runs, even under the file name the call looks for."""
    built_path = _step_package(compiled, one_layer)
    if other == "another checkpoint":
        model = perturbed(one_layer, 0.1, 2)
    else:
        model = GPT(dataclasses.replace(one_layer.config, rope_base=one_layer.config.rope_base / 2)).eval()
        model.load_state_dict(one_layer.state_dict())
    # nothing there yet: the engine that only loads names the package it looked for, and compiles nothing;
    # then the module model's package is put under that name
    shutil.copy(built_path, tmp_path / _name_looked_for(make_engine("compiled", graph_dirs=[tmp_path]), model))
    refused = r"built from weights [0-9a-f]{12}…, this model's are [0-9a-f]{12}…"
    with pytest.raises(PackageError, match=refused) as refusal:
        _step_package(make_engine("compiled", graph_dirs=[tmp_path]), model)
    if other == "another rope_base":
        assert "rope_base" in str(refusal.value)


def _name_looked_for(engine, model) -> str:
    """The package file name a load-only engine looked for and did not find (its warning names it): the
    step then ran eagerly, counted."""
    with _warnings() as records:
        _step_package(engine, model)
    assert engine.eager_calls == 1
    message = next(r.getMessage() for r in records if "no package" in r.getMessage())
    return message.split("no package ")[1].split(" in ")[0]


@contextmanager
def _warnings():
    """The engine's log records while the block runs."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    engine_log = logging.getLogger("inferlab.core.engine")
    engine_log.addHandler(handler)
    try:
        yield records
    finally:
        engine_log.removeHandler(handler)


def test_a_truncated_package_is_refused_with_a_message(compiled, one_layer, tmp_path):
    path = _step_package(compiled, one_layer)
    shutil.copy(path, tmp_path / path.name)
    (tmp_path / path.name).write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(PackageError, match="damaged"):
        _step_package(make_engine("compiled", graph_dirs=[tmp_path]), one_layer)


def test_packages_are_blocked_for_the_thread_count_they_are_built_for(one_layer):
    """The C++ loops of a package run on the thread count it was compiled for (inductor's cpp.threads),
    whatever the building process runs with: a compile job on one core builds for the timing jobs'."""
    engine = make_engine("compiled", threads=3)
    path = _step_package(engine, one_layer)
    sources = "\n".join(generated_sources(path))
    assert "num_threads(3)" in sources and "num_threads(2)" not in sources
    kernels = count_kernels(generated_sources(path))
    assert kernels["kernel_launches"] > 0 and kernels["cpp_gemm_template"] > 0


def test_profile_splits_a_compiled_step_into_our_python_the_package_and_its_kernels(compiled, one_layer):
    """The profiled step (a twin engine whose package emits an event per kernel) splits into three parts
    that sum to its wall time, each positive."""
    sequence = torch.randint(one_layer.config.vocab_size, (1, 12), generator=torch.Generator().manual_seed(5))
    table = profile_cached_step(one_layer, sequence, 8, 5, "cpu", engine=compiled)
    row = table.iloc[0]
    assert abs(sum(row[part] for part in STEP_SPLIT_PARTS) - row["split_step_ms"]) < 1e-9
    assert all(row[part] > 0 for part in STEP_SPLIT_PARTS) and row["kernel_events"] > 0
    eager = profile_cached_step(one_layer, sequence, 8, 3, "cpu", engine=EagerEngine()).iloc[0]
    assert all(pd.isna(eager[column]) for column in STEP_SPLIT_COLUMNS)


def test_every_call_of_a_kernel_event_engine_is_one_profiler_event(compiled, one_layer):
    """A generic call (rounds, the draft half, the uncached step) on the kernel-event twin nests its kernels
    under a package-call event on every call, not only on the call that found its package."""
    twin = compiled.with_kernel_events()
    sequence = torch.randint(one_layer.config.vocab_size, (1, 6), generator=torch.Generator().manual_seed(2))
    twin.recompute_last(one_layer, sequence)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            twin.recompute_last(one_layer, sequence)
    calls = [event for event in prof.events() if event.name == PACKAGE_CALL]
    assert len(calls) == 3 and all(call.cpu_children for call in calls)


def test_uncached_steps_share_one_package_for_every_length(compiled, one_layer):
    """The uncached baseline grows by one token per step: one package with a free length serves all."""
    gen = torch.Generator().manual_seed(9)
    before = built(compiled)
    with torch.no_grad():
        for length in (3, 7, 20):
            ids = torch.randint(one_layer.config.vocab_size, (1, length), generator=gen)
            torch.testing.assert_close(compiled.recompute_last(one_layer, ids), one_layer(ids)[:, -1],
                                       atol=1e-4, rtol=0)
    assert len(built(compiled) - before) <= 1




@pytest.mark.parametrize("change", ["edited in place", "replaced", "a buffer edited (a RoPE table)"])
def test_weights_changed_after_freezing_are_refused(change):
    compiled = make_engine("compiled", threads=1)  # its own: a refused model stays refused in its engine
    model = tiny_gpt(32, 4)
    session = compiled.open(model)
    session.forward(torch.tensor([[1]]), 0)
    mlp = model.blocks[0].mlp
    with torch.no_grad():
        if change == "replaced":
            mlp.up.weight = torch.nn.Parameter(mlp.up.weight + 0.1)
        elif change == "edited in place":
            mlp.up.weight.add_(0.1)
        else:
            next(buffer for name, buffer in model.named_buffers() if "cache" not in name).mul_(0.5)
    # the next decode opens a session of it, or binds a call of it: both refuse
    with pytest.raises(WeightsChanged, match="changed after the compiled engine froze"):
        compiled.open(model)
    with pytest.raises(WeightsChanged, match="changed after the compiled engine froze"):
        compiled.bind(static_forward, (model,), "step", torch.tensor([[2]]), torch.tensor([1]),
                      session.k_caches, session.v_caches, 0, 4)


def test_an_edit_through_data_is_refused_by_content_before_any_row_takes_the_engine():
    """.data moves no version counter: the content check (at a package's first lookup, and before a
    table's rows are stamped with their engine) refuses it."""
    compiled = make_engine("compiled", threads=1)
    model = tiny_gpt(32, 4)
    compiled.open(model).forward(torch.tensor([[1]]), 0)
    compiled.open(model)  # unchanged: no refusal
    model.blocks[0].mlp.up.weight.data.add_(0.1)
    with pytest.raises(WeightsChanged, match="content changed"):
        engine_columns(compiled)
    with pytest.raises(WeightsChanged, match="content changed"):
        compiled.open(model).forward(torch.tensor([[1, 2]]), 0)  # a new package's first lookup


def _copy_with_identity(path: Path, directory: Path, **call) -> None:
    """The package at path and its record into directory, under another file name, its recorded call
    changed as given: a package built for something else."""
    record = json.loads(path.with_suffix(".json").read_text())
    record["identity"]["call"] |= call
    stem = path.stem.rsplit("-", 1)[0] + "-0000000000"
    shutil.copy(path, directory / f"{stem}.pt2")
    (directory / f"{stem}.json").write_text(json.dumps(record))


@pytest.mark.parametrize(("part", "value"), [("device", ["cuda:0"]), ("code", "0123456789abcdef"),
                                             ("function", "inferlab.elsewhere.static_forward"), ("threads", 7)])
def test_a_package_built_for_another_device_code_function_or_thread_count_is_refused_naming_it(
        compiled, one_layer, tmp_path, part, value):
    """A load-only engine that finds a package under its call's label, built assuming something else, refuses
    it and names the difference, never runs it (and never runs the call eagerly in its place)."""
    _copy_with_identity(_step_package(compiled, one_layer), tmp_path, **{part: value})
    loader = make_engine("compiled", graph_dirs=[tmp_path])
    with pytest.raises(PackageError, match=rf"refused: .* \({re.escape(part)} {re.escape(repr(value))} there"):
        _step_package(loader, one_layer)
    assert loader.eager_calls == 0


def test_the_uncached_forward_of_another_batch_size_runs_its_own_package(compiled, one_layer, tmp_path):
    """The free length leaves the batch size in the package's identity: B = 2 after B = 1 runs a package of
    its own, equal to eager; B = 1's package under B = 2's file name is refused, naming the inputs."""
    gen = torch.Generator().manual_seed(4)
    with torch.no_grad():
        for batch in (1, 2):
            ids = torch.randint(one_layer.config.vocab_size, (batch, 5), generator=gen)
            torch.testing.assert_close(compiled.recompute_last(one_layer, ids), one_layer(ids)[:, -1],
                                       atol=1e-4, rtol=0)
    one, two = (next(compiled.build_dir.glob(f"{model_label(one_layer)}_uncached_B{b}-*.pt2")) for b in (1, 2))
    shutil.copy(one, tmp_path / two.name)
    with pytest.raises(PackageError, match=r"refused: .*inputs '1x\? int64.*' there, '2x\? int64.*' here"):
        make_engine("compiled", graph_dirs=[tmp_path]).recompute_last(one_layer, ids)


def test_a_forward_without_a_package_runs_eagerly_and_is_counted(compiled, one_layer, tmp_path):
    """A load-only engine with no package for a prompt's length runs its prefill eagerly, with eager's
    logits, and counts it; the engine that builds runs every forward, the prefill included, as a package."""
    prompt = torch.tensor([[3, 1, 4, 1, 5]])
    before = compiled.eager_calls
    fast = generate(one_layer, prompt, 3, keep_logits=True, engine=compiled)
    assert compiled.eager_calls == before and any(":T5:B1:" in label for label in built(compiled))
    shutil.copytree(compiled.build_dir, tmp_path, dirs_exist_ok=True, ignore=shutil.ignore_patterns("*_T5_*"))
    loader = make_engine("compiled", graph_dirs=[tmp_path])
    slow = generate(one_layer, prompt, 3, keep_logits=True, engine=loader)
    assert loader.eager_calls == 1 and torch.equal(slow.tokens, fast.tokens)
    torch.testing.assert_close(torch.stack(slow.step_logits), torch.stack(fast.step_logits), atol=1e-4, rtol=0)


def test_a_compile_rule_that_could_not_compile_makes_the_engine_eager_with_its_reason(tmp_path):
    (tmp_path / UNAVAILABLE).write_text("RuntimeError: no C++ compiler found\n")
    engine = make_engine("compiled", graph_dirs=[tmp_path])
    assert isinstance(engine, EagerEngine) and engine.engine_used == "eager" and engine.requested == "compiled"
    assert engine.stamp()["engine_fallback_reason"] == "RuntimeError: no C++ compiler found"




def _compile_fails(error: Exception):
    def build():
        raise error
    return build


def test_a_compile_rule_falls_back_only_for_a_missing_toolchain_and_fails_on_anything_else(tmp_path):
    """No C++ compiler (inductor's InvalidCxxCompiler inside its InductorError, as a real compile raises it):
    recorded in unavailable.txt, the timing jobs then run eager. A bug (here a ValueError) fails the rule."""
    from inferlab.core.packages import build_packages

    def tiny_compile():
        program = torch.export.export(torch.nn.Linear(4, 4), (torch.randn(1, 4),))
        with torch._inductor.config.patch({"cpp.cxx": (None, "/nonexistent/g++")}):  # noqa: SLF001 - no toolchain
            torch._inductor.aoti_compile_and_package(program, package_path=str(tmp_path / "x.pt2"))

    fell_back = tmp_path / "no-toolchain"
    build_packages(fell_back, tmp_path / "fell_back.json", None, tiny_compile, log=open(tmp_path / "a.log", "w"))
    assert (fell_back / UNAVAILABLE).read_text().startswith("no working C++ toolchain: InductorError")
    failed = tmp_path / "bug"
    with pytest.raises(ValueError, match="a bug"):
        build_packages(failed, tmp_path / "failed.json", None, _compile_fails(ValueError("a bug")),
                       log=open(tmp_path / "b.log", "w"))
    assert not (failed / UNAVAILABLE).exists() and not (tmp_path / "failed.json").exists()


def test_no_private_torch_api_outside_the_aot_inductor_entry_points():
    """The engine stands on torch's supported routes: torch.export and AOTInductor's two entry points. The
    one module that reads what AOTInductor generates (packages.py, with generated_code.py) names the torch
    release it was written for, and this fails on another, so an upgrade re-reads it before it is trusted."""
    allowed = ("torch._inductor.aoti_compile_and_package", "torch._inductor.aoti_load_package")
    # the failures a compile rule falls back for, which torch names only there
    allowed_in_packages = ("torch._inductor.exc", "torch._dynamo.exc")
    private = re.compile(r"torch\._(?:dynamo|C\._dynamo|inductor)\b[\w.]*")
    found = {f"{path.relative_to(ROOT)}: {use}" for path in (ROOT / "inferlab").rglob("*.py")
             for use in private.findall(path.read_text()) if use not in allowed
             and not (path.name == "packages.py" and use in allowed_in_packages)}
    assert not found, sorted(found)
    assert torch.__version__.startswith(WRITTEN_FOR_TORCH + "."), (
        f"inferlab/core/packages.py was written for torch {WRITTEN_FOR_TORCH}; check its AOTInductor use on "
        f"{torch.__version__} and update WRITTEN_FOR_TORCH")


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


def test_a_group_builds_every_context_bucket_any_seed_can_reach(compiled, pair):
    """A decode's last round starts at one of its last k + 1 lengths, by its acceptances, so whether it
    crosses a bucket's edge (24 of 96 here) depends on the seed. The compile rule's build binds a round in
    every bucket the config allows, so a loader decodes every seed with no eager call."""
    from inferlab.speculative.bench import build_group_graphs

    target, draft = pair
    prompts, new_tokens, k = [{"prompt_index": 0, "prompt": "", "ids": [3, 1, 4], "prompt_unk": 0}], 21, 2
    settings = SamplingSettings()
    build_group_graphs(target, draft, prompts, new_tokens, k, settings, compiled)
    rounds = {label.rsplit(":S", 1)[1] for label in built(compiled) if label.startswith("round:") and ":k2:" in label}
    assert rounds == {"24", "48"}
    loader = make_engine("compiled", graph_dirs=[compiled.build_dir])
    for seed in range(6):
        speculative_decode(target, draft, [3, 1, 4], new_tokens, k, settings, torch.Generator().manual_seed(seed),
                           engine=loader)
    assert loader.eager_calls == 0
