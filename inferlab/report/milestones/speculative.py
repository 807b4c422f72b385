"""M3, what speculative sampling buys: the chosen draft and k with its reason, per engine, and greedy identity."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from inferlab.report.inputs import ReportInputError, ReportInputs
from inferlab.report.milestones.common import (
    Milestone,
    Target,
    Timing,
    checked,
    engine_rows,
    engines_in,
    missing_milestone,
    timing,
)
from inferlab.report.stamp_reader import stamps_for
from inferlab.review.numbers import number as _num

# The engine's targets: on the compiled engine, whose rounds are one graph each, the fastest group
# beats compiled target-only sampling by this on the wall clock;
COMPILED_WALL_TARGET = 1.0
# ... a (k+1)-token verification costs at most this many single steps, for every k up to VERIFY_TARGET_MAX_K;
COMPILED_VERIFY_TARGET, VERIFY_TARGET_MAX_K = 1.3, 4
# ... the smallest draft's step costs at most this fraction of a target step (c by time), in every group;
COMPILED_DRAFT_C_TARGET = 0.35
# ... and the packages a group runs take no longer than this to compile (the compile rules' time for each).
COMPILE_TARGET_S = 120.0
FORMULA_TOLERANCE = 0.05  # the formula "predicts" the yield when every group is within 5% of it


@dataclass
class SpecEngine:
    """One engine's groups: the fastest on the wall clock, what the roofline leaves."""
    fastest_group: str  # the fastest group on the wall clock against target-only sampling
    fastest_wall_speedup: float
    verify_bound_ratio_by_k: dict[int, float]  # ... at this machine's roofline
    speedup_at_bound: float  # the best group with every forward at its bound
    target_step_ms: tuple[float, float]  # each group job's own target step
    job_speeds_differ: bool
    # the compiled engine's targets (empty elsewhere)
    verify_worst_by_k: dict[int, float] = field(default_factory=dict)
    draft_c_draft: str | None = None  # the smallest draft (fewest parameters)
    draft_c_range: tuple[float, float] | None = None
    draft_c_in_round_range: tuple[float, float] | None = None
    draft_c_at_bound: float | None = None
    compile_s: tuple[float, float] | None = None
    compile_longest_group: str | None = None
    compile_packages: int | None = None


@dataclass
class SpecEvidence:
    engine: str  # the overall choice: engine, draft, k and the producer's own reason
    draft: str
    k: int
    reason: str
    speedup_time: float | None
    wall_speedup: float | None
    greedy_identical: int
    greedy_cases: int
    engines: dict[str, SpecEngine]
    # the group table's facts the findings quote (acceptance and yield do not depend on the engine)
    worst_yield_group: str = ""
    worst_yield: float | None = None
    worst_formula: float | None = None
    formula_close: bool = True
    params_best_group: str = ""
    params_best_speedup: float | None = None
    params_best_alpha: float | None = None
    fastest_of_last: str = ""  # the last engine's fastest group on the wall clock
    walls_of_fastest: dict[str, float] = field(default_factory=dict)  # ... its wall clock on every engine
    seed: dict = field(default_factory=dict)  # the seed page's best by parameters and wall clock
    timing: Timing = field(default_factory=Timing)
    targets: list[Target] = field(default_factory=list)


def group_name(row: pd.Series) -> str:
    return f"{row['draft']} k={int(row['k'])}"


def _range(values: pd.Series) -> tuple[float, float]:
    return float(values.min()), float(values.max())


def spec_engine(summary: pd.DataFrame, best: pd.DataFrame, engine: str) -> SpecEngine:
    rows, picks = engine_rows(summary, engine), engine_rows(best, engine)
    pick = picks[picks["criterion"] == "wall_speedup"].iloc[0]
    fastest = rows[(rows["draft"] == pick["draft"]) & (rows["k"] == pick["k"])].iloc[0]
    at_bound = picks[picks["criterion"] == "speedup_at_bound"].iloc[0]
    ev = SpecEngine(
        group_name(fastest), float(fastest["wall_speedup"]),
        {int(k): float(r) for k, r in rows.groupby("k")["verify_bound_ratio"].first().items()},
        float(at_bound["value"]), _range(rows["target_step_ms"]),
        bool(rows["job_speeds_differ"].iloc[0]))
    if engine == "compiled":
        worst = rows[rows["k"] <= VERIFY_TARGET_MAX_K].groupby("k")["verify_cost_ratio"].max()
        ev.verify_worst_by_k = {int(k): float(r) for k, r in worst.items()}
        smallest = rows.loc[rows["c_params"].astype(float).idxmin(), "draft"]
        mine = rows[rows["draft"] == smallest]
        ev.draft_c_draft, ev.draft_c_range = str(smallest), _range(mine["c_time"])
        ev.draft_c_in_round_range = _range(mine["c_time_in_round"])
        ev.draft_c_at_bound = float(mine["draft_step_bound_ms"].iloc[0] / mine["target_step_bound_ms"].iloc[0])
        slowest = rows.loc[rows["compile_s"].astype(float).idxmax()]
        ev.compile_s, ev.compile_longest_group = _range(rows["compile_s"]), group_name(slowest)
        ev.compile_packages = int(slowest["packages"])
    return ev


