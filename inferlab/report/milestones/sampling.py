"""M2, how sampling shapes output: the repetition table, the default by its stated rule, the min-p decision."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from inferlab.report.inputs import ReportInputs
from inferlab.report.milestones.common import Milestone, Target, checked, missing_milestone
from inferlab.report.stamp_reader import stamps_for
from inferlab.review.numbers import number as _num
from inferlab.sampling.grid import GREEDY, HUMAN, sampling_cells
from inferlab.sampling.spec import SEED_KEPT
from inferlab.sampling.spec import SPEC as SAMPLING
from inferlab.sampling.summary_table import wide_summary


@dataclass
class SamplingEvidence:
    cells_expected: int
    cells_present: int
    cells_absent: list[str]
    greedy_row: bool
    human_row: bool
    chosen: str | None = None
    rule_kind: str = ""
    rule: str = ""  # the producer's stated rule, quoted under the verdict
    rule_satisfied: bool = True  # False: no cell met the old in-corpus floor, the default is its fallback
    min_p_decision: str = ""
    min_p_reason: str = ""
    kept: int | None = None  # tokens the default keeps after the prompt
    entropy_nats: float | None = None
    # the human_match rule: distance to held-out human text, its CI, the competitors
    distance: float | None = None
    distance_ci: tuple[float, float] | None = None
    closest: bool = True  # the default is the closest cell (else the tie-break's pick among tied cells)
    runner_up: str | None = None
    runner_up_distance: float | None = None
    greedy_distance: float | None = None
    # the old in-corpus floor rule
    seq_rep_4: float | None = None
    in_corpus_share: float | None = None
    in_corpus_floor: float | None = None
    # the repetition table: greedy, human text and the least repetitive sampled cell
    greedy_seq_rep_4: float | None = None
    human_seq_rep_4: float | None = None
    human_in_corpus: float | None = None
    least_repetitive: str | None = None
    least_seq_rep_4: float | None = None
    least_in_corpus: float | None = None
    # the seed page's cell (T, top-p, kept on their model) and ours at it
    seed_cell: dict = field(default_factory=dict)
    ours_at_seed_cell: str | None = None
    ours_at_seed_kept: int | None = None
    ours_at_seed_entropy: float | None = None
    targets: list[Target] = field(default_factory=list)


def cell_table(data: ReportInputs, seed: dict) -> pd.DataFrame:
    """One row per cell (human and greedy first, then closest to human text): distribution, repetition,
    distance to human text, and the seed page's kept count on its own cell."""
    return _cell_table(data.table("sp_repetition"), data.table("sp_distribution"), data.table("sp_distance"), seed)


def _cell_table(rep: pd.DataFrame, dist: pd.DataFrame | None, distances: pd.DataFrame | None,
                seed: dict) -> pd.DataFrame:
    """cell_table from the given tables: the section's whole ones, or the milestone's views of them."""
    table = wide_summary(rep).reset_index()
    if dist is not None:  # outer: a cell with a distribution but no repetition run still shows
        table = table.merge(dist[["cell", "truncation", "temperature", "top_p", "min_p", "entropy_nats", "kept"]],
                            on="cell", how="outer", suffixes=("", "_dist"))
        for col in ("truncation", "temperature", "top_p", "min_p"):
            table[col] = table[col].fillna(table.pop(f"{col}_dist"))
    if distances is not None:
        table = table.merge(distances[["cell", "distance"]], on="cell", how="left")
    ref = seed.get("sampling", {}).get("reference_cell", {})
    theirs = ((table["temperature"] - ref.get("temperature", -1)).abs() < 1e-9) & (
        (table["top_p"] - ref.get("top_p", -1)).abs() < 1e-9) & (table["min_p"] == 0)
    table[SEED_KEPT] = [ref.get("kept") if hit else None for hit in theirs]
    order = table["cell"].map({HUMAN: 0, GREEDY: 1}).fillna(2)
    sort = ["_order", "distance"] if "distance" in table else ["_order"]
    table = table.assign(_order=order).sort_values(sort, kind="stable").drop(columns="_order")
    return table[[c for c in SAMPLING.body if c in table.columns]].reset_index(drop=True)


def _table_facts(ev: SamplingEvidence, table: pd.DataFrame) -> None:
    """The repetition table's numbers the findings quote: greedy, human text, the least repetitive cell,
    and our cell at the seed page's settings."""
    t = table.set_index("cell")
    if GREEDY in t.index and "seq_rep_4" in t:
        ev.greedy_seq_rep_4 = _num(t.loc[GREEDY, "seq_rep_4"])
    if HUMAN in t.index and "seq_rep_4" in t:
        ev.human_seq_rep_4 = _num(t.loc[HUMAN, "seq_rep_4"])
        ev.human_in_corpus = _num(t.loc[HUMAN, "in_corpus_4gram_share"])
    sampled = t.drop(index=[c for c in (GREEDY, HUMAN) if c in t.index])
    if "seq_rep_4" in sampled and sampled["seq_rep_4"].notna().any():
        ev.least_repetitive = str(sampled["seq_rep_4"].idxmin())
        ev.least_seq_rep_4 = _num(sampled.loc[ev.least_repetitive, "seq_rep_4"])
        ev.least_in_corpus = _num(sampled.loc[ev.least_repetitive, "in_corpus_4gram_share"])
    theirs = sampled[sampled[SEED_KEPT].notna()]
    if len(theirs) and "kept" in theirs:
        ev.ours_at_seed_cell = str(theirs.index[0])
        ev.ours_at_seed_kept = int(theirs["kept"].iloc[0])
        ev.ours_at_seed_entropy = _num(theirs["entropy_nats"].iloc[0])


