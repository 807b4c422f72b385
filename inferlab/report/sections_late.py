"""Report sections: speculative sampling, quantization and the run's provenance."""

from __future__ import annotations

from inferlab.report import figures as F
from inferlab.report.document import Document
from inferlab.report.inputs import ReportInputs
from inferlab.report.milestones import Milestone
from inferlab.report.sections import ENGINE_COLUMNS, missing_note, select_columns
from inferlab.report.verdicts import contended


def section_speculative(doc: Document, data: ReportInputs, m: Milestone, seed: dict) -> None:
    doc.add("h2", "Experiment 3: speculative sampling")
    doc.add("h3", "Prediction")
    doc.add(
        "p",
        "With acceptance rate alpha, one round of k draft tokens yields E = (1 - alpha^(k+1)) / (1 - alpha) "
        "tokens per target forward; with a draft costing c target forwards the speedup is E / (k c + 1). "
        "The measured yield should match E, and the best k should be small when c is not tiny.",
    )
    if missing_note(doc, data, "spec_summary"):
        doc.add("milestone", m)
        return
    s = data.table("spec_summary")
    doc.add("h3", "Measured")
    doc.add(
        "table",
        select_columns(
            s,
            [
                *ENGINE_COLUMNS,
                "draft",
                "k",
                "target_forwards",
                "proposed",
                "accepted",
                "alpha",
                "overlap_mean",
                "tokens_per_target_forward",
                "formula_tokens_per_target_forward",
                "formula_rel_error",
                "c_params",
                "c_time",
                "speedup_theory_params",
                "speedup_theory_time",
                "wall_speedup",
                "wall_speedup_min",
                "wall_speedup_max",
                "contended",
            ],
        ),
        "Per engine and group: acceptance, yield vs formula, c, theoretical and wall-clock speedup (against "
        "target-only sampling on the same engine)",
    )
    if contended(data, "spec_summary"):
        doc.add("note", "CONTENDED: other work loaded the machine while these timings ran; the wall-clock "
                "speedups are not comparable with an idle run.")
    sp = seed.get("speculative", {})
    doc.add(
        "note",
        f"Seed page (their model, their machine): formula within {sp.get('formula_max_rel_error'):.0%} "
        f"of measured; best by parameter cost: {sp.get('best_by_params', {}).get('draft')} "
        f"k={sp.get('best_by_params', {}).get('k')}; greedy identity {sp.get('greedy_identical')}; "
        f"wall clock {sp.get('wall_clock')}.",
    )
    best = data.table("spec_best")
    if best is not None and len(best):
        doc.add(
            "table",
            select_columns(
                best,
                [
                    "criterion",
                    *ENGINE_COLUMNS,
                    "overall_choice",
                    "description",
                    "draft",
                    "k",
                    "value",
                    "runner_up_draft",
                    "runner_up_k",
                    "runner_up_value",
                ],
            ),
            "Best group by each criterion, per engine (the first row, criterion 'chosen', is the one overall "
            "choice; 'chosen_for_engine' is each engine's own pick)",
        )
    ident = data.table("spec_identity")
    if ident is not None:
        col = "identical"
        keys = [c for c in ("engine", "draft", "k") if c in ident.columns]
        agg = ident.groupby(keys)[col].agg(identical="sum", cases="count").reset_index() if keys else None
        if agg is not None:
            doc.add("table", agg, "Greedy speculative output vs target greedy, cases identical per group")
    doc.add("figure", "speculative_yield", F.FIGURES["speculative_yield"])
    doc.add("h3", "Verdict")
    doc.add("milestone", m)


def section_quant(doc: Document, data: ReportInputs, m: Milestone, seed: dict) -> None:
    doc.add("h2", "Experiment 4: weight quantization")
    nf = data.table("noise_floor")
    floor = float(nf["floor"].iloc[0]) if nf is not None else None
    doc.add("h3", "Prediction")
    doc.add(
        "p",
        "A scheme is indistinguishable from fp32 when its validation-loss increase is below the noise floor "
        + (f"({floor:.4f}, from our reruns). " if floor is not None else "(missing). ")
        + "Finer scales (per channel, small groups) and GPTQ should lose less at 4 and 3 bits.",
    )
    if missing_note(doc, data, "quant_summary"):
        doc.add("milestone", m)
        return
    q = data.table("quant_summary").copy()
    sq = seed.get("quantization", {})
    theirs = {"int4_per_tensor_sym": sq.get("int4_per_tensor_sym_delta"), "int4_gptq": sq.get("int4_gptq_delta")}
    scheme = "scheme"
    q["delta, seed page (theirs)"] = [theirs.get(str(s)) for s in q[scheme]]
    doc.add("h3", "Measured")
    cols = [
        scheme,
        "bits",
        "method",
        "granularity",
        "loss",
        "fp32_loss",
        "delta_loss",
        "kl_mean_nats",
        "kl",
        "top1_agreement",
        "effective_bits_per_weight",
        "effective_bits",
        "noise_floor",
        "within_noise",
        "verdict",
        "speed",
        "speed_status",
        "ms_per_token",
        "speedup_vs_fp32",
        "delta, seed page (theirs)",
    ]
    doc.add("table", select_columns(q, cols), "Per scheme on the full validation split (tied embedding stays fp32)")
    choice = data.table("quant_choice")
    if choice is not None and len(choice):
        doc.add("table", choice.T.reset_index().set_axis(["field", "value"], axis=1), "The choice rule and its result")
    doc.add(
        "note",
        f"Seed page (their model): {sq.get('within_floor')} within their floor "
        f"{seed.get('noise_floor', {}).get('floor'):.3f}; INT4 per-tensor "
        f"+{sq.get('int4_per_tensor_sym_delta')}, INT4 GPTQ +{sq.get('int4_gptq_delta')}; {sq.get('int3')}; "
        f"{sq.get('measured')}.",
    )
    if nf is not None and "floor_reliable" in nf.columns and not bool(nf["floor_reliable"].iloc[0]):
        doc.add("note", f"Unreliable noise floor: {nf['floor_reliability_note'].iloc[0]}; a scheme 'within noise' "
                "may only be within an underestimated floor.")
    doc.add("figure", "quant_delta", F.FIGURES["quant_delta"])
    doc.add("h3", "Verdict")
    doc.add("milestone", m)


def section_provenance(doc: Document, run: dict) -> None:
    doc.add("h2", "Provenance of this report")
    doc.add(
        "p",
        f"Config sha256 {run.get('config_sha256')}; git commit {run.get('git_commit')}"
        f"{' (dirty working tree)' if run.get('git_dirty') else ''}; generated {run.get('generated_at')} on "
        f"{run.get('machine')}.",
    )
    if run.get("run_start"):
        doc.add(
            "p",
            f"This Snakemake run started at {run['run_start']}; files written since then were rebuilt in this "
            "run, older ones were reused from earlier runs.",
        )
    bench = run.get("benchmarks")
    if bench is not None and len(bench):
        doc.add(
            "table",
            bench.drop(columns=["mtime"], errors="ignore"),
            "Per-job runtime and peak memory (Snakemake benchmark files, results/benchmarks)",
        )
    outputs = run.get("outputs")
    if outputs is not None and len(outputs):
        counts = outputs["status"].value_counts().to_dict()
        doc.add("p", "Inputs of the report: " + ", ".join(f"{v} {k}" for k, v in counts.items()) + ".")
        doc.add("table", outputs.drop(columns=["mtime"], errors="ignore"), "Rebuilt in this run vs reused")
