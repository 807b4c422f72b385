"""Experiment 1's section: the KV cache against recomputation, the fit and the roofline."""

from __future__ import annotations

from inferlab.report import figures as F
from inferlab.report.inputs import ReportInputs
from inferlab.report.milestones.common import Milestone, contended
from inferlab.report.milestones.kv_explanation import kv_ratio_by_length
from inferlab.report.render import Document
from inferlab.report.sections.common import ENGINE_COLUMNS, add_table, missing_note, select_columns


def section_kvcache(doc: Document, data: ReportInputs, m: Milestone, seed: dict) -> None:
    doc.add("h2", "Experiment 1: KV cache against no cache")
    kv = seed.get("kvcache", {})
    fit = data.table("kv_fit")
    doc.add("h3", "Prediction (written before the measurement, from theory)")
    if fit is not None and "flop_estimate_ratio" in fit.columns:
        pred = ", ".join(
            f"{int(r.length)}: {r.flop_estimate_ratio:.1f}x" for r in fit.sort_values("length").itertuples()
        )
        doc.add(
            "p",
            "Lesson 1's FLOP count predicts these cache/no-cache ratios (no-cache FLOPs / cache FLOPs for the "
            f"whole generation): {pred}. A roofline view predicts the same direction.",
        )
    else:
        doc.add("p", "MISSING: results/kvcache/fit.parquet (FLOP estimate).")
    if missing_note(doc, data, "kv_timings", "kv_summary"):
        doc.add("milestone", m)
        return
    ratios = kv_ratio_by_length(data.table("kv_summary"))
    if int(ratios["length"].max()) >= kv.get("max_length", 256):
        # their CPU number sits beside our eager (seed-faithful) row only
        eager = ratios["engine"] == "eager"
        ratios["ratio at 256, seed page (theirs, CPU)"] = [
            kv.get("cpu_ratio_at_256") if int(v) == 256 and e else None
            for v, e in zip(ratios["length"], eager, strict=True)
        ]
    doc.add("h3", "Measured")
    doc.add(
        "table",
        ratios,
        "Speed ratio no-cache / cache per engine and generated length (median of paired reps, min-max); "
        "eager is the seed-faithful engine, compiled removes per-step overhead",
    )
    if contended(data, "kv_timings", "kv_summary", "kv_steps", "kv_profile"):
        doc.add("note", "CONTENDED: other work loaded the machine while these timings ran (contended = True); "
                "they are not comparable with an idle run.")
    summ = data.table("kv_summary")
    doc.add(
        "table",
        select_columns(
            summ,
            [
                *ENGINE_COLUMNS,
                "length",
                "mode",
                "reps",
                "ms_per_token_median",
                "ms_per_token_min",
                "ms_per_token_max",
                "total_ms_median",
                "same_output_all",
                "kv_bytes_per_token",
                "device",
                "threads",
                "contended",
            ],
        ),
        "Per-engine, per-mode timings (results/kvcache/summary.parquet)",
    )
    doc.add(
        "note",
        f"Seed page (their model, their machine): MPS {kv.get('mps_ratio_min')}-{kv.get('mps_ratio_max')}x "
        f"flat with length; CPU {kv.get('cpu_ratio_shortest')}x rising to {kv.get('cpu_ratio_at_256')}x; "
        f"cached step {kv.get('mps_cached_ms_per_token')} ms vs {kv.get('mps_uncached_ms_per_token_min')}-"
        f"{kv.get('mps_uncached_ms_per_token_max')} ms uncached on MPS; {kv.get('kv_bytes_per_token')} "
        "KV bytes per token.",
    )
    add_table(doc, fit, [*ENGINE_COLUMNS, "length", "a_ms", "b_ms_per_position", "a_cache_ms", "r2",
                         "fixed_share_no_cache", "predicted_ratio", "prediction_error", "flop_estimate_ratio"],
              "Fit of the no-cache step time as a + b*positions per engine, and the ratios it predicts")
    prof = data.table("kv_profile")
    add_table(doc, None if prof is None else prof.groupby("engine", sort=False).head(10),
              [*ENGINE_COLUMNS, "rank", "op", "calls_per_step", "op_ms_per_step", "share_of_wall", "wall_ms",
               "op_ms", "op_share"],
              "torch.profiler on cached decode steps per engine: top operators and operator time vs wall time")
    add_table(doc, data.table("roofline"),
              ["subject", *ENGINE_COLUMNS, "model", "device", "context_tokens", "params", "bytes_per_token",
               "kv_bytes_per_token", "memory_bound_ms_per_token", "compute_bound_ms_per_token",
               "lower_bound_ms_per_token", "upper_bound_tokens_per_s", "limited_by", "measured_over_bound"],
              "Roofline: the anchor (spec-sheet upper bound, not run) and our model on this machine (stamp below)")
    doc.add("figure", "kvcache_ratio", F.FIGURES["kvcache_ratio"])
    doc.add("h3", "Verdict")
    doc.add("milestone", m)
