"""The report: milestone logic on hand-made tables (pass / fail / missing), rendering, offline HTML."""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from pathlib import Path

import pandas as pd
import pytest
import torch

from inferlab.core.config import GPTConfig
from inferlab.core.engine_rows import by_engine
from inferlab.core.model import GPT
from inferlab.core.sampler import distribution_rows
from inferlab.experiments import FIGURES
from inferlab.jobs.lineage import canonical_sha256 as config_hash
from inferlab.jobs.stamps import carried_stamps, job_stamps
from inferlab.jobs.tables import write_table
from inferlab.kvcache import summary as kvsummary
from inferlab.kvcache.roofline import anchor_roofline, our_roofline
from inferlab.quant import bench as quant_bench
from inferlab.quant import choice as quant_choice
from inferlab.report import narrative
from inferlab.report.assemble import build_document
from inferlab.report.build import ReportPaths, write_report
from inferlab.report.inputs import ReportInputError, ReportInputs, load_inputs
from inferlab.report.milestones.checklist import check_all
from inferlab.report.milestones.common import FAIL, MISSING, PASS, EagerCalls
from inferlab.report.milestones.kvcache import COMPILED_BOUND_TARGET, check_m1
from inferlab.report.milestones.quant import check_m4
from inferlab.report.milestones.sampling import check_m2
from inferlab.report.milestones.speculative import (
    COMPILE_TARGET_S,
    COMPILED_DRAFT_C_TARGET,
    COMPILED_VERIFY_TARGET,
    COMPILED_WALL_TARGET,
    check_m3,
)
from inferlab.report.stamp_reader import stamp_lines
from inferlab.review.numbers import fmt
from inferlab.review.runinfo import benchmark_table, classify_outputs
from inferlab.sampling import aggregate as sampling_aggregate
from inferlab.sampling import threshold_rule
from inferlab.sampling.grid import GREEDY_CELL
from inferlab.sampling.human_match import cell_distances, choose_human_match
from inferlab.sampling.summary_table import wide_summary
from inferlab.speculative import summary as speculative_summary
from inferlab.training.noise_floor import floor_value, noise_floor_table

SEED_REF = Path(__file__).resolve().parent.parent / "config" / "seed-reference.json"
ANCHOR = Path(__file__).resolve().parent.parent / "config" / "anchor-model.json"
MACHINE = {
    "cpu_model": "Test CPU",
    "cpu_cores": 2,
    "torch_threads": 1,
    "device": "cpu",
    "device_name": "Test CPU",
    "node": "test-node",
    "torch_version": "2.x",
    "os": "Linux",
    "git_commit": "abc123",
    "git_dirty": False,
}
MODEL = {"model": "ref_baseline", "params": 3688704, "checkpoint_sha256": "f" * 64, "val_loss": 4.7}
PROV = job_stamps(MACHINE, MODEL, 3, "the test's baseline")
SETTINGS = {
    "kvcache": {"reps": 3, "lengths": [32, 256]},
    "sampling": {
        "temperatures": [0.7, 1.3],
        "top_ps": [0.9, 1.0],
        "min_p": {"temperatures": [1.0], "values": [0.05]},
        "repetition": {"prompts": ["a", "b"], "samples": 2, "new_tokens": 24, "bootstrap_resamples": 100},
    },
    "speculative": {"prompts": ["a", "b"], "seeds": [0], "new_tokens": 16},
}
CELLS = [
    {"cell": "T0.7_p0.9", "truncation": "top_p", "temperature": 0.7, "top_p": 0.9, "min_p": 0.0},
    {"cell": "T0.7_p1.0", "truncation": "top_p", "temperature": 0.7, "top_p": 1.0, "min_p": 0.0},
    {"cell": "T1.3_p0.9", "truncation": "top_p", "temperature": 1.3, "top_p": 0.9, "min_p": 0.0},
    {"cell": "T1.3_p1.0", "truncation": "top_p", "temperature": 1.3, "top_p": 1.0, "min_p": 0.0},
    {"cell": "T1.0_minp0.05", "truncation": "min_p", "temperature": 1.0, "top_p": 1.0, "min_p": 0.05},
]
LOGITS = [3.0, 2.5, 2.0, 1.0, 0.5, 0.0, -1.0, -2.0]


# ------------------------------------------------------------------------------------ fixtures
# Only the raw measurements are written by hand (what a timing or sampling job records per run);
# every table the report reads is then made by the real producer, so a renamed column breaks
# these tests instead of silently switching the report to a fallback.

TINY = GPTConfig(vocab_size=64, d_model=64, n_layer=2, head_dim=32, max_seq_len=512)
PROMPT_TOKENS = 5


# engine -> (cached ms, uncached ms at 32 / 256 tokens, fixed per-step cost a): compiled has less overhead
ENGINES = {"eager": ({32: (40.0, 60.0), 256: (300.0, 900.0)}, 1.1),
           "compiled": ({32: (20.0, 45.0), 256: (150.0, 700.0)}, 0.5)}


def _engine_cols(engine: str) -> dict:
    return {"engine": engine, "engine_used": engine, "engine_fallback_reason": ""}


def kv_tables(same_output: bool = True, contended: bool = False, differs_on: str = "eager",
              compiled_prefill_eager: bool = True) -> dict[str, pd.DataFrame]:
    """Per-engine timings and step probes, then kvbench's summary and fit per engine, as kvcache_summary does.
    Every eager forward counts as an eager call; on compiled, only each cached generation's prefill (its prompt
    length has no package) unless compiled_prefill_eager is False."""
    rows, steps = [], []
    for engine, (lengths, a) in ENGINES.items():
        for length, (c, n) in lengths.items():
            for rep in range(3):
                for mode, ms in (("cache", c + rep), ("no_cache", n + rep)):
                    rows.append({**_engine_cols(engine), "device": "cpu", "threads": 2,
                                 "prompt_tokens": PROMPT_TOKENS, "length": length, "mode": mode, "rep": rep,
                                 "total_ms": ms, "ms_per_token": ms / length,
                                 "same_output": same_output or not (length == 256 and rep == 1
                                                                     and engine == differs_on),
                                 "kv_bytes_per_token": 8192.0, "contended": contended,
                                 "eager_calls": length if engine == "eager"
                                 else int(compiled_prefill_eager and mode == "cache")})
        steps += [{**_engine_cols(engine), "mode": mode, "positions": pos, "rep": rep,
                   "step_ms": (a + 0.004 * pos if mode == "no_cache" else 0.8 * a + 0.0001 * pos) + 0.01 * rep}
                  for mode in ("cache", "no_cache") for pos in (8, 64, 128, 256) for rep in range(3)]
    timings, steps = pd.DataFrame(rows), pd.DataFrame(steps)
    summary = by_engine(kvsummary.summarize_timings, timings.drop(columns="contended"))
    fit = by_engine(kvsummary.fit_table, timings.drop(columns="contended"), summary, steps, config=TINY)
    summary["contended"] = fit["contended"] = contended
    profile = pd.DataFrame([{**_engine_cols(e), "rank": 1, "op": "aten::linear", "op_ms_per_step": 0.3,
                             "wall_ms": 1.0, "op_ms": 0.4 if e == "eager" else 0.7,
                             "op_share": 0.4 if e == "eager" else 0.7, "contended": contended} for e in ENGINES])
    anchor = json.loads(ANCHOR.read_text(encoding="utf-8"))
    measured = []
    for engine in ENGINES:  # one measured row per engine, as scripts/kvcache_roofline.py writes them
        longest = summary[(summary["engine"] == engine) & (summary["mode"] == "cache") & (summary["length"] == 256)]
        measured.append(our_roofline(TINY, 100_000, 4, PROMPT_TOKENS, 256, 20e9, 50e9,
                                     float(longest["ms_per_token_median"].iloc[0]), "ref_baseline", "Test CPU",
                                     "cpu").assign(engine=engine, engine_used=engine))
    roofline = pd.concat([anchor_roofline(anchor, [0, 4096]), *measured], ignore_index=True)
    return {"kv_timings": timings, "kv_summary": summary, "kv_fit": fit, "kv_profile": profile, "roofline": roofline}


