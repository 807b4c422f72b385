"""What every report section uses: the experiment's frame (question, prediction, findings, verdict),
the appendix of every input table, the missing-table note."""

from __future__ import annotations

import pandas as pd

from inferlab.report import narrative
from inferlab.report.inputs import ReportInputs
from inferlab.report.milestones.common import Milestone
from inferlab.report.render import Document

# The report's key -> what the table holds, the title of its appendix entry.
INPUT_TITLES = {
    "kv_timings": "KV cache: every timed generation", "kv_summary": "KV cache: timings per engine, length and mode",
    "kv_fit": "KV cache: fit of the step time a + b·positions", "kv_steps": "KV cache: step-time probes",
    "kv_profile": "KV cache: torch.profiler operators", "roofline_probe": "Roofline: this machine's probe",
    "roofline": "Roofline: anchor and our model", "sp_distribution": "Sampling: next-token distribution per cell",
    "sp_repetition": "Sampling: repetition metrics per cell (long form)",
    "sp_samples": "Sampling: example texts", "sp_default": "Sampling: the default and the min-p decision",
    "sp_distance": "Sampling: distance of each cell to held-out human text",
    "spec_summary": "Speculative: every (engine, draft, k) group", "spec_best": "Speculative: best group per criterion",
    "spec_identity": "Speculative: greedy identity per case", "quant_summary": "Quantization: every scheme",
    "quant_choice": "Quantization: the choice rule", "noise_floor": "Noise floor: reruns that differ only in seed",
    "corpus_stats": "Corpus statistics",
    "engine_bench": "Engine variants: ms per cached forward by model, rows and variant (tools/bench_engine.py, "
                    "not this run)",
}


def status_table(milestones: list[Milestone]) -> pd.DataFrame:
    return pd.DataFrame([{"milestone": m.id, "status": m.status.upper(), "headline": m.headline,
                          "verdict": m.verdict} for m in milestones])


def without_empty_theirs(df: pd.DataFrame) -> pd.DataFrame:
    """The body table without a seed-page column that has no value on any shown row (their cell is not in our
    grid): an empty column says nothing; the full table in the appendix keeps it."""
    empty = [c for c in df.columns if "seed page" in str(c) and df[c].isna().all()]
    return df.drop(columns=empty)


def missing_note(doc: Document, data: ReportInputs, *keys: str) -> bool:
    missing = data.missing(*keys)
    if missing:
        doc.add(
            "p", "MISSING: this section's tables were not produced in this workflow run: " + ", ".join(missing) + "."
        )
    return bool(missing)


def input_slug(key: str) -> str:
    return f"input-{key}"


def appendix_of_inputs(doc: Document, data: ReportInputs) -> None:
    """Every table the report read, complete, under its file name."""
    for key, df in data.tables.items():
        if df is not None:
            source = data.paths.get(key, key)
            doc.full_table(input_slug(key), f"{INPUT_TITLES.get(key, key)} ({source})", df)
    stats = data.json.get("corpus_stats")
    if stats:
        doc.full_table(input_slug("corpus_stats"), f"{INPUT_TITLES['corpus_stats']} "
                       f"({data.paths.get('corpus_stats', 'corpus_stats')})",
                       pd.DataFrame([{"quantity": k, "value": str(v)} for k, v in stats.items()]))


def experiment(doc: Document, title: str, question: str, prediction: str) -> None:
    """The lab page's frame: the question in one sentence, then the prediction made before measuring."""
    doc.add("h2", title)
    doc.add("question", question)
    doc.add("prediction", prediction)


def findings(doc: Document, m: Milestone) -> None:
    """The three things to read straight off the table (the lab page's 三件事), from the milestone's evidence."""
    sentences = narrative.findings(m)
    if sentences:
        doc.add("findings", sentences)


def verdict(doc: Document, m: Milestone) -> None:
    doc.blocks += narrative.verdict_blocks(m)
