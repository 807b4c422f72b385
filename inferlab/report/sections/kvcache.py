"""Experiment 1's section: the KV cache against recomputation, per engine and generated length."""

from __future__ import annotations

import math

import pandas as pd

from inferlab.report import figures as F
from inferlab.report.display import FLOP_ESTIMATE, GENERATED_TOKENS, SEED_CPU_RATIO, per_engine
from inferlab.report.inputs import ReportInputs
from inferlab.report.milestones.common import Milestone, contended, engines_in
from inferlab.report.milestones.kv_explanation import kv_ratio_by_length
from inferlab.report.render import Document, cell_text
from inferlab.report.sections.common import (
    cell,
    compact,
    experiment,
    findings,
    missing_note,
    verdict,
    without_empty_theirs,
)

LENGTH, FLOP, SEED_CPU = GENERATED_TOKENS, FLOP_ESTIMATE, SEED_CPU_RATIO
FIT_TOLERANCE = 0.25  # the fit "explains" the measured ratio when it lands within 25% of it


def ratio_column(engine: str) -> str:
    return per_engine("measured", engine)


def fit_column(engine: str) -> str:
    return per_engine("fit predicts", engine)


def ratio_table(summary: pd.DataFrame, fit: pd.DataFrame | None, seed: dict) -> pd.DataFrame:
    """One row per generated length: measured ratio and the fit's prediction per engine, the FLOP estimate,
    and the seed page's CPU ratio on its own length."""
    ratios = kv_ratio_by_length(summary)
    table = pd.DataFrame({LENGTH: sorted(ratios["length"].unique())})
    for engine in engines_in(ratios):
        by_length = ratios[ratios["engine"] == engine].set_index("length")["ratio"]
        table[ratio_column(engine)] = table[LENGTH].map(by_length)
    if fit is not None:
        for engine in engines_in(fit):
            by_length = fit[fit["engine"] == engine].set_index("length")["predicted_ratio"]
            table[fit_column(engine)] = table[LENGTH].map(by_length)
        table[FLOP] = table[LENGTH].map(fit.drop_duplicates("length").set_index("length")["flop_estimate_ratio"])
    kv = seed.get("kvcache", {})
    table[SEED_CPU] = [kv.get("cpu_ratio_at_256") if length == kv.get("max_length") else None
                       for length in table[LENGTH]]
    return compact(table)


def kv_findings(table: pd.DataFrame, engines: list[str]) -> list[str]:
    last, first = table[LENGTH] == table[LENGTH].max(), table[LENGTH] == table[LENGTH].min()
    base = engines[0]
    longest = cell(table, last, LENGTH)
    others = "".join(f" and {cell(table, last, ratio_column(e))}× on {e}" for e in engines[1:])
    sentences = [f"At {longest} generated tokens the cache is {cell(table, last, ratio_column(base))}× faster "
                 f"than recomputing on {base}{others}"
                 + (f", against the {cell(table, last, FLOP)}× the FLOP count predicts." if FLOP in table else ".")]
    lo, hi = table.loc[first, ratio_column(base)].iloc[0], table.loc[last, ratio_column(base)].iloc[0]
    trend = "rises" if hi > 1.1 * lo else "falls" if hi < lo / 1.1 else "stays about flat"
    sentences.append(f"On {base} the ratio {trend} with length: {cell(table, first, ratio_column(base))}× at "
                     f"{cell(table, first, LENGTH)} tokens, {cell(table, last, ratio_column(base))}× at {longest}.")
    if fit_column(base) in table:
        seed = table.loc[last, SEED_CPU].iloc[0]
        measured, fitted = hi, table.loc[last, fit_column(base)].iloc[0]
        flop = table.loc[last, FLOP].iloc[0] if FLOP in table else float("inf")
        explains = abs(fitted - measured) <= FIT_TOLERANCE * measured and abs(fitted - measured) < abs(flop - measured)
        lead = ("A fixed per-step cost explains the gap to the FLOP count" if explains
                else "The step-time fit does not explain the gap either")
        sentences.append(
            f"{lead}: the fit a + b·positions of the step time "
            f"predicts {cell(table, last, fit_column(base))}× at {longest} on {base}"
            + (f"; the seed page's CPU measured {cell(table, last, SEED_CPU)}× (their model, their machine)."
               if pd.notna(seed) else "."))
    return sentences


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

    one_row = ", ".join(f"{variant} {cell_text(median(1, variant))}" for variant in variants)
    widest = int(rows["rows"].max())
    launches = rows.loc[(rows["rows"] == 1) & (rows["variant"] == latest), ["cpp_gemm_template", "kernel_launches"]]
    kernels = (f" ({cell_text(launches.iloc[0, 0])} of its {cell_text(launches.iloc[0, 1])} kernels the C++ GEMM "
               "template)" if len(launches) and pd.notna(launches.iloc[0, 1]) else "")
    uncommitted = " with uncommitted changes" if machine.get("git_dirty") else ""
    return (f"Engine variants, measured outside this run by tools/bench_engine.py on "
            f"{machine.get('device_name', '?')} ({machine.get('torch_threads', '?')} threads, git "
            f"{str(machine.get('git_commit', '?'))[:10]}{uncommitted}, "
            f"{provenance.get('measured_at', '?')}; "
            f"{settings.get('reps', '?')} interleaved reps after {settings.get('context', '?')} cached positions, "
            f"weights: {settings.get('weights', 'random')}): one cached forward of the {model} shape takes, in ms, "
            f"{one_row}; on {latest}{kernels}, {widest} rows cost "
            f"{median(widest, latest) / median(1, latest):.2f}× one row. "
            f"All {len(bench)} rows (every model) are in the appendix.")


def section_kvcache(doc: Document, data: ReportInputs, m: Milestone, seed: dict) -> None:
    fit = data.table("kv_fit")
    if fit is not None and "flop_estimate_ratio" in fit.columns:
        pred = ", ".join(f"{int(r.length)} tokens: {r.flop_estimate_ratio:.1f}×"
                         for r in fit.drop_duplicates("length").sort_values("length").itertuples())
        prediction = (f"Lesson 1's FLOP count (no-cache FLOPs / cache FLOPs over the whole generation) predicts "
                      f"{pred}: the cache turns quadratic work into linear work.")
    else:
        prediction = "MISSING: results/kvcache/fit.parquet (FLOP estimate)."
    experiment(doc, "Experiment 1: KV cache against no cache",
               "How many times faster does our model generate with a KV cache than without, and why?", prediction)
    if missing_note(doc, data, "kv_timings", "kv_summary"):
        verdict(doc, m)
        return
    table = ratio_table(data.table("kv_summary"), fit, seed)
    doc.add("figure", "kvcache_ratio", F.FIGURES["kvcache_ratio"])
    full = doc.full_table("kv-ratios", "KV cache: speed ratio per engine and length, with min-max over reruns",
                          kv_ratio_by_length(data.table("kv_summary")))
    doc.add("table", without_empty_theirs(table), "Speed ratio no-cache / cache time (median of paired reruns; "
            "eager is the seed-faithful engine). The fit, profiler and roofline tables are in the appendix.", full)
    findings(doc, kv_findings(table, engines_in(data.table("kv_summary"))))
    if data.table("engine_bench") is not None:
        doc.add("note", engine_bench_note(data.table("engine_bench"), data.provenance.get("engine_bench", {})))
    if contended(data, "kv_timings", "kv_summary", "kv_steps", "kv_profile"):
        doc.add("note", "CONTENDED: other work loaded the machine while these timings ran; they are not comparable "
                "with an idle run.")
    verdict(doc, m)