def sampling_samples(cells: list[dict]) -> pd.DataFrame:
    """Per-sample scores as a sampling_cell job records them: repetition falls, in-corpus share too.

    The human reference (sampling_human's rows: cell "human", truncation "reference", no knobs) sits
    between the cells, closest to the middle of the grid."""
    rows = []
    for i, cell in enumerate(cells):
        for prompt in ("a", "b"):
            for sample in range(3):
                wobble = 0.01 * sample
                rows.append({**cell, "prompt": prompt, "sample": sample, "seq_rep_4": 0.5 - 0.08 * i + wobble,
                             "distinct_1": 0.3, "distinct_2": 0.6 + 0.02 * i + wobble,
                             "in_corpus_4gram_share": 0.8 - 0.015 * i - wobble,
                             "nll_per_token": 2.0 + 0.3 * i + wobble, "zipf_coefficient": 1.2 - 0.05 * i,
                             "text": f"text {i}"})
    return pd.DataFrame(rows)


HUMAN_ROW = {"cell": "human", "truncation": "reference", "temperature": float("nan"), "top_p": float("nan"),
             "min_p": float("nan")}


def sampling_tables(full: bool = True, rule: str = "human_match") -> dict[str, pd.DataFrame]:
    """sampling_default's tables from the real producers: human_match (default) or the old in-corpus floor."""
    dist = pd.DataFrame(distribution_rows(LOGITS, CELLS))
    cells = [dict(GREEDY_CELL), *CELLS]
    samples = sampling_samples(cells)
    # the human row: scored like a cell, its numbers those of a point inside the grid (cell index 2.2)
    human = sampling_samples([HUMAN_ROW] * 3).iloc[12:18].assign(cell="human")
    human = human.assign(seq_rep_4=human["seq_rep_4"] - 0.176, distinct_2=human["distinct_2"] + 0.044,
                         in_corpus_4gram_share=human["in_corpus_4gram_share"] - 0.033,
                         nll_per_token=human["nll_per_token"] + 0.66, zipf_coefficient=human["zipf_coefficient"] - 0.11)
    samples = pd.concat([samples, human], ignore_index=True)
    summary = sampling_aggregate.summarise(samples, resamples=50, seed=0)
    distances = cell_distances(samples, resamples=50, seed=0)
    if rule == "human_match":
        record = choose_human_match(distances, wide_summary(summary), dist)
    else:
        record = threshold_rule.choose_default(summary[summary["cell"] != "human"], dist, max_in_corpus_drop=0.1)
    if not full:
        summary = summary[~summary["cell"].isin([c["cell"] for c in CELLS[-2:]])]
    return {"sp_distribution": dist, "sp_repetition": summary, "sp_default": pd.DataFrame([record]),
            "sp_distance": distances.assign(chosen=distances["cell"] == record["cell"]),
            "sp_samples": sampling_aggregate.example_texts(samples, 1)}


DRAFTS = {"c1_dim64": (0.6, 0.09), "c1_dim128": (0.7, 0.29)}  # draft -> (acceptance, step-time ratio)
SPEC_WALL = {"eager": 1.0, "compiled": 0.7}  # engine -> wall-time scale of a speculative run (compiled is faster)
SPEC_PREFILL_MS, BASELINE_PREFILL_MS = 10.0, 5.0  # each decode's prompt caching, inside its wall time


# ms: each model's one-token step bound, as speculative_summary computes them from the probe
SPEC_STEP_BOUNDS = {"ref_baseline": 0.3, "c1_dim64": 0.03, "c1_dim128": 0.09}
# ms: the target's (k+1)-token verification bound per k (compute-bound at k = 3)
SPEC_VERIFY_BOUNDS = {1: 0.3, 3: 0.6}
# s: each compiled group job's compile time, as its engine stamp records it (eager compiles nothing)
SPEC_COMPILE_S = {("c1_dim64", 1): 60.0, ("c1_dim64", 3): 130.0, ("c1_dim128", 1): 70.0, ("c1_dim128", 3): 110.0}


def spec_tables(all_identical: bool = True, contended: bool = False,
                compiled_step_scale_by_k: dict[int, float] | None = None,
                draft_forms: dict[int, str] | None = None) -> dict[str, pd.DataFrame]:
    """speculative_summary.summarise per engine and best_groups_by_engine, as speculative_summary runs them,
    over run counters written as the group jobs write them. compiled_step_scale_by_k: the machine's
    slowdown in the compiled engine's group jobs of that k (their own target step scales with it).
    draft_forms: k -> the form of the compiled rounds' draft projections (the same for both k unless told)."""
    draft_forms = draft_forms or {1: "template GEMMs", 3: "template GEMMs"}
    runs, forward, ident, baseline = [], [], [], []
    for engine, scale in SPEC_WALL.items():
        cols = _engine_cols(engine)
        eager = int(engine == "eager")  # every forward of the eager engine is an eager call, none of compiled's
        for draft, (alpha, cost) in DRAFTS.items():
            for k in (1, 3):
                rounds, proposed = 10, 10 * k
                accepted = round(alpha * proposed)
                for rep in range(2):
                    for prompt_index in (0, 1):
                        runs.append({**cols, "draft": draft, "k": k, "rep": rep, "prompt_index": prompt_index,
                                     "seed": 0, "new_token_ids": [1, 2, 3], "new_tokens": rounds + accepted,
                                     "rounds": rounds, "target_forwards": rounds, "draft_forwards": rounds * k,
                                     "drafted": rounds * k, "proposed": proposed, "accepted": accepted,
                                     "generated": rounds + accepted, "overlap_sum": alpha * proposed,
                                     "wall_ms": (100.0 + 10 * k + rep) * scale,
                                     "prefill_ms": SPEC_PREFILL_MS * scale,
                                     "eager_calls": eager * (2 + rounds * (k + 1))})
                slowdown = (compiled_step_scale_by_k or {}).get(k, 1.0) if engine == "compiled" else 1.0
                forward += [{**cols, "draft": draft, "k": k, "role": "target", "tokens_per_forward": 1,
                             "forward_ms": 1.0 * slowdown, "eager_calls": eager * 20},
                            {**cols, "draft": draft, "k": k, "role": "target", "tokens_per_forward": k + 1,
                             "forward_ms": 1.2, "eager_calls": eager * 20},
                            {**cols, "draft": draft, "k": k, "role": "draft", "tokens_per_forward": 1,
                             "forward_ms": cost, "eager_calls": eager * 20}]
                if engine == "compiled":  # its rounds are one graph: the drafts are timed as one call
                    forward.append({**cols, "draft": draft, "k": k, "role": "draft_half", "tokens_per_forward": k,
                                    "forward_ms": 0.6 * k * cost, "draft_form": draft_forms[k], "eager_calls": 0})
                ident += [{**cols, "draft": draft, "k": k, "prompt_index": p,
                           "identical": all_identical or not (k == 3 and p == 1 and engine == "eager")}
                          for p in (0, 1)]
                baseline += [{**cols, "draft": draft, "k": k, "rep": rep, "prompt_index": p, "seed": 0,
                              "wall_ms": 100.0 + rep, "prefill_ms": BASELINE_PREFILL_MS,
                              "eager_calls": eager * (1 + rounds + accepted)}
                             for rep in range(2) for p in (0, 1)]
    params = {"ref_baseline": 3688704, "c1_dim64": 300_000, "c1_dim128": 1057920}
    summary = by_engine(speculative_summary.summarise, pd.DataFrame(runs), pd.DataFrame(forward),
                        pd.DataFrame(baseline), params=params, target_name="ref_baseline")
    summary = speculative_summary.with_step_bounds(summary, SPEC_STEP_BOUNDS, "ref_baseline", SPEC_VERIFY_BOUNDS)
    stamps = {(draft, k, engine): {"package_compile_ms_total": 1e3 * SPEC_COMPILE_S[draft, k], "packages": 4}
              if engine == "compiled" else {"compile_ms_total": 0.0}
              for engine in SPEC_WALL for draft in DRAFTS for k in (1, 3)}
    summary = speculative_summary.with_compile_seconds(summary, stamps)
    summary["contended"] = contended
    return {"spec_summary": summary, "spec_best": speculative_summary.best_groups_by_engine(summary),
            "spec_identity": pd.DataFrame(ident)}


