"""M2, how sampling shapes output: the repetition table, the default by its stated rule, the min-p decision."""

from __future__ import annotations

import pandas as pd

from inferlab.report.inputs import ReportInputs
from inferlab.report.milestones.common import (
    FAIL,
    PASS,
    Milestone,
    missing_milestone,
)
from inferlab.report.stamp_reader import stamps_for
from inferlab.review.numbers import fmt_number as _fmt
from inferlab.review.numbers import number as _num
from inferlab.sampling.grid import GREEDY_CELL, sampling_cells

HUMAN_CELL = "human"  # repetition.HUMAN: the held-out validation text the cells are measured against


# The columns M2 reads from the default record (repetition.choose_default or human_match.choose_human_match).
DEFAULT_COLUMNS = ("kind", "cell", "rule", "rule_satisfied", "min_p_decision", "min_p_reason")


# (column, label, digits) of the old in-corpus-floor rule's numbers the verdict cites.
FLOOR_RULE_CITED = (
    ("seq_rep_4", "seq-rep-4", 3),
    ("in_corpus_4gram_share", "in-corpus 4-gram share", 3),
    ("greedy_seq_rep_4", "greedy seq-rep-4", 3),
    ("greedy_in_corpus_4gram_share", "greedy in-corpus share", 3),
    ("in_corpus_floor", "share floor", 3),
    ("entropy_nats", "entropy (nats)", 3),
)


def _with_ci(row: pd.Series, name: str, digits: int = 3) -> str | None:
    """'0.123 [0.100, 0.150]' from <name>, <name>_ci_low, <name>_ci_high of a record; None if absent."""
    if name not in row.index or _num(row[name]) is None:
        return None
    text = _fmt(row[name], digits)
    low, high = f"{name}_ci_low", f"{name}_ci_high"
    if low in row.index and _num(row[low]) is not None:
        text += f" [{_fmt(row[low], digits)}, {_fmt(row[high], digits)}]"
    return text


def _human_match_text(row: pd.Series) -> str:
    """The human_match verdict: the chosen cell's distance, its nearest competitor's and greedy's."""
    text = f"distance to human text {_with_ci(row, 'distance')}"
    if row.get("runner_up_cell"):
        text += f"; nearest competitor {row['runner_up_cell']} at {_with_ci(row, 'runner_up_distance')}"
    if _num(row.get("n_tied")) and int(row["n_tied"]) > 1:
        text += f" (tied within CI: {row.get('tied_cells')}; the tie-break takes the simpler setting)"
    greedy = _with_ci(row, "greedy_distance")
    if greedy:
        farther = _num(row["greedy_distance"]) > _num(row["distance"])
        text += (f"; greedy at {greedy}, " + ("farther from human text and " if farther else "")
                 + "never eligible (a sampling default must sample)")
    return text


def _floor_rule_text(row: pd.Series) -> str:
    cited = [f"{label} {_with_ci(row, name, digits)}" for name, label, digits in FLOOR_RULE_CITED
             if _with_ci(row, name, digits)]
    return "; ".join(cited)