def engine_targets(name: str, ev: SpecEngine) -> list[Target]:
    """The wall clock per engine; on the compiled engine also its verification, draft-cost and compile targets."""
    judged = name == "compiled"
    rows = [Target(f"fastest group on the wall clock, {name} ({ev.fastest_group})", ev.fastest_wall_speedup,
                   COMPILED_WALL_TARGET if judged else None,
                   ev.fastest_wall_speedup >= COMPILED_WALL_TARGET if judged else None, "x",
                   "target" if judged else "", roofline=ev.speedup_at_bound)]
    if not judged:
        return rows
    rows += [Target(f"verification at k = {k}, compiled (single steps)", worst, COMPILED_VERIFY_TARGET,
                    worst <= COMPILED_VERIFY_TARGET, roofline=ev.verify_bound_ratio_by_k.get(k))
             for k, worst in ev.verify_worst_by_k.items()]
    rows += [Target(f"c by time of {ev.draft_c_draft} as a call, compiled", ev.draft_c_range,
                    COMPILED_DRAFT_C_TARGET, ev.draft_c_range[1] <= COMPILED_DRAFT_C_TARGET,
                    roofline=ev.draft_c_at_bound),
             Target(f"c by time of {ev.draft_c_draft} inside a round's graph", ev.draft_c_in_round_range,
                    roofline=ev.draft_c_at_bound),
             Target(f"compile time of a group's packages (longest {ev.compile_longest_group}, "
                    f"{ev.compile_packages} packages)", ev.compile_s, COMPILE_TARGET_S,
                    ev.compile_s[1] <= COMPILE_TARGET_S, " s")]
    return rows


def _table_facts(ev: SpecEvidence, summary: pd.DataFrame, engines: list[str]) -> None:
    """The facts of the group table the findings read: the formula's worst miss, the best group by
    parameter cost, and the wall clock of the last engine's fastest group on every engine."""
    first = engine_rows(summary, engines[0])
    gap = (first["tokens_per_target_forward"] - first["formula_tokens_per_target_forward"]).abs()
    worst = first.loc[gap.idxmax()]
    ev.worst_yield_group, ev.worst_yield = group_name(worst), float(worst["tokens_per_target_forward"])
    ev.worst_formula = float(worst["formula_tokens_per_target_forward"])
    ev.formula_close = bool(gap.max() <= FORMULA_TOLERANCE * ev.worst_formula)
    top = first.loc[first["speedup_theory_params"].idxmax()]
    ev.params_best_group, ev.params_best_speedup = group_name(top), float(top["speedup_theory_params"])
    ev.params_best_alpha = float(top["alpha"])
    last = engine_rows(summary, engines[-1])
    fastest = last.loc[last["wall_speedup"].idxmax()]
    ev.fastest_of_last = group_name(fastest)
    ev.walls_of_fastest = {e: float(engine_rows(summary, e).set_index(["draft", "k"]).loc[
        (fastest["draft"], fastest["k"]), "wall_speedup"]) for e in engines}


def check_m3(data: ReportInputs, machine_fallback: dict | None = None) -> Milestone:
    scfg = data.config.get("speculative", {})
    repeats = (
        f"{len(scfg.get('prompts', []))} prompts x {len(scfg.get('seeds', []))} seeds x "
        f"{scfg.get('new_tokens')} new tokens per group"
        if scfg
        else "n/a"
    )
    stamps = stamps_for(
        data, "spec_summary", repeats,
        "plain target sampling (target alone), same prompts, seeds and engine, timed interleaved in each group's job",
        machine_fallback
    )
    absent = missing_milestone(data, "M3", stamps)
    if absent is not None:
        return absent
    summary = data.require("spec_summary")
    identical = data.require("spec_identity")["identical"].astype(bool)
    best = data.require("spec_best")
    chosen = best[best["criterion"] == "chosen"]
    if chosen.empty:
        raise ReportInputError(f"{data.paths.get('spec_best', 'spec_best')} has no row with criterion 'chosen'")
    row = chosen.iloc[0]
    match = engine_rows(summary, row["engine"])
    match = match[(match["draft"] == row["draft"]) & (match["k"] == row["k"])]
    group = match.iloc[0] if len(match) else pd.Series(dtype=float)
    engines = engines_in(summary)
    ev = SpecEvidence(str(row["engine"]), str(row["draft"]), int(row["k"]), str(row["reason"]),
                      _num(group.get("speedup_theory_time")), _num(group.get("wall_speedup")),
                      int(identical.sum()), len(identical), {e: spec_engine(summary, best, e) for e in engines},
                      seed=dict(data.seed_reference.get("speculative", {})),
                      timing=timing(data, stamps, "M3", eager_calls_in=("spec_summary",)))
    _table_facts(ev, summary, engines)
    ev.targets = [Target("greedy output identical to the target's (cases)", ev.greedy_identical, ev.greedy_cases,
                         ev.greedy_identical == ev.greedy_cases > 0, limit_of="every case"),
                  *[t for name, engine in ev.engines.items() for t in engine_targets(name, engine)]]
    problems = []
    if ev.greedy_identical != ev.greedy_cases or ev.greedy_cases == 0:
        problems.append(f"greedy speculative output matches target greedy in only {ev.greedy_identical} of "
                        f"{ev.greedy_cases} cases")
    return checked("M3", ev, stamps, problems)
