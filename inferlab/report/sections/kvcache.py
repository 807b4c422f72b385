"""Experiment 1's section: the KV cache against recomputation, per engine and generated length."""

from __future__ import annotations

import math

import pandas as pd

from inferlab.experiments import FIGURES
from inferlab.kvcache.spec import FLOP_ESTIMATE, GENERATED_TOKENS, SEED_CPU_RATIO
from inferlab.report.inputs import ReportInputs
from inferlab.report.milestones.common import Milestone, engines_in
from inferlab.report.milestones.kvcache import kv_ratio_by_length
from inferlab.report.render import Document
from inferlab.report.sections.common import conclude, experiment, without_empty_theirs
from inferlab.review.numbers import fmt
from inferlab.spec import per_engine


def ratio_table(summary: pd.DataFrame, fit: pd.DataFrame | None, seed: dict) -> pd.DataFrame:
    """One row per generated length: measured ratio and the fit's prediction per engine, the FLOP estimate,
    and the seed page's CPU ratio on its own length."""
    ratios = kv_ratio_by_length(summary)
    table = pd.DataFrame({GENERATED_TOKENS: sorted(ratios["length"].unique())})
    for engine in engines_in(ratios):
        by_length = ratios[ratios["engine"] == engine].set_index("length")["ratio"]
        table[per_engine("measured", engine)] = table[GENERATED_TOKENS].map(by_length)
    if fit is not None:
        for engine in engines_in(fit):
            by_length = fit[fit["engine"] == engine].set_index("length")["predicted_ratio"]
            table[per_engine("fit predicts", engine)] = table[GENERATED_TOKENS].map(by_length)
        table[FLOP_ESTIMATE] = table[GENERATED_TOKENS].map(
            fit.drop_duplicates("length").set_index("length")["flop_estimate_ratio"])
    kv = seed.get("kvcache", {})
    table[SEED_CPU_RATIO] = [kv.get("cpu_ratio_at_256") if length == kv.get("max_length") else None
                             for length in table[GENERATED_TOKENS]]
    return table


def engine_bench_note(bench: pd.DataFrame, provenance: dict) -> str:
    """Experiment 1's provenance of the engine: the variants measured outside this run
    (tools/bench_engine.py), quoted with their own machine stamp, never as this run's numbers."""
    machine, settings = provenance.get("machine", {}), provenance.get("settings", {})
    model = str(bench["model"].iloc[0])
    rows = bench[bench["model"] == model]
    variants = list(dict.fromkeys(rows["variant"]))
    latest = variants[-1]

    def median(n: int, variant: str) -> float:
        hit = rows.loc[(rows["rows"] == n) & (rows["variant"] == variant), "median_ms"]
        return float(hit.iloc[0]) if len(hit) else math.nan

    one_row = ", ".join(f"{variant} {fmt(median(1, variant))}" for variant in variants)
    widest = int(rows["rows"].max())
    launches = rows.loc[(rows["rows"] == 1) & (rows["variant"] == latest), ["cpp_gemm_template", "kernel_launches"]]
    kernels = (f" ({fmt(launches.iloc[0, 0])} of its {fmt(launches.iloc[0, 1])} kernels the C++ GEMM "
               "template)" if len(launches) and pd.notna(launches.iloc[0, 1]) else "")
    uncommitted = " with uncommitted changes" if machine.get("git_dirty") else ""
    return (f"Engine variants, measured outside this run by tools/bench_engine.py on "
            f"{machine.get('device_name', '?')} ({machine.get('torch_threads', '?')} threads, git "
            f"{str(machine.get('git_commit', '?'))[:10]}{uncommitted}, "
            f"{provenance.get('measured_at', '?')}; "
            f"{settings.get('reps', '?')} interleaved reps after {settings.get('context', '?')} cached positions, "
            f"weights: {settings.get('weights', 'random')}): one cached forward of the {model} shape takes, in ms, "
            f"{one_row}; on {latest}{kernels}, {widest} rows cost "
            f"{fmt(median(widest, latest) / median(1, latest), '×')} one row. "
            f"All {len(bench)} rows (every model) are in the appendix.")


def section_kvcache(doc: Document, data: ReportInputs, m: Milestone, seed: dict) -> None:
    fit = data.table("kv_fit")
    if fit is not None and "flop_estimate_ratio" in fit.columns:
        pred = ", ".join(f"{int(r.length)} tokens: {fmt(r.flop_estimate_ratio, '×')}"
                         for r in fit.drop_duplicates("length").sort_values("length").itertuples())
        prediction = (f"Lesson 1's FLOP count (no-cache FLOPs / cache FLOPs over the whole generation) predicts "
                      f"{pred}: the cache turns quadratic work into linear work.")
    else:
        prediction = "MISSING: results/kvcache/fit.parquet (FLOP estimate)."
    if not experiment(doc, data, m, "Experiment 1: KV cache against no cache",
                      "How many times faster does our model generate with a KV cache than without, and why?",
                      prediction):
        return
    table = ratio_table(data.table("kv_summary"), fit, seed)
    doc.add("figure", "kvcache_ratio", FIGURES["kvcache_ratio"].title)
    full = doc.full_table("kv-ratios", "KV cache: speed ratio per engine and length, with min-max over reruns",
                          kv_ratio_by_length(data.table("kv_summary")))
    doc.add("table", without_empty_theirs(table), "Speed ratio no-cache / cache time (median of paired reruns; "
            "eager is the seed-faithful engine). The fit, profiler and roofline tables are in the appendix.", full)
    bench = data.table("engine_bench")
    conclude(doc, m, *([("note", engine_bench_note(bench, data.provenance.get("engine_bench", {})))]
                       if bench is not None else []))