QUANT_SCHEMES = ["int8_per_channel_sym", "int4_per_tensor_sym", "bf16"]


@functools.cache
def quant_rows() -> tuple[dict, ...]:
    """quant_bench.run_scheme on a tiny random model and a few hundred tokens (floor set later)."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=32, d_model=64, n_layer=1, head_dim=32, max_seq_len=64)).eval()
    val = torch.randint(0, 32, (400,))
    prompt = torch.randint(0, 32, (1, 4))
    return tuple(quant_bench.run_scheme(model, name, val, val, 32, prompt, 4, 1) for name in QUANT_SCHEMES)


def quant_tables(floor: float = 1.0) -> dict[str, pd.DataFrame]:
    """noise.noise_floor_table, then quant_choice.summary_table and choose_scheme with that floor."""
    runs = [{"name": "ref_baseline", "seed": 1, "val_loss": 4.700},
            {"name": "ref_baseline_seed101", "seed": 101, "val_loss": 4.707}]
    nf = noise_floor_table(runs, sigmas=3, use="fixed", fixed_value=floor)
    summary = quant_choice.summary_table([pd.DataFrame([row]) for row in quant_rows()], QUANT_SCHEMES,
                                         floor_value(nf))
    return {"quant_summary": summary, "quant_choice": quant_choice.choose_scheme(summary), "noise_floor": nf}


def make_data(**tables) -> ReportInputs:
    data = ReportInputs(
        config=SETTINGS, target="ref_baseline", seed_reference=json.loads(SEED_REF.read_text(encoding="utf-8"))
    )
    for key, df in tables.items():
        data.tables[key] = df
        data.provenance[key] = PROV
    data.metas = {
        "ref_baseline": {"params": 3688704, "val_loss": 4.7, "weights_sha256": "f" * 64, "tokens_per_s": 9e3},
        "c1_dim128": {"params": 1057920, "val_loss": 5.0, "weights_sha256": "e" * 64},
    }
    data.json["sp_logits"] = {
        "prompt": "p",
        "model": "ref_baseline",
        "checkpoint_sha256": "f" * 64,
        "vocab": [f"t{i}" for i in range(len(LOGITS))],
        "logits": LOGITS,
    }
    data.json["corpus_stats"] = {"train_chars": 1000, "val_chars": 100, "unk_rate": 0.014, "raw_sha256": "a" * 64}
    return data


def full_data(**overrides) -> ReportInputs:
    tables = {**kv_tables(), **sampling_tables(), **spec_tables(), **quant_tables()}
    tables.update(overrides)
    return make_data(**tables)


# ---------------------------------------------------------------------------------- milestones


def test_all_milestones_pass_on_good_tables():
    data = full_data()
    for check in (check_m1, check_m2, check_m3, check_m4):
        m = check(data, MACHINE)
        assert m.status == PASS, (m.id, m.verdict)
        assert m.stamps["model"]["checkpoint_sha256"] == "f" * 64
        assert m.stamps["machine"]["cpu_model"] == "Test CPU"
        assert m.stamps["repeats"] and m.stamps["baseline"]


def test_m1_evidence_is_the_measured_numbers():
    tables = kv_tables()
    m = check_m1(full_data(), MACHINE)
    eager = {key: df[df["engine"] == "eager"] for key, df in tables.items() if key != "roofline"}
    summary = eager["kv_summary"].set_index(["length", "mode"])
    fit = eager["kv_fit"].set_index("length").loc[256]
    roof = tables["roofline"]
    ours = roof[(roof["subject"] == "ours") & (roof["engine"] == "eager")].iloc[0]
    ev = m.evidence.engines["eager"]
    assert m.evidence.length == 256 and m.evidence.primary is ev  # criteria on the seed-faithful engine
    assert ev.ratio == pytest.approx(summary.loc[(256, "cache"), "speed_ratio"])
    assert ev.a_ms == pytest.approx(fit["a_ms"]) and ev.a_ms == pytest.approx(1.1, abs=0.02)
    for name in ("flop_estimate_ratio", "predicted_ratio"):
        assert getattr(ev, name) == pytest.approx(fit[name]), name
    assert ev.roofline_bound_ms == pytest.approx(ours["lower_bound_ms_per_token"])
    assert ev.cached_ms_per_token == pytest.approx(summary.loc[(256, "cache"), "ms_per_token_median"])
    found = " ".join(narrative.findings(m))  # the explanation is the findings'; the verdict does not restate it
    for number in (fmt(ev.ratio, "×"), fmt(ev.flop_estimate_ratio, "×"), fmt(ev.predicted_ratio, "×")):
        assert number in found, number
    assert fmt(ev.predicted_ratio, "x") not in m.verdict
    seed = json.loads(SEED_REF.read_text(encoding="utf-8"))["kvcache"]
    assert fmt(ev.ratio, "x") in m.headline and f"{seed['cpu_ratio_at_256']}x" in m.headline


def test_m1_compares_the_compiled_engine_with_eager():
    tables = kv_tables()
    m = check_m1(full_data(), MACHINE)
    compiled, eager = m.evidence.engines["compiled"], m.evidence.engines["eager"]
    summ, fit = tables["kv_summary"], tables["kv_fit"]
    row = summ[(summ["engine"] == "compiled") & (summ["length"] == 256) & (summ["mode"] == "cache")].iloc[0]
    assert compiled.ratio == pytest.approx(row["speed_ratio"])
    assert compiled.cached_ms_per_token == pytest.approx(row["ms_per_token_median"])
    a_c = fit[fit["engine"] == "compiled"]["a_ms"].iloc[0]
    assert compiled.a_ms == pytest.approx(a_c) and a_c < eager.a_ms  # the fixture's smaller overhead
    assert f"{fmt(eager.ratio, 'x')} on eager, {fmt(compiled.ratio, 'x')} on compiled" in m.verdict
    assert m.verdict.startswith(m.headline)  # the verdict is the headline and its closing
    # the compiled engine's target: its cached step within 4x the roofline bound (here 22x: not met)
    (row,) = [t for t in m.evidence.targets if t.target.startswith("cached step over the roofline bound")
              and t.target.endswith("compiled")]
    assert row.ours == pytest.approx(compiled.cached_ms_per_token / compiled.roofline_bound_ms)
    assert (row.limit, row.met) == (COMPILED_BOUND_TARGET, False) and "not met below: cached step" in m.verdict.lower()


def test_contended_timings_are_marked_in_stamp_and_verdict():
    m = check_m1(full_data(**kv_tables(contended=True)), MACHINE)
    assert m.status == PASS and "contended" in m.verdict and m.stamps["contended"] is True
    assert m.evidence.timing.contended and "contended" in " ".join(stamp_lines(m.stamps))
    m = check_m3(full_data(**spec_tables(contended=True)), MACHINE)
    assert "contended" in m.verdict and "contended" in m.headline
    assert "contended" not in check_m1(full_data(), MACHINE).verdict


def test_one_contended_group_job_is_a_caveat_of_its_rows_not_of_the_experiment():
    """Only the rows of the contended job carry it: the headline and the stamps stay clean, the caveat counts."""
    tables = spec_tables()
    summary = tables["spec_summary"].copy()
    summary["contended"] = [i == 0 for i in range(len(summary))]
    m = check_m3(full_data(**{**tables, "spec_summary": summary}), MACHINE)
    assert not m.evidence.timing.contended and "contended" not in m.headline and "contended" not in m.stamps
    assert f"timings contended in 1 of {len(summary)} timed rows" in " ".join(narrative.caveats(m))


def test_the_compiled_rows_eager_calls_are_stated_under_the_verdict():
    """Forwards that ran op by op inside the compiled engine's timed rows are a caveat, counted from the rows; none
    is a brief note, so a reader sees they were counted; tables from before the count say nothing."""
    m = check_m1(full_data(), MACHINE)  # each compiled cached generation ran its prompt eagerly
    assert m.evidence.timing.eager_calls == EagerCalls(calls=6, rows_with=6, rows=12)
    said = " ".join(narrative.caveats(m))
    assert "compiled rows: 6 eager calls in 6 of 12 rows (their forwards ran op by op" in said
    assert "caveats below" in m.verdict and "eager calls" not in m.verdict  # under the verdict, not in it
    clean = check_m1(full_data(**kv_tables(compiled_prefill_eager=False)), MACHINE)
    assert "eager calls" not in " ".join(narrative.caveats(clean))
    assert narrative.notes(clean) == ["compiled rows: 0 eager calls in 12 rows (every forward ran as a package)"]
    assert ("note", f"Note: {narrative.notes(clean)[0]}.") in narrative.verdict_blocks(clean)
    old = check_m1(full_data(kv_timings=kv_tables()["kv_timings"].drop(columns="eager_calls")), MACHINE)
    assert old.evidence.timing.eager_calls is None and not narrative.notes(old)
    assert "eager calls" not in " ".join(narrative.caveats(old))
    # M3: the group table's compiled rows (none in the fixture's), then one group whose forwards ran eagerly
    m = check_m3(full_data(), MACHINE)
    assert narrative.notes(m) == ["compiled rows: 0 eager calls in 4 rows (every forward ran as a package)"]
    tables = spec_tables()
    summary = tables["spec_summary"]
    summary.loc[(summary["engine"] == "compiled") & (summary["k"] == 3) & (summary["draft"] == "c1_dim64"),
                "eager_calls"] = 12
    m = check_m3(full_data(**tables), MACHINE)
    assert "compiled rows: 12 eager calls in 1 of 4 rows" in " ".join(narrative.caveats(m)) and not narrative.notes(m)
    assert len(m.verdict) <= narrative.VERDICT_CHARS


def test_timings_from_different_nodes_are_not_comparable():
    data = full_data()
    node_a, node_b = {**MACHINE, "node": "node-a"}, {**MACHINE, "node": "node-b"}
    data.provenance["kv_summary"] = {**PROV, "machine": node_a,
                                     "machines_per_length": {"t32.parquet": node_a, "t256.parquet": node_b}}
    m = check_m1(data, MACHINE)
    said = " ".join(narrative.caveats(m))  # under the verdict, which says only that caveats follow
    assert "not comparable (different nodes)" in said and "node-a, node-b" in said and "caveats below" in m.verdict
    assert m.stamps["machine"]["node"] == "node-a" and "node-a" in " ".join(stamp_lines(m.stamps))
    assert "different nodes" not in check_m1(full_data(), MACHINE).verdict
    # speculative groups whose jobs ran on two nodes
    data = full_data()
    per_group = {"c1_dim64_k1.parquet": node_a, "c1_dim64_k3.parquet": node_b}
    data.provenance["spec_summary"] = {**PROV, "machine": node_a, "machines_per_group": per_group}
    m = check_m3(data, MACHINE)
    assert "not comparable (different nodes)" in " ".join(narrative.caveats(m))
    assert m.stamps["nodes"] == m.evidence.timing.nodes == ["node-a", "node-b"]


def test_m1_fails_when_an_output_differs_and_is_missing_without_fit():
    m = check_m1(full_data(**kv_tables(same_output=False)), MACHINE)
    assert m.status == FAIL and m.evidence.differs_by_engine == {"eager": 2, "compiled": 0}
    assert "Failed: outputs token-identical in only 22 of 24 runs (differing: eager 2, compiled 0)" in m.verdict
    m = check_m1(full_data(**kv_tables(same_output=False, differs_on="compiled")), MACHINE)
    assert m.status == FAIL and m.evidence.differs_by_engine == {"eager": 0, "compiled": 2}  # every engine counts
    data = full_data()
    data.tables["kv_fit"] = None
    m = check_m1(data, MACHINE)
    assert m.status == MISSING and "kv_fit" in m.missing_inputs and "kv_fit" in m.verdict


def test_m2_fails_only_when_table_default_or_decision_is_missing():
    m = check_m2(full_data(**{"sp_repetition": sampling_tables(full=False)["sp_repetition"]}), MACHINE)
    assert m.status == FAIL and "only 3 of 5 grid cells" in m.verdict and len(m.evidence.cells_absent) == 2
    rep = sampling_tables()["sp_repetition"]
    m = check_m2(full_data(sp_repetition=rep[rep["cell"] != "human"]), MACHINE)
    assert m.status == FAIL and "no human reference row" in m.verdict
    m = check_m2(full_data(sp_default=sampling_tables()["sp_default"].assign(min_p_decision="")), MACHINE)
    assert m.status == FAIL and "no min-p decision stated" in m.verdict
    data = full_data()
    data.tables["sp_default"] = None
    assert check_m2(data, MACHINE).status == MISSING


def test_m2_a_rule_with_no_cell_inside_its_threshold_is_a_finding_not_a_failure():
    tables = sampling_tables(rule="max_in_corpus_drop")
    default = tables["sp_default"].assign(rule_satisfied=False)
    m = check_m2(full_data(**{**tables, "sp_default": default}), MACHINE)
    assert m.status == PASS and "finding: no cell met the rule's threshold" in " ".join(narrative.caveats(m))
    assert f"Default {default['cell'].iloc[0]} by the in-corpus floor rule" in narrative.findings(m)[0]


def test_m2_cites_distance_to_human_text_competitor_greedy_kept_and_min_p():
    m = check_m2(full_data(), MACHINE)
    tables = sampling_tables()
    default = tables["sp_default"].iloc[0]
    assert default["kind"] == "human_match" and m.status == PASS, m.verdict
    kept = int(tables["sp_distribution"].set_index("cell").loc[default["cell"], "kept"])
    ev = m.evidence
    assert (ev.chosen, ev.kept, ev.runner_up) == (default["cell"], kept, default["runner_up_cell"])
    assert (ev.min_p_decision, ev.min_p_reason) == (default["min_p_decision"], default["min_p_reason"])
    assert ev.distance_ci == (default["distance_ci_low"], default["distance_ci_high"])
    assert f"Default {default['cell']}" in m.verdict and fmt(kept, " tokens kept") in m.verdict
    assert f"min-p: {default['min_p_decision']}" in m.verdict
    assert (f"distance to human text {fmt(default['distance'])} (CI {fmt(default['distance_ci_low'])}–"
            f"{fmt(default['distance_ci_high'])})") in m.verdict
    found = narrative.findings(m)[0]  # the comparison behind the choice
    assert f"{fmt(default['runner_up_distance'])} for the next closest, {default['runner_up_cell']}" in found
    assert f"{fmt(default['greedy_distance'])} for greedy" in found
    quoted = " ".join(narrative.statements(m))  # the producer's rule and min-p reason, verbatim, under the verdict
    assert default["rule"] in quoted and default["min_p_reason"] in quoted
    assert fmt(default["distance"]) in m.headline and str(kept) in m.headline
    assert "352 kept" in m.headline  # the seed page's number beside ours


def test_m3_choice_and_identity():
    m = check_m3(full_data(), MACHINE)
    assert m.status == PASS and m.evidence.greedy_identical == m.evidence.greedy_cases == 16
    tables = spec_tables()
    chosen = tables["spec_best"].iloc[0]  # the one overall choice
    assert chosen["criterion"] == "chosen" and bool(chosen["overall_choice"])
    assert (m.evidence.engine, m.evidence.draft, m.evidence.k) == (chosen["engine"], chosen["draft"], chosen["k"])
    assert m.evidence.speedup_time == pytest.approx(tables["spec_summary"]["speedup_theory_time"].max())
    assert m.evidence.reason == chosen["reason"] and chosen["reason"] in " ".join(narrative.statements(m))
    m = check_m3(full_data(**spec_tables(all_identical=False)), MACHINE)
    assert m.status == FAIL and "14 of 16" in m.verdict


def test_m3_reports_c_best_group_and_wall_clock_per_engine():
    tables = spec_tables()
    summary = tables["spec_summary"]
    m = check_m3(full_data(), MACHINE)
    for engine in ("eager", "compiled"):
        rows = summary[summary["engine"] == engine]
        ev = m.evidence.engines[engine]
        assert ev.fastest_wall_speedup == pytest.approx(rows["wall_speedup"].max())
        assert f"{engine} {fmt(ev.fastest_wall_speedup, 'x')} ({ev.fastest_group})" in m.verdict
    eager, compiled = m.evidence.engines["eager"], m.evidence.engines["compiled"]
    # eager speculative runs are slower than target-only here: the findings say so
    assert eager.fastest_wall_speedup < 1.0 and "On eager no group beats target-only" in narrative.findings(m)[2]
    (wall,) = [t for t in m.evidence.targets if t.target.startswith("fastest group on the wall clock, compiled")]
    assert wall.met is (compiled.fastest_wall_speedup >= COMPILED_WALL_TARGET) and wall.limit == COMPILED_WALL_TARGET
    assert f"compiled {fmt(compiled.fastest_wall_speedup, 'x')}" in m.headline
    # the round's breakdown, from the summary's own columns (the appendix shows them)
    fastest = rows.loc[rows["wall_speedup"].idxmax()]
    assert fastest["round_ms"] == pytest.approx(fastest["round_draft_ms"] + fastest["round_verify_ms"]
                                                + fastest["round_prefill_ms"] + fastest["round_rest_ms"])
    # the prompts' prefill, timed inside each decode, is a part of its own and not in the rest: two prompts of
    # 10 ms (x 0.7 on compiled) over 20 rounds; without it the rounds face the baseline's steps without its 2 x 5 ms
    assert fastest["round_prefill_ms"] == pytest.approx(2 * SPEC_PREFILL_MS * SPEC_WALL["compiled"] / 20)
    k = int(fastest["k"])
    loops = [(2 * (100.0 + rep) - 2 * BASELINE_PREFILL_MS)
             / (2 * (100.0 + 10 * k + rep) * SPEC_WALL["compiled"] - 2 * SPEC_PREFILL_MS * SPEC_WALL["compiled"])
             for rep in range(2)]
    assert fastest["wall_speedup_without_prefill"] == pytest.approx(sum(loops) / 2)
    # each step against its bound: the target's 1.0 ms over 0.3, the fastest group's draft over its own
    assert fastest["target_step_over_bound"] == pytest.approx(1.0 / 0.3)
    assert fastest["draft_step_over_bound"] == pytest.approx(fastest["draft_step_ms"]
                                                             / SPEC_STEP_BOUNDS[fastest["draft"]])
    # the rounds' drafts: k separate steps on eager, one timed graph on compiled, whose step is c in a round
    eager_rows = summary[summary["engine"] == "eager"]
    assert not eager_rows["drafts_in_one_graph"].any()
    assert (eager_rows["round_draft_ms"] == eager_rows["k"] * eager_rows["draft_step_ms"]).all()
    assert rows["drafts_in_one_graph"].all()
    assert rows["round_draft_ms"].tolist() == pytest.approx((0.6 * rows["k"] * rows["draft_step_ms"]).tolist())
    assert rows["c_time_in_round"].tolist() == pytest.approx((0.6 * rows["c_time"]).tolist())
    # one graph's drafts cost 0.6 k steps here: each further step adds 0.6 of a step, against a 1.0 ms target
    cost = DRAFTS[fastest["draft"]][1]
    marginal = rows.loc[rows["draft"] == fastest["draft"], "draft_step_marginal_ms"]
    assert marginal.tolist() == pytest.approx([0.6 * cost] * 2)
    # the roofline's verification (0.3 and 0.6 ms against a 0.3 ms step) and the best group at the bounds
    assert compiled.verify_bound_ratio_by_k == pytest.approx({1: 1.0, 3: 2.0})
    at_bound = rows.loc[rows["speedup_at_bound"].idxmax()]
    assert at_bound["speedup_at_bound"] == pytest.approx(
        at_bound["formula_tokens_per_target_forward"] * 0.3
        / (at_bound["k"] * SPEC_STEP_BOUNDS[at_bound["draft"]] + SPEC_VERIFY_BOUNDS[at_bound["k"]]))
    assert compiled.speedup_at_bound == pytest.approx(at_bound["speedup_at_bound"])
    assert wall.roofline == pytest.approx(at_bound["speedup_at_bound"])


def test_m3_fits_no_draft_step_across_two_forms_of_the_drafts_projections():
    """k = 1 as template GEMMs, k = 3 as reductions: a slope through both would be the difference between
    the forms, not what one more step costs, so each form (a single k here) has none."""
    tables = spec_tables(draft_forms={1: "template GEMMs", 3: "reductions"})
    rows = tables["spec_summary"][tables["spec_summary"]["engine"] == "compiled"]
    assert rows["draft_step_marginal_ms"].isna().all()
    assert sorted(set(zip(rows["k"], rows["draft_form"], rows["draft_step_marginal_ks"], strict=True))) == [
        (1, "template GEMMs", "1"), (3, "reductions", "3")]
    assert check_m3(full_data(**tables), MACHINE).status == PASS


def _targets(m) -> dict:
    return {t.target: t for t in m.evidence.targets}


def test_m3_holds_the_compiled_verification_to_its_target_and_names_where_the_roofline_rules_it_out():
    """Verifications cost 1.2 steps (met) unless a group's own target step runs faster; the roofline puts
    k = 3's verification at 2.00 bound steps, above the target whatever the engine measured."""
    m = check_m3(full_data(), MACHINE)
    rows = _targets(m)
    k3 = rows["verification at k = 3, compiled (single steps)"]
    assert (k3.ours, k3.limit, k3.met, k3.roofline) == (pytest.approx(1.2), COMPILED_VERIFY_TARGET, True,
                                                         pytest.approx(2.0))
    assert not [t for t in rows if t.startswith("verification") and "eager" in t]  # the target is the compiled engine's
    # a machine that ran the compiled groups of k = 3 faster: their own target step 0.8 ms, so 1.2 / 0.8 = 1.5 steps
    m = check_m3(full_data(**spec_tables(compiled_step_scale_by_k={3: 0.8})), MACHINE)
    k3 = _targets(m)["verification at k = 3, compiled (single steps)"]
    assert k3.ours == pytest.approx(1.5) and k3.met is False
    assert "not met below: verification at k = 3" in m.verdict.lower()
    assert m.evidence.engines["compiled"].verify_worst_by_k == pytest.approx({1: 1.2, 3: 1.5})