def _default_facts(ev: SamplingEvidence, row: pd.Series, dist: pd.DataFrame) -> None:
    """The default record's decision, the numbers it was made on and the default's distribution (by cell)."""
    chosen = str(row["cell"])
    ev.chosen = chosen if chosen not in ("", "None", "nan") else None
    ev.rule_kind, ev.rule, ev.rule_satisfied = str(row["kind"]), str(row["rule"]), bool(row["rule_satisfied"])
    decision = str(row["min_p_decision"])
    if decision and decision != "nan":
        ev.min_p_decision, ev.min_p_reason = decision, str(row["min_p_reason"])
    hit = dist.loc[row["cell"]] if row["cell"] in dist.index else None
    ev.kept = int(hit["kept"]) if hit is not None else None
    ev.entropy_nats = _num(hit.get("entropy_nats")) if hit is not None else None
    get = lambda name: _num(row.get(name))  # noqa: E731
    ev.distance, ev.runner_up_distance, ev.greedy_distance = get("distance"), get("runner_up_distance"), \
        get("greedy_distance")
    if get("distance_ci_low") is not None:
        ev.distance_ci = (get("distance_ci_low"), get("distance_ci_high"))
    ev.closest = str(row.get("closest_cell", chosen)) == chosen
    ev.runner_up = str(row["runner_up_cell"]) if row.get("runner_up_cell") else None
    ev.seq_rep_4, ev.in_corpus_share, ev.in_corpus_floor = get("seq_rep_4"), get("in_corpus_4gram_share"), \
        get("in_corpus_floor")


def check_m2(data: ReportInputs, machine_fallback: dict | None = None) -> Milestone:
    """Pass: the table is complete (every cell, greedy, the human row), a default is chosen with its
    numbers and kept count, and the min-p decision is stated. A rule that found no cell inside its
    threshold (the old in-corpus floor) is a finding in the verdict, not a failure."""
    rcfg = data.config.get("sampling", {}).get("repetition", {})
    repeats = (
        f"{len(rcfg.get('prompts', []))} prompts x {rcfg.get('samples')} samples x "
        f"{rcfg.get('new_tokens')} tokens per cell, bootstrap {rcfg.get('bootstrap_resamples')} resamples"
        if rcfg
        else "n/a"
    )
    stamps = stamps_for(data, "sp_repetition", repeats, "greedy decoding and held-out human text on the same prompts",
                        machine_fallback)
    absent = missing_milestone(data, "M2", stamps)
    if absent is not None:
        return absent
    rep, default, dist = data.require("sp_repetition"), data.require("sp_default"), data.require("sp_distribution")
    expected = set(sampling_cells(data.config["sampling"])) if "sampling" in data.config else set()
    present = set(rep["cell"].astype(str))
    seed = data.seed_reference
    ev = SamplingEvidence(len(expected), len(expected & present), sorted(expected - present), GREEDY in present,
                          HUMAN in present, seed_cell=dict(seed.get("sampling", {}).get("reference_cell", {})))
    _table_facts(ev, _cell_table(rep, dist, data.view("sp_distance"), seed))
    if len(default):
        _default_facts(ev, default.iloc[0], dist.set_index("cell"))
    stated = ev.chosen is not None and bool(ev.rule)
    ev.targets = [
        Target("grid cells in the repetition table", ev.cells_present, ev.cells_expected, not ev.cells_absent,
               limit_of="the config's grid"),
        Target("greedy and human reference rows", "both" if ev.greedy_row and ev.human_row else "incomplete",
               "both", ev.greedy_row and ev.human_row, limit_of="required"),
        Target("a default chosen by a stated rule", ev.chosen or "none", ev.rule_kind or "none", stated,
               limit_of="the rule below"),
        Target("tokens the default keeps after the prompt", ev.kept if ev.kept is not None else "n/a",
               ev.seed_cell.get("kept"), ev.kept is not None or ev.chosen is None, limit_of="seed page, their cell"),
        Target("a min-p decision", ev.min_p_decision or "none", "stated", bool(ev.min_p_decision),
               limit_of="required"),
    ]
    problems = []
    if ev.cells_absent:
        problems.append(f"only {ev.cells_present} of {ev.cells_expected} grid cells in the repetition table "
                        f"(absent: {', '.join(ev.cells_absent[:5])})")
    if not ev.greedy_row:
        problems.append("no greedy row in the repetition table")
    if not ev.human_row:
        problems.append("no human reference row in the repetition table")
    if not stated:
        problems.append("no default setting chosen with a stated rule")
    if not ev.min_p_decision:
        problems.append("no min-p decision stated")
    if ev.chosen is not None and ev.kept is None:
        problems.append(f"no kept-token count for the default {ev.chosen} in the distribution table")
    return checked("M2", ev, stamps, problems)
