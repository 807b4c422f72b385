"""The report as a list of blocks, rendered twice: self-contained HTML and diffable Markdown.

Blocks: ("h1"|"h2"|"h3"|"p"|"note", text), ("table", DataFrame, caption), ("figure", stem, caption),
("stamps", stamps dict), ("milestone", Milestone). The HTML embeds figures as base64 PNG and
has no external reference of any kind; the Markdown links figures/<stem>.png next to it.
"""

from __future__ import annotations

import base64
import html
import json
import math
from dataclasses import dataclass, field

import pandas as pd

from inferlab.report import figures as F
from inferlab.report.inputs import ReportInputs
from inferlab.report.milestones import Milestone, kv_ratio_by_length

Block = tuple


@dataclass
class Document:
    title: str
    blocks: list[Block] = field(default_factory=list)
    figures: dict[str, bytes] = field(default_factory=dict)  # stem -> PNG

    def add(self, *block) -> None:
        self.blocks.append(tuple(block))


# ------------------------------------------------------------------------------ formatting


def fmt(value) -> str:
    """Numbers for tables: ints with thousands separators, floats to ~4 significant digits."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        a = abs(value)
        short = repr(value)
        if len(short) <= 6 and "e" not in short and a < 1e5:  # settings like 0.7, 1.3, 0.05 as written
            return short.removesuffix(".0") if short.endswith(".0") else short
        if a == 0:
            return "0"
        if a >= 1e6:
            return f"{value:.4g}"
        if a >= 100:
            return f"{value:,.1f}"
        if a >= 1:
            return f"{value:.3f}"
        if a >= 1e-3:
            return f"{value:.4f}"
        return f"{value:.3g}"
    if isinstance(value, (list, dict)):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def _cells(df: pd.DataFrame) -> list[list[str]]:
    out = []
    for row in df.itertuples(index=False):
        out.append([fmt(v.item() if hasattr(v, "item") else v) for v in row])
    return out


def stamp_lines(stamps: dict) -> list[str]:
    model, machine = stamps.get("model", {}), stamps.get("machine", {})
    sha = str(model.get("checkpoint_sha256") or "n/a")
    dirty = {True: " (dirty)", False: "", None: " (dirty flag unknown)"}.get(machine.get("git_dirty"), "")
    return [
        f"Model: {model.get('model')}, {fmt(model.get('params'))} params, checkpoint sha256 {sha[:16]}…, "
        f"val loss {fmt(model.get('val_loss'))}",
        f"Machine: {machine.get('device_name') or machine.get('cpu_model')} ({machine.get('device')}), CPU "
        f"{machine.get('cpu_model')}, {machine.get('cpu_cores')} cores, {machine.get('torch_threads')} torch threads, "
        f"torch {machine.get('torch_version')}, {machine.get('os')}, git {str(machine.get('git_commit'))[:12]}{dirty}"
        + (f" [stamp from {machine.get('source')}]" if machine.get("source") not in (None, "table provenance") else ""),
        f"Repeats: {stamps.get('repeats')}",
        f"Baseline: {stamps.get('baseline')}",
    ]


# ------------------------------------------------------------------------------ HTML

_CSS = """body{font-family:system-ui,sans-serif;max-width:72em;margin:1.5em auto;padding:0 1em;
color:#222;line-height:1.4}
table{border-collapse:collapse;margin:.5em 0 1em;font-size:.85em;display:block;overflow-x:auto}
td,th{border:1px solid #ccc;padding:.15em .45em}
td{text-align:right}td.t{text-align:left}th{background:#f3f3f3}
caption{caption-side:top;text-align:left;font-weight:600;padding:.3em 0}
.stamps{background:#f7f7fb;border-left:4px solid #88a;padding:.4em .8em;font-size:.85em}
.stamps ul{margin:0;padding-left:1.2em}
.pass{color:#17692d;font-weight:700}.fail{color:#b00020;font-weight:700}.missing{color:#a66f00;font-weight:700}
.milestone{border:1px solid #ddd;padding:.5em 1em;margin:1em 0}.note{color:#555;font-size:.9em}
.theirs{background:#fff6e0}img{max-width:100%}figure{margin:1em 0}figcaption{font-size:.85em;color:#444}"""


def _numeric(text: str) -> bool:
    return bool(text) and text.replace(",", "").replace(".", "", 1).lstrip("-+").isdigit()


def _html_table(df: pd.DataFrame, caption: str) -> str:
    head = "".join(
        f"<th{' class=theirs' if 'seed page' in str(c) else ''}>{html.escape(str(c))}</th>" for c in df.columns
    )
    body = []
    for row in _cells(df):
        body.append(
            "<tr>" + "".join(f"<td{'' if _numeric(c) else ' class=t'}>{html.escape(c)}</td>" for c in row) + "</tr>"
        )
    return (
        f"<table><caption>{html.escape(caption)}</caption><thead><tr>{head}</tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table>"
    )


def to_html(doc: Document) -> str:
    parts = [
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(doc.title)}</title>'
        f"<style>{_CSS}</style></head><body>"
    ]
    for block in doc.blocks:
        kind = block[0]
        if kind in ("h1", "h2", "h3"):
            parts.append(f"<{kind}>{html.escape(block[1])}</{kind}>")
        elif kind == "p":
            parts.append(f"<p>{html.escape(block[1])}</p>")
        elif kind == "note":
            parts.append(f'<p class="note">{html.escape(block[1])}</p>')
        elif kind == "table":
            parts.append(_html_table(block[1], block[2]))
        elif kind == "figure":
            png = base64.b64encode(doc.figures[block[1]]).decode()
            parts.append(
                f'<figure><img alt="{html.escape(block[2])}" src="data:image/png;base64,{png}">'
                f"<figcaption>{html.escape(block[2])}</figcaption></figure>"
            )
        elif kind == "stamps":
            items = "".join(f"<li>{html.escape(line)}</li>" for line in stamp_lines(block[1]))
            parts.append(f'<div class="stamps"><ul>{items}</ul></div>')
        elif kind == "milestone":
            m: Milestone = block[1]
            parts.append(
                f'<div class="milestone"><p><b>{html.escape(m.title)}</b>: '
                f'<span class="{m.status}">{m.status.upper()}</span></p><p>{html.escape(m.verdict)}</p>'
            )
            items = "".join(f"<li>{html.escape(line)}</li>" for line in stamp_lines(m.stamps))
            parts.append(f'<div class="stamps"><ul>{items}</ul></div></div>')
    parts.append("</body></html>")
    return "\n".join(parts)


# ------------------------------------------------------------------------------ Markdown


def _md_escape(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def to_markdown(doc: Document, figure_dir: str = "figures") -> str:
    lines = []
    for block in doc.blocks:
        kind = block[0]
        if kind in ("h1", "h2", "h3"):
            lines += ["#" * int(kind[1]) + " " + block[1], ""]
        elif kind == "p":
            lines += [block[1], ""]
        elif kind == "note":
            lines += [f"*{block[1]}*", ""]
        elif kind == "table":
            df = block[1]
            lines += [
                f"**{block[2]}**",
                "",
                "| " + " | ".join(_md_escape(c) for c in df.columns) + " |",
                "|" + "---|" * len(df.columns),
            ]
            lines += ["| " + " | ".join(_md_escape(c) for c in row) + " |" for row in _cells(df)]
            lines.append("")
        elif kind == "figure":
            lines += [f"![{block[2]}]({figure_dir}/{block[1]}.png)", ""]
        elif kind == "stamps":
            lines += [f"> {line}  " for line in stamp_lines(block[1])] + [""]
        elif kind == "milestone":
            m: Milestone = block[1]
            lines += [f"**{m.title}: {m.status.upper()}**", "", m.verdict, ""]
            lines += [f"> {line}  " for line in stamp_lines(m.stamps)] + [""]
    return "\n".join(lines).rstrip() + "\n"


# ------------------------------------------------------------------------------ content


def _status_table(milestones: list[Milestone]) -> pd.DataFrame:
    return pd.DataFrame([{"milestone": m.id, "status": m.status.upper(), "verdict": m.verdict} for m in milestones])


def _select(df: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    return df[[c for c in cols if c in df.columns]]


def _missing(doc: Document, data: ReportInputs, *keys: str) -> bool:
    missing = data.missing(*keys)
    if missing:
        doc.add(
            "p", "MISSING: this section's tables were not produced in this workflow run: " + ", ".join(missing) + "."
        )
    return bool(missing)


def section_setup(doc: Document, data: ReportInputs, seed: dict) -> None:
    doc.add("h2", "Setup: corpus, models, noise floor")
    stats = data.json.get("corpus_stats")
    if stats:
        rows = [{"quantity": k, "value": v} for k, v in stats.items()]
        doc.add("table", pd.DataFrame(rows), "Corpus statistics (results/corpus/stats.json)")
    else:
        doc.add("p", "MISSING: results/corpus/stats.json.")
    seed_params = {data.target: seed.get("model", {}).get("params"), **seed.get("speculative", {}).get("drafts", {})}
    rows = []
    for name, meta in data.metas.items():
        theirs = seed_params.get(name)
        rows.append(
            {
                "model": name,
                "params": meta.get("params"),
                "params, seed page (theirs)": theirs,
                "difference": (meta.get("params") - theirs) if theirs and meta.get("params") else None,
                "val loss (full split)": meta.get("val_loss"),
                "steps": meta.get("steps"),
                "tokens seen": meta.get("tokens_seen"),
                "train s": meta.get("train_seconds"),
                "tokens/s": meta.get("tokens_per_s"),
                "precision": meta.get("precision"),
                "weights sha256": str(meta.get("weights_sha256", ""))[:16] + "…",
            }
        )
    if rows:
        doc.add(
            "table", pd.DataFrame(rows), "The three models (ours) with the seed page's parameter counts beside them"
        )
        for row in rows:
            if row["difference"]:
                doc.add(
                    "note",
                    f"{row['model']} has {row['params']:,} parameters against the seed page's "
                    f"{row['params, seed page (theirs)']:,}: a difference of {abs(row['difference']):,}. "
                    "Ours is what this architecture gives; it is reported as measured, not adjusted.",
                )
        doc.add(
            "note",
            f"The seed page's target ended at validation loss {seed.get('model', {}).get('val_loss')} "
            "(their model, their machine, their training budget).",
        )
    doc.add("figure", "training_curves", F.FIGURES["training_curves"])
    nf = data.table("noise_floor")
    if nf is not None:
        t = _select(
            nf,
            [
                "run",
                "seed",
                "val_loss",
                "n_runs",
                "std",
                "range",
                "sigmas",
                "floor_measured",
                "floor_fixed",
                "floor_source",
                "floor",
            ],
        ).copy()
        t["floor, seed page (theirs)"] = seed.get("noise_floor", {}).get("floor", 0.020)
        doc.add("table", t, "Noise floor: final validation loss of reruns that differ only in seed")
        snf = seed.get("noise_floor", {})
        doc.add(
            "p",
            f"Our floor: {float(nf['floor'].iloc[0]):.4f} ({nf['floor_source'].iloc[0]}; measured "
            f"{nf['sigmas'].iloc[0]:g} sigma = {float(nf['floor_measured'].iloc[0]):.4f} over {len(nf)} runs, "
            f"std {float(nf['std'].iloc[0]):.4f}, range {float(nf['range'].iloc[0]):.4f}). The seed page's floor: "
            f"{snf.get('floor')} (3 sigma over their {snf.get('runs')} runs, std {snf.get('std')}, "
            f"range {snf.get('range')}; their model, their machine).",
        )
    else:
        doc.add("p", "MISSING: results/noise_floor.parquet.")


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
    if _missing(doc, data, "kv_timings", "kv_summary"):
        doc.add("milestone", m)
        return
    ratios = kv_ratio_by_length(data.table("kv_summary"))
    if int(ratios["length"].max()) >= kv.get("max_length", 256):
        ratios["ratio at 256, seed page (theirs, CPU)"] = [
            kv.get("cpu_ratio_at_256") if int(v) == 256 else None for v in ratios["length"]
        ]
    doc.add("h3", "Measured")
    doc.add("table", ratios, "Speed ratio no-cache / cache per generated length (median of paired reps, min-max)")
    summ = data.table("kv_summary")
    doc.add(
        "table",
        _select(
            summ,
            [
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
            ],
        ),
        "Per-mode timings (results/kvcache/summary.parquet)",
    )
    doc.add(
        "note",
        f"Seed page (their model, their machine): MPS {kv.get('mps_ratio_min')}-{kv.get('mps_ratio_max')}x "
        f"flat with length; CPU {kv.get('cpu_ratio_shortest')}x rising to {kv.get('cpu_ratio_at_256')}x; "
        f"cached step {kv.get('mps_cached_ms_per_token')} ms vs {kv.get('mps_uncached_ms_per_token_min')}-"
        f"{kv.get('mps_uncached_ms_per_token_max')} ms uncached on MPS; {kv.get('kv_bytes_per_token')} "
        "KV bytes per token.",
    )
    if fit is not None:
        doc.add(
            "table",
            _select(
                fit,
                [
                    "length",
                    "a_ms",
                    "b_ms_per_position",
                    "r2",
                    "fixed_share_no_cache",
                    "predicted_ratio",
                    "measured_ratio",
                    "flop_estimate_ratio",
                ],
            ),
            "Fit of the no-cache step time as a + b*positions, and the ratios it predicts",
        )
    prof = data.table("kv_profile")
    if prof is not None:
        doc.add(
            "table",
            _select(
                prof.head(10),
                ["rank", "op", "calls_per_step", "op_ms_per_step", "share_of_wall", "wall_ms", "op_ms", "op_share"],
            ),
            "torch.profiler on cached decode steps: top operators and operator time vs wall time",
        )
    roof = data.table("roofline")
    if roof is not None:
        doc.add(
            "table",
            _select(
                roof,
                [
                    "subject",
                    "model",
                    "device",
                    "context_tokens",
                    "params",
                    "bytes_per_token",
                    "kv_bytes_per_token",
                    "memory_bound_ms_per_token",
                    "compute_bound_ms_per_token",
                    "lower_bound_ms_per_token",
                    "upper_bound_tokens_per_s",
                    "limited_by",
                    "measured_ms_per_token",
                    "measured_over_bound",
                ],
            ),
            "Roofline: the anchor (spec-sheet upper bound, not run) and our model on this machine (stamp below)",
        )
    doc.add("figure", "kvcache_ratio", F.FIGURES["kvcache_ratio"])
    doc.add("h3", "Verdict")
    doc.add("milestone", m)


def section_sampling(doc: Document, data: ReportInputs, m: Milestone, seed: dict) -> None:
    doc.add("h2", "Experiment 2: temperature x top-p (and min-p)")
    ref = seed.get("sampling", {}).get("reference_cell", {})
    doc.add("h3", "Prediction")
    doc.add(
        "p",
        "Raising T flattens the distribution, so entropy and kept count grow with T at fixed top-p; the "
        "entropy of a truncated distribution is at most ln(kept) nats. Lower repetition should come with a "
        "lower in-corpus 4-gram share (text drifting into nonsense).",
    )
    if _missing(doc, data, "sp_distribution"):
        pass
    else:
        dist = data.table("sp_distribution").copy()
        dist["ln(kept) bound, nats"] = [math.log(k) if k > 0 else float("nan") for k in dist["kept"]]
        # Their one published cell (T and top-p of the seed page); every other row stays empty.
        is_their_cell = [
            abs(t - ref.get("temperature", -1)) < 1e-9 and abs(p - ref.get("top_p", -1)) < 1e-9 and mp == 0
            for t, p, mp in zip(dist["temperature"], dist["top_p"], dist["min_p"], strict=True)
        ]
        dist["entropy, seed page (theirs)"] = [ref.get("entropy") if hit else None for hit in is_their_cell]
        dist["kept, seed page (theirs)"] = [ref.get("kept") if hit else None for hit in is_their_cell]
        doc.add("h3", "Measured")
        doc.add(
            "table",
            _select(
                dist,
                [
                    "cell",
                    "truncation",
                    "temperature",
                    "top_p",
                    "min_p",
                    "entropy_nats",
                    "entropy_bits",
                    "kept",
                    "ln(kept) bound, nats",
                    "entropy, seed page (theirs)",
                    "kept, seed page (theirs)",
                ],
            ),
            "Next-token distribution after the prompt (truncated, renormalised; float64)",
        )
        doc.add(
            "note",
            "The seed page's reference cell (T=1, top-p 0.9: entropy 4.895, 352 kept) is their model's; "
            "their entropy unit is not stated. The sampling workbench (sampling-workbench.html) recomputes "
            "every row of this table in the browser.",
        )
        doc.add("figure", "sampling_heatmaps", F.FIGURES["sampling_heatmaps"])
    rep = data.table("sp_repetition")
    if rep is not None:
        w = F.repetition_wide(rep)
        doc.add(
            "table",
            _select(
                w,
                [
                    "cell",
                    "temperature",
                    "top_p",
                    "min_p",
                    "seq_rep_4",
                    "seq_rep_4_ci_low",
                    "seq_rep_4_ci_high",
                    "distinct_1",
                    "distinct_2",
                    "in_corpus_4gram_share",
                    "in_corpus_4gram_share_ci_low",
                    "in_corpus_4gram_share_ci_high",
                ],
            ),
            "Repetition per cell: mean and bootstrap 95% CI over prompts x samples",
        )
        sr = seed.get("sampling", {})
        doc.add(
            "note",
            f"Seed page (their model): repetition {sr.get('repetition_greedy'):.0%} under greedy, "
            f"{sr.get('repetition_t13'):.0%} at T=1.3 where samples read as nonsense."
            if sr.get("repetition_greedy") is not None
            else "",
        )
        doc.add("figure", "sampling_repetition", F.FIGURES["sampling_repetition"])
    else:
        _missing(doc, data, "sp_repetition")
    samples = data.table("sp_samples")
    if samples is not None and "text" in samples.columns:
        ex = samples.drop_duplicates("cell").head(8).copy()
        ex["text"] = ex["text"].astype(str).str.slice(0, 60)
        doc.add(
            "table",
            _select(ex, ["cell", "prompt", "sample", "seq_rep_4", "in_corpus_4gram_share", "text"]),
            "Example generations (first 60 characters; model output)",
        )
    default = data.table("sp_default")
    if default is not None:
        doc.add(
            "table",
            default.T.reset_index().set_axis(["field", "value"], axis=1),
            "The default setting and the min-p decision",
        )
    doc.add("h3", "Verdict")
    doc.add("milestone", m)


def section_speculative(doc: Document, data: ReportInputs, m: Milestone, seed: dict) -> None:
    doc.add("h2", "Experiment 3: speculative sampling")
    doc.add("h3", "Prediction")
    doc.add(
        "p",
        "With acceptance rate alpha, one round of k draft tokens yields E = (1 - alpha^(k+1)) / (1 - alpha) "
        "tokens per target forward; with a draft costing c target forwards the speedup is E / (k c + 1). "
        "The measured yield should match E, and the best k should be small when c is not tiny.",
    )
    if _missing(doc, data, "spec_summary"):
        doc.add("milestone", m)
        return
    s = data.table("spec_summary")
    doc.add("h3", "Measured")
    doc.add(
        "table",
        _select(
            s,
            [
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
            ],
        ),
        "Per group: acceptance, yield vs formula, theoretical and wall-clock speedup",
    )
    sp = seed.get("speculative", {})
    doc.add(
        "note",
        f"Seed page (their model, their machine): formula within {sp.get('formula_max_rel_error', 0.01):.0%} "
        f"of measured; best by parameter cost: {sp.get('best_by_params', {}).get('draft')} "
        f"k={sp.get('best_by_params', {}).get('k')}; greedy identity {sp.get('greedy_identical')}; "
        f"wall clock {sp.get('wall_clock')}.",
    )
    best = data.table("spec_best")
    if best is not None and len(best):
        doc.add(
            "table",
            _select(
                best,
                [
                    "criterion",
                    "description",
                    "draft",
                    "k",
                    "value",
                    "runner_up_draft",
                    "runner_up_k",
                    "runner_up_value",
                ],
            ),
            "Best group by each criterion (the first row is the choice)",
        )
    ident = data.table("spec_identity")
    if ident is not None:
        col = "identical"
        keys = [c for c in ("draft", "k") if c in ident.columns]
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
    if _missing(doc, data, "quant_summary"):
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
    doc.add("table", _select(q, cols), "Per scheme on the full validation split (tied embedding stays fp32)")
    choice = data.table("quant_choice")
    if choice is not None and len(choice):
        doc.add("table", choice.T.reset_index().set_axis(["field", "value"], axis=1), "The choice rule and its result")
    doc.add(
        "note",
        f"Seed page (their model): {sq.get('within_floor')} within their floor 0.020; INT4 per-tensor "
        f"+{sq.get('int4_per_tensor_sym_delta')}, INT4 GPTQ +{sq.get('int4_gptq_delta')}; {sq.get('int3')}; "
        f"{sq.get('measured')}.",
    )
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


def build_document(data: ReportInputs, milestones: list[Milestone], run: dict) -> Document:
    seed = data.seed_reference
    by_id = {m.id: m for m in milestones}
    doc = Document("C13 inference lab: report")
    doc.add("h1", "C13 inference lab: report")
    doc.add(
        "p",
        "Four experiments from the C13 lab page, rerun by this workflow on our models and this machine. Every "
        "conclusion carries four stamps: model, machine, repeat count and baseline. Columns marked "
        "'seed page (theirs)' are the lab page's published figures from their model on their machine, "
        "shown for comparison only; they are never pass/fail targets.",
    )
    doc.add("table", _status_table(milestones), "Milestones")
    section_setup(doc, data, seed)
    section_kvcache(doc, data, by_id["M1"], seed)
    section_sampling(doc, data, by_id["M2"], seed)
    section_speculative(doc, data, by_id["M3"], seed)
    section_quant(doc, data, by_id["M4"], seed)
    section_provenance(doc, run)
    doc.figures = make_figures(data)
    return doc


def make_figures(data: ReportInputs) -> dict[str, bytes]:
    seed = data.seed_reference
    summ = data.table("kv_summary")
    ratios = kv_ratio_by_length(summ) if summ is not None else None
    nf = data.table("noise_floor")
    return {
        "kvcache_ratio": F.kvcache_ratio(ratios, data.table("kv_fit"), seed),
        "sampling_heatmaps": F.sampling_heatmaps(data.table("sp_distribution")),
        "sampling_repetition": F.sampling_repetition(data.table("sp_repetition"), seed),
        "speculative_yield": F.speculative_yield(data.table("spec_summary")),
        "quant_delta": F.quant_delta(
            data.table("quant_summary"),
            float(nf["floor"].iloc[0]) if nf is not None else None,
            seed.get("noise_floor", {}).get("floor"),
        ),
        "training_curves": F.training_curves(data.loss_curves),
    }