def test_m3_holds_the_compiled_drafts_cost_and_each_jobs_compile_time_to_their_targets():
    """The smallest draft (fewest parameters: c1_dim64) costs 0.09 of a target step as a call and 0.6 of
    that inside a round's graph: met. The c1_dim64 k = 3 job compiled for 130 s: over the 120 s target."""
    m = check_m3(full_data(), MACHINE)
    ev, rows = m.evidence.engines["compiled"], _targets(m)
    call = rows["c by time of c1_dim64 as a call, compiled"]
    assert call.ours == pytest.approx((0.09, 0.09)) and (call.limit, call.met) == (COMPILED_DRAFT_C_TARGET, True)
    assert rows["c by time of c1_dim64 inside a round's graph"].ours == pytest.approx((0.054, 0.054))
    (compile_row,) = [t for t in rows.values() if t.target.startswith("compile time")]
    assert compile_row.ours == (60.0, 130.0) and (compile_row.limit, compile_row.met) == (COMPILE_TARGET_S, False)
    assert (ev.compile_longest_group, ev.compile_packages) == ("c1_dim64 k=3", 4)
    # the k = 3 jobs ran their target step five times as fast: c is five times larger there, above the target
    slow = check_m3(full_data(**spec_tables(compiled_step_scale_by_k={3: 0.2})), MACHINE)
    call = _targets(slow)["c by time of c1_dim64 as a call, compiled"]
    assert call.ours == pytest.approx((0.09, 0.45)) and call.met is False