def check_m2(data: ReportInputs, machine_fallback: dict | None = None) -> Milestone:
    """Pass: the table is complete (every cell, greedy, the human row), a default is chosen with its
    numbers and kept count, and the min-p decision is stated. A rule that found no cell inside its
    threshold (the old in-corpus floor) is a finding in the verdict, not a failure."""
    title = "M2 Sampling: full repetition table, a default chosen by a stated rule, min-p decision"
    rcfg = data.config.get("sampling", {}).get("repetition", {})
    repeats = (
        f"{len(rcfg.get('prompts', []))} prompts x {rcfg.get('samples')} samples x "
        f"{rcfg.get('new_tokens')} tokens per cell, bootstrap {rcfg.get('bootstrap_resamples')} resamples"
        if rcfg
        else "n/a"
    )
    stamps = stamps_for(data, "sp_repetition", repeats, "greedy decoding and held-out human text on the same prompts",
                        machine_fallback)
    absent = missing_milestone(data, "M2", title, stamps)
    if absent is not None:
        return absent
    rep = data.require("sp_repetition", "cell")
    default = data.require("sp_default", *DEFAULT_COLUMNS)
    dist = data.require("sp_distribution", "cell", "kept")
    expected = set(sampling_cells(data.config["sampling"])) if "sampling" in data.config else set()
    present = set(rep["cell"].astype(str))
    absent = sorted(expected - present)
    has_greedy, has_human = GREEDY_CELL["cell"] in present, HUMAN_CELL in present
    problems = []
    if absent:
        problems.append(f"{len(absent)} grid cells absent from the repetition table: {absent[:5]}")
    if not has_greedy:
        problems.append("no greedy row in the repetition table")
    if not has_human:
        problems.append("no human reference row in the repetition table")
    drow = default.iloc[0] if len(default) else None
    chosen = str(drow["cell"]) if drow is not None and str(drow["cell"]) not in ("", "None", "nan") else None
    rule_text = str(drow["rule"]) if drow is not None else ""
    decision = str(drow["min_p_decision"]) if drow is not None else ""
    if decision and decision != "nan":
        decision += f" ({drow['min_p_reason']})"
    else:
        decision = ""
    if chosen is None or not rule_text:
        problems.append("no default setting chosen with a stated rule")
    if not decision:
        problems.append("no min-p decision stated")
    kept = _kept_for(dist, drow) if drow is not None else None
    if chosen is not None and kept is None:
        problems.append(f"no kept-token count for the default {chosen} in the distribution table")
    kind = str(drow["kind"]) if drow is not None else ""
    evidence = {
        "cells_expected": len(expected),
        "cells_present": len(expected & present),
        "greedy_row": has_greedy,
        "human_row": has_human,
        "chosen": chosen,
        "rule_kind": kind,
        "rule": rule_text,
        "min_p_decision": decision,
    }
    if drow is not None:
        for name in default.columns:
            value = drow[name]
            if isinstance(value, (int, float)) and not isinstance(value, bool) and _num(value) is not None:
                evidence[f"default_{name}"] = float(value)
        if kept is not None:
            evidence["default_kept"] = kept
    verdict = ""
    if chosen is not None:
        cited = _human_match_text(drow) if kind == "human_match" else _floor_rule_text(drow)
        verdict = (
            f"Default: {chosen}" + (f" ({cited})" if cited else "") + f". Rule: {rule_text}"
            + ("" if rule_text.endswith(".") else ".")
            + (f" Kept tokens at the prompt: {kept}." if kept is not None else "")
            + f" Min-p: {decision}" + ("" if decision.endswith(".") else ".")
        )
        if not bool(drow["rule_satisfied"]):
            verdict += (" Finding: no cell met the rule's threshold (the in-corpus share floor), so the default is "
                        "the rule's fallback, the cell with the highest in-corpus share.")
    if problems:
        verdict = (verdict + " " if verdict else "") + "Failed: " + "; ".join(problems) + "."
    headline = _m2_headline(drow, chosen, kind, kept, data.seed_reference.get("sampling", {}))
    return Milestone("M2", title, FAIL if problems else PASS, verdict, evidence, stamps, [], problems, headline)


def _m2_headline(row: pd.Series | None, chosen: str | None, kind: str, kept: int | None, seed: dict) -> str:
    ref = seed.get("reference_cell", {})
    theirs = (f"(seed page: T={ref.get('temperature')} top-p {ref.get('top_p')}, {ref.get('kept')} kept, "
              f"their model)")
    if row is None or chosen is None:
        return f"No default sampling setting chosen {theirs}."
    if kind == "human_match" and _num(row.get("distance")) is not None:
        number = f"distance to human text {_fmt(row['distance'], 2)}"
        if _num(row.get("greedy_distance")) is not None:
            number += f" vs greedy {_fmt(row['greedy_distance'], 2)}"
    else:
        number = f"seq-rep-4 {_fmt(row.get('seq_rep_4'), 3)}"
    return f"Default {chosen}: {number}, {kept if kept is not None else 'n/a'} tokens kept {theirs}."


def _kept_for(dist: pd.DataFrame, row: pd.Series) -> int | None:
    """The kept-token count of the distribution table's cell that is the chosen default."""
    match = dist[dist["cell"] == row["cell"]]
    return int(match["kept"].iloc[0]) if len(match) else None