def test_the_targets_table_is_rendered_from_the_evidence():
    """One row a target under the verdict: ours, the limit (a target's, the roofline's, the seed page's), met."""
    data = full_data()
    milestones = check_all(data)
    doc = build_document(data, milestones, {"config_sha256": "x", "git_commit": "abc"})
    tables = {b[2]: b[1] for b in doc.blocks if b[0] == "table" and b[2].startswith("What M")}
    assert sorted(tables) == [f"What M{i} checked: ours against each limit" for i in range(1, 5)]
    m3 = tables["What M3 checked: ours against each limit"]
    assert list(m3.columns) == ["target", "ours", narrative.LIMIT, "met?"]
    rows = m3.set_index("target")
    assert rows.loc["greedy output identical to the target's (cases)"].tolist() == ["16", "16 (every case)", "met"]
    assert rows.loc["verification at k = 3, compiled (single steps)"].tolist() == ["1.2", "1.3 (target); roofline 2",
                                                                                    "met"]
    assert rows.loc["c by time of c1_dim64 as a call, compiled", "ours"] == "0.09"
    compile_row = rows.loc[[t for t in rows.index if t.startswith("compile time")][0]]
    assert compile_row.tolist() == ["60–130 s", "120 s (target)", "not met"]
    # the seed page's figures sit in the limit column, marked as theirs
    m4 = tables["What M4 checked: ours against each limit"].set_index("target")
    assert m4.loc["noise floor (nats)", narrative.LIMIT] == "0.02 (seed page)"


def test_m3_says_when_the_group_jobs_ran_at_different_machine_speeds():
    assert "different machine speeds" not in check_m3(full_data(), MACHINE).verdict
    tables = spec_tables(compiled_step_scale_by_k={3: 2.0})
    summary = tables["spec_summary"]
    assert summary.groupby("engine")["job_speed_spread"].first().to_dict() == {"eager": 1.0, "compiled": 2.0}
    m = check_m3(full_data(**tables), MACHINE)
    assert m.evidence.engines["compiled"].job_speeds_differ and not m.evidence.engines["eager"].job_speeds_differ
    assert ("the compiled group jobs ran at different machine speeds (their own target step 1–2 ms)"
            in " ".join(narrative.caveats(m)))


def test_m4_pass_fail_missing():
    m = check_m4(full_data(), MACHINE)
    choice = quant_tables()["quant_choice"].iloc[0]
    assert m.status == PASS and m.evidence.scheme == choice["scheme"] == "int4_per_tensor_sym"  # fewest bits
    quoted = " ".join(narrative.statements(m))
    assert choice["measured"] in quoted and choice["reason"] in quoted
    smallest = min(row["delta_loss"] for row in quant_rows())
    m = check_m4(full_data(**quant_tables(floor=smallest - 1e-3)), MACHINE)
    assert m.status == FAIL and "no scheme's loss increase is below the noise floor" in m.verdict
    assert m.evidence.scheme is None and m.evidence.smallest[1] == pytest.approx(smallest)
    data = full_data()
    data.tables["quant_summary"] = None
    assert check_m4(data, MACHINE).status == MISSING


def test_m4_states_an_unreliable_noise_floor():
    tables = quant_tables()
    nf = tables["noise_floor"]
    assert not bool(nf["floor_reliable"].iloc[0])  # two runs: the producer flags the floor
    m = check_m4(full_data(), MACHINE)
    assert m.status == PASS and "noise floor is unreliable" in " ".join(narrative.caveats(m))
    assert nf["floor_reliability_note"].iloc[0] in " ".join(narrative.caveats(m)) and "unreliable" in m.headline
    m = check_m4(full_data(noise_floor=nf.assign(floor_reliable=True, floor_reliability_note="")), MACHINE)
    assert "unreliable" not in m.verdict and "unreliable" not in m.headline
    assert fmt(m.evidence.delta_loss, "+") in m.headline and "+0.0083" in m.headline  # ours beside theirs


# ------------------------------------------------------------------------------- verdicts: short, and numbers only
# from the evidence record

FAILURES = {
    "full": dict,
    "M1 output differs": lambda: kv_tables(same_output=False),
    "M2 cells absent": lambda: {"sp_repetition": sampling_tables(full=False)["sp_repetition"]},
    "M3 greedy differs": lambda: spec_tables(all_identical=False),
    "M3 verification slow": lambda: spec_tables(compiled_step_scale_by_k={3: 0.8}),
    "M4 nothing chosen": lambda: quant_tables(floor=min(row["delta_loss"] for row in quant_rows()) - 1e-3),
}
NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?")


def _numbers(text: str) -> set[str]:
    return {n.replace(",", "").lstrip("-") for n in NUMBER.findall(text)}


def evidence_numbers(value) -> set[str]:
    """Every number an evidence record can show: each numeric field as fmt writes it (plain, as a percent),
    and the numbers inside its text fields (cell and group names, the producers' own sentences)."""
    if dataclasses.is_dataclass(value):
        value = dataclasses.asdict(value)
    if isinstance(value, dict):
        return set().union(set(), *map(evidence_numbers, value.values()), *map(evidence_numbers, value.keys()))
    if isinstance(value, (list, tuple)):
        return set().union(set(), *map(evidence_numbers, value))
    if isinstance(value, bool) or value is None:
        return set()
    if isinstance(value, (int, float)):
        return _numbers(fmt(value)) | _numbers(fmt(value, "%"))
    return _numbers(str(value))


@pytest.fixture(scope="module")
def checked() -> dict:
    return {name: check_all(full_data(**tables()), MACHINE) for name, tables in FAILURES.items()}


def test_every_verdict_is_at_most_three_sentences_and_500_characters(checked):
    for name, milestones in checked.items():
        for m in milestones:
            sentences = re.findall(r"[.!?](?:\s|$)", m.verdict)
            assert 1 <= len(sentences) <= 3 and len(m.verdict) <= 500, (name, m.id, len(m.verdict), m.verdict)
    assert [[m.status for m in ms].count(FAIL) for ms in checked.values()] == [0, 1, 1, 1, 0, 1]


def test_every_number_in_a_verdict_headline_or_finding_comes_from_the_evidence(checked):
    for name, milestones in checked.items():
        for m in milestones:
            allowed = evidence_numbers(m.evidence)
            for text in (m.verdict, m.headline, *narrative.findings(m)):
                quoted = _numbers(text)
                assert quoted and quoted <= allowed, (name, m.id, quoted - allowed, text)
    m = checked["full"][0]
    assert not _numbers(m.verdict + " and 12345.6 more") <= evidence_numbers(m.evidence)  # a typed-in number fails


def test_a_column_the_report_needs_fails_with_table_and_column():
    data = full_data(quant_choice=quant_tables()["quant_choice"].drop(columns="measured"))
    data.paths["quant_choice"], data.producers["quant_choice"] = "results/quant/choice.parquet", "quant_summary"
    with pytest.raises(ReportInputError, match=r"results/quant/choice.parquet.*quant_summary.*\['measured'\]"):
        check_m4(data, MACHINE)


def test_an_unreadable_table_fails_naming_file_rule_and_recovery(tmp_path):
    good, broken = tmp_path / "summary.parquet", tmp_path / "choice.parquet"
    write_table(quant_tables()["quant_summary"], good, provenance=PROV)
    broken.write_bytes(b"PAR1 not really a parquet file")
    paths = {"quant_summary": str(good), "quant_choice": str(broken)}
    producers = {"quant_summary": "quant_summary", "quant_choice": "quant_summary"}
    with pytest.raises(ReportInputError) as err:
        load_inputs(paths, producers, {}, {}, None, SETTINGS, "ref_baseline")
    assert str(broken) in str(err.value) and "rule quant_summary" in str(err.value)
    assert "--forcerun quant_summary" in str(err.value)
    # a table the config did not ask for is not passed at all, and stays "missing"
    data = load_inputs({"quant_summary": str(good)}, producers, {}, {}, None, SETTINGS, "ref_baseline")
    assert data.provenance["quant_summary"]["repeats"] == 3
    assert check_m4(data, MACHINE).status == MISSING


def test_aggregating_jobs_carry_the_measuring_stamp_forward():
    measured = job_stamps({"cpu_model": "node-7"}, MODEL, 5, "greedy", cell="T1.0_p0.9")
    carried = carried_stamps(measured, repeats=10)
    assert carried["machine"] == {"cpu_model": "node-7"} and carried["repeats"] == 10
    with pytest.raises(ValueError, match="repeats"):
        carried_stamps({"machine": {}, "model": None, "baseline": "x"})


def test_everything_missing_gives_missing_not_a_crash(tmp_path):
    data = make_data()
    data.json.clear()
    paths = _paths(tmp_path)
    milestones = write_report(data, paths, {"config_sha256": "0" * 64}, MACHINE)
    assert [m.status for m in milestones] == [MISSING] * 4
    assert "MISSING" in Path(paths.html).read_text(encoding="utf-8")
    assert "MISSING" in Path(paths.workbench).read_text(encoding="utf-8")


# ---------------------------------------------------------------------------------- rendering


def _paths(tmp: Path) -> ReportPaths:
    return ReportPaths(
        milestones=str(tmp / "results/milestones.parquet"),
        html=str(tmp / "reports/c13-report.html"),
        markdown=str(tmp / "reports/c13-report.md"),
        inference_json=str(tmp / "reports/c13-inference.json"),
        precomputed_json=str(tmp / "reports/precomputed.json"),
        workbench=str(tmp / "reports/sampling-workbench.html"),
        figures=str(tmp / "reports/figures"),
    )


EXTERNAL = re.compile(r"https?://|(?:src|href)\s*=\s*[\"']?//|url\(\s*[\"']?(?:https?:)?//", re.I)


def test_render_on_hand_made_tables(tmp_path):
    paths = _paths(tmp_path)
    run = {
        "config_sha256": config_hash({"a": 1}),
        "git_commit": "abc123",
        "git_dirty": False,
        "benchmarks": pd.DataFrame([{"job": "train/ref_baseline", "seconds": 5.0, "max_rss_mb": 500.0}]),
        "outputs": pd.DataFrame([{"path": "results/x.parquet", "status": "reused"}]),
    }
    milestones = write_report(full_data(), paths, run, MACHINE)
    assert [m.status for m in milestones] == [PASS] * 4

    table = pd.read_parquet(paths.milestones)
    assert list(table["milestone"]) == ["M1", "M2", "M3", "M4"]
    for col in (
        "status",
        "evidence_json",
        "model",
        "model_params",
        "model_checkpoint_sha256",
        "model_val_loss",
        "machine_cpu_model",
        "machine_cpu_cores",
        "machine_device",
        "machine_node",
        "machine_torch_version",
        "machine_os",
        "machine_git_commit",
        "machine_git_dirty",
        "repeats",
        "baseline",
    ):
        assert table[col].notna().all(), col
    assert json.loads(table.loc[0, "evidence_json"])["length"] == 256
    assert list(table.columns).index("machine_node") == list(table.columns).index("machine_device_name") + 1
    assert (table["machine_node"] == "test-node").all()
    assert list(table["headline"]) == [m.headline for m in milestones] and all(table["headline"].str.len() > 0)

    page = Path(paths.html).read_text(encoding="utf-8")
    assert page.count("data:image/png;base64,") == len(FIGURES)
    assert not EXTERNAL.search(page), EXTERNAL.search(page)
    assert "seed page (theirs)" in page and "1,057,920" in page and "difference of 8,192" in page
    assert "abc123" in page and "train/ref_baseline" in page
    # engine blocks, the human reference and the distance table reach the page
    assert "<th>engine</th>" in page and "compiled" in page and "chosen_for_engine" in page
    assert "reference: validation text (human)" in page and "validation text (human, not model output)" in page
    assert "distance of each cell to held-out human text" in page and "<th>floor reliable</th>" in page
    # every column reaches the reader by its display name, never as an identifier
    headers = re.findall(r"<th[^>]*>(.*?)</th>", page)
    assert headers and not [h for h in headers if "_" in h], [h for h in headers if "_" in h]

    md = Path(paths.markdown).read_text(encoding="utf-8")
    for stem in FIGURES:
        assert f"(figures/{stem}.png)" in md
        assert Path(paths.figures, f"{stem}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "M1 KV cache" in md and "PASS" in md

    inference = json.loads(Path(paths.inference_json).read_text(encoding="utf-8"))
    assert inference["schema"] == "inferlab/c13-inference@1"
    assert len(inference["kvcache"]["timings"]) == 24 and inference["sampling"]["logits"]["logits"] == LOGITS
    pre = json.loads(Path(paths.precomputed_json).read_text(encoding="utf-8"))
    assert pre["schema"] == "inferlab/precomputed@1" and len(pre["quantization"]["summary"]) == len(QUANT_SCHEMES)
    assert len(pre["speculative"]["best"]) == len(spec_tables()["spec_best"])
    assert pre["stamps"]["M4"]["model"]["model"] == "ref_baseline"

    wb = Path(paths.workbench).read_text(encoding="utf-8")
    assert not EXTERNAL.search(wb) and '"logits": [3.0, 2.5' in wb


def test_failed_milestone_shows_as_failed_in_the_report(tmp_path):
    paths = _paths(tmp_path)
    write_report(full_data(**spec_tables(all_identical=False)), paths, {}, MACHINE)
    table = pd.read_parquet(paths.milestones).set_index("milestone")
    assert table.loc["M3", "status"] == FAIL and "14 of 16" in table.loc["M3", "verdict"]
    assert json.loads(table.loc["M3", "evidence_json"])["greedy_identical"] == 14
    html = Path(paths.html).read_text(encoding="utf-8")
    assert "FAIL" in html and "What M3 checked" in html
    # the verdict is one paragraph; the targets table under it (HTML and Markdown) holds what it checked
    markdown = Path(paths.markdown).read_text(encoding="utf-8")
    assert "| greedy output identical to the target's (cases) | 14 | 16 (every case) | not met |" in markdown


def test_external_url_pattern_catches_urls():
    assert EXTERNAL.search('<img src="https://x/y.png">') and EXTERNAL.search("<script src=//cdn/x.js>")
    assert not EXTERNAL.search('<img src="data:image/png;base64,AAAA">')


# ---------------------------------------------------------------------------------- provenance


def test_benchmarks_and_rebuilt_vs_reused(tmp_path):
    bench = tmp_path / "benchmarks/train/m.tsv"
    bench.parent.mkdir(parents=True)
    bench.write_text(
        "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"
        "5.97\t0:00:05\t554.58\t2245.02\t502.09\t527.84\t0.21\t4.06\t139.47\t8.91\n"
    )
    table = benchmark_table(tmp_path / "benchmarks")
    assert table.loc[0, "job"] == "train/m" and table.loc[0, "max_rss_mb"] == pytest.approx(554.58)
    old, new = tmp_path / "old", tmp_path / "new"
    old.write_text("x")
    new.write_text("y")
    import os

    os.utime(old, (1000.0, 1000.0))
    status = classify_outputs([str(old), str(new), str(tmp_path / "gone")], start=2000.0).set_index("path")["status"]
    assert status[str(old)] == "reused" and status[str(new)] == "rebuilt" and status[str(tmp_path / "gone")] == "absent"
    assert config_hash({"a": 1, "b": 2}) == config_hash({"b": 2, "a": 1}) != config_hash({"a": 2, "b": 2})


def test_the_human_row_is_a_reference_not_greedy_nor_a_sampled_cell():
    from inferlab.report.figures import repetition_rows, sampling_repetition


    rep = sampling_tables()["sp_repetition"]
    assert rep.loc[rep["cell"] == "human", "temperature"].isna().all()  # what fooled temperature.fillna(0) == 0
    greedy, human, sampled = repetition_rows(wide_summary(rep).reset_index())
    assert list(greedy["cell"]) == ["greedy"] and list(human["cell"]) == ["human"]
    assert set(sampled["cell"]) == {c["cell"] for c in CELLS}
    assert sampling_repetition(ReportInputs(tables={"sp_repetition": rep}))[:8] == b"\x89PNG\r\n\x1a\n"


def test_seed_reference_numbers_sit_only_on_their_own_cell(tmp_path):
    their_cell = {"cell": "T1_p0.9", "truncation": "top_p", "temperature": 1.0, "top_p": 0.9, "min_p": 0.0}
    data = full_data()
    data.tables["sp_distribution"] = pd.DataFrame(distribution_rows(LOGITS, [*CELLS, their_cell]))
    paths = _paths(tmp_path)
    write_report(data, paths, {"config_sha256": "x", "git_commit": "abc", "git_dirty": False}, MACHINE)
    cells = pd.read_csv(tmp_path / "reports/appendix/sampling-cells.csv")
    assert list(cells.loc[cells["kept, seed page (theirs)"].notna(), "cell"]) == ["T1_p0.9"], cells
    body = [line for line in Path(paths.markdown).read_text(encoding="utf-8").splitlines() if "| 352 |" in line]
    assert body and all(line.startswith("| T1_p0.9 |") for line in body), body


def test_sampling_cells_are_enumerated_once_with_stable_ids():
    from inferlab.sampling.grid import repetition_cells, sampling_cells

    cells = sampling_cells(SETTINGS["sampling"])
    assert list(cells) == ["T0.7_p0.9", "T0.7_p1.0", "T1.3_p0.9", "T1.3_p1.0", "T1.0_minp0.05"]
    assert list(cells.values()) == CELLS  # the same cells the report's fixtures feed the producers
    assert list(repetition_cells(SETTINGS["sampling"]))[0] == "greedy"
    rules = (Path(__file__).resolve().parent.parent / "workflow/rules/sampling.smk").read_text(encoding="utf-8")
    assert "sampling_cells(SAMPLING)" in rules and 'f"T{' not in rules


def test_structured_repeat_stamps_read_as_words_not_json():
    from inferlab.report.stamp_reader import repeats_in_words

    spec = {"prompts": 4, "seeds": [1, 2, 3], "new_tokens": 96, "timing_reps": 3, "forward_reps": 30}
    assert repeats_in_words(spec) == "30 timed forwards; 3 reruns of 4 prompts × 3 seeds × 96 tokens"
    burst = {"forward_reps": 30, "forward_calls": "3 untimed + 4 timed per rep, back to back"}
    assert repeats_in_words(burst) == "30 reps of each forward (3 untimed + 4 timed per rep, back to back)"
    quant = {"quality": "one deterministic pass over the full validation split", "speed_reps": 5}
    assert repeats_in_words(quant) == ("quality: one deterministic pass over the full validation split; "
                                       "speed: 5 timed reruns")
    assert repeats_in_words({"windows": 8}) == "windows 8"



def test_a_card_names_its_milestone_once():
    from inferlab.report.milestones.common import Milestone
    from inferlab.report.page_markdown import block_lines
    from inferlab.report.render import Document

    m = Milestone("M3", "M3 Speculative: chosen draft and k", "pass", "verdict")
    assert m.name == "Speculative: chosen draft and k"
    card = "\n".join(block_lines(Document("t"), ("card", m, "headline", "stamps", "change"), "figures", "appendix"))
    assert card.count("M3") == 1, card


def test_every_verdict_is_said_in_one_breath():
    """A verdict is its headline and one closing sentence; caveats, timing trouble and stale reasons go under
    it. Here everything that used to lengthen it at once: two nodes, contended timings, an unreliable floor."""
    data = full_data()
    node_a, node_b = {**MACHINE, "node": "node-a"}, {**MACHINE, "node": "node-b"}
    per_group = {"c1_dim64_k1.parquet": node_a, "c1_dim64_k3.parquet": node_b}
    data.provenance["spec_summary"] = {**PROV, "machine": node_a, "machines_per_group": per_group, "contended": True}
    data.provenance["kv_summary"] = {**PROV, "machine": node_a, "contended": True,
                                     "machines_per_length": {"t32.parquet": node_a, "t256.parquet": node_b}}
    milestones = check_all(data, MACHINE)
    assert all(narrative.caveats(m) for m in milestones if m.id != "M2")
    longest = max(milestones, key=lambda m: len(m.verdict))
    assert len(longest.verdict) <= narrative.VERDICT_CHARS, longest.verdict
