"""M1, why decoding is slow: the KV cache's speed ratio, same output, and what explains it, per engine."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from inferlab.report.inputs import ReportInputs
from inferlab.report.milestones.common import (
    ENGINE_ORDER,
    Milestone,
    Target,
    Timing,
    checked,
    engine_label,
    engine_rows,
    engines_in,
    missing_milestone,
    timing,
)
from inferlab.report.stamp_reader import stamps_for
from inferlab.review.numbers import fmt
from inferlab.review.numbers import number as _num

# The compiled engine's target: its cached step within this many times the roofline bound.
COMPILED_BOUND_TARGET = 1.6
FIT_TOLERANCE = 0.25  # the fit "explains" the measured ratio when it lands within 25% of it


@dataclass
class KvEngine:
    """One engine's numbers at the longest generated length (fit, profiler and roofline where measured)."""
    label: str  # "compiled", or "compiled (ran eager)" when its compile fell back
    ratio_by_length: dict[int, float]  # no-cache time / cache time
    ratio: float  # at the longest length (its min and max over reruns are in the appendix)
    cached_ms_per_token: float | None
    flop_estimate_ratio: float | None = None
    a_ms: float | None = None  # the no-cache step's fixed cost (fit a + b*positions)
    predicted_ratio: float | None = None  # what that fit predicts
    roofline_bound_ms: float | None = None
    over_bound: float | None = None  # cached ms per token / roofline bound


@dataclass
class KvEvidence:
    engines: dict[str, KvEngine]  # eager first: the seed-faithful engine the criteria are stated on
    length: int  # the longest generated length
    milestone_length: int  # the seed's
    same_output: int  # runs whose cached output is token-identical to the uncached one
    runs: int
    differs_by_engine: dict[str, int]
    seed_ratio: float | None  # the seed page's CPU ratio at its length (their model, their machine)
    timing: Timing = field(default_factory=Timing)
    fit_explains: bool = False  # the fit lands within FIT_TOLERANCE of the measured ratio, nearer than the FLOPs
    targets: list[Target] = field(default_factory=list)

    @property
    def primary(self) -> KvEngine:
        return next(iter(self.engines.values()))


def kv_ratio_by_length(summary: pd.DataFrame) -> pd.DataFrame:
    """One row per engine and length: the summary's speed ratio (no-cache time / cache time) with min and max,
    eager first (the ratio repeats on both mode rows of a length in kvbench.summarize_timings' table)."""
    keys = ["engine", "length"]
    rows = summary.dropna(subset=["speed_ratio"]).groupby(keys, as_index=False, sort=False).first()
    rank = {e: i for i, e in enumerate(ENGINE_ORDER)}
    rows = rows.sort_values(keys, key=lambda c: c if c.name == "length" else c.map(lambda e: rank.get(e, 9)),
                            kind="stable")
    return pd.DataFrame({"engine": rows["engine"].astype(str), "length": rows["length"].astype(int),
                         "ratio": rows["speed_ratio"].astype(float), "ratio_min": rows["speed_ratio_min"].astype(float),
                         "ratio_max": rows["speed_ratio_max"].astype(float)}).reset_index(drop=True)


def _row_at(df: pd.DataFrame, length: int) -> pd.Series | None:
    if not len(df):
        return None
    return df[df["length"] == length].iloc[0] if (df["length"] == length).any() else df.iloc[-1]


def kv_engine(summary: pd.DataFrame, fit: pd.DataFrame, roofline: pd.DataFrame | None, engine: str) -> KvEngine:
    """One engine's evidence: the ratio at the longest length, the fit and the roofline (None: not measured)."""
    rows = engine_rows(summary, engine)
    ratios = kv_ratio_by_length(rows)
    longest = ratios.loc[ratios["length"].idxmax()]
    length = int(longest["length"])
    cached = rows[(rows["mode"] == "cache") & (rows["length"] == length)]["ms_per_token_median"]
    ev = KvEngine(engine_label(summary, engine),
                  {int(r.length): float(r.ratio) for r in ratios.itertuples()}, float(longest["ratio"]),
                  _num(cached.iloc[0]) if len(cached) else None)
    at_length = _row_at(engine_rows(fit, engine), length)
    if at_length is not None:
        for name in ("flop_estimate_ratio", "a_ms", "predicted_ratio"):  # KvEngine's fields of the same names
            setattr(ev, name, _num(at_length[name]))
    if roofline is not None:
        ours = roofline[(roofline["subject"] == "ours") & (roofline["engine"] == engine)]
        ev.roofline_bound_ms = _num(ours["lower_bound_ms_per_token"].iloc[0]) if len(ours) else None
        if ev.roofline_bound_ms and ev.cached_ms_per_token:
            ev.over_bound = ev.cached_ms_per_token / ev.roofline_bound_ms
    return ev


def kv_targets(ev: KvEvidence) -> list[Target]:
    rows = [Target("outputs token-identical (runs)", ev.same_output, ev.runs, ev.same_output == ev.runs,
                   limit_of="all runs"),
            Target("the explanation: FLOP estimate and step-time fit", "stated" if ev.primary.a_ms is not None
                   and ev.primary.flop_estimate_ratio is not None else "absent", "stated",
                   ev.primary.a_ms is not None and ev.primary.flop_estimate_ratio is not None, limit_of="required")]
    for name, engine in ev.engines.items():
        seed = engine is ev.primary
        rows.append(Target(f"speed ratio at {ev.length} tokens, {engine.label}", engine.ratio,
                           ev.seed_ratio if seed else engine.predicted_ratio, unit="x",
                           limit_of="seed page, their CPU" if seed else "the fit predicts"))
        if engine.over_bound is not None:
            judged = name == "compiled"
            rows.append(Target(f"cached step over the roofline bound ({fmt(engine.roofline_bound_ms, ' ms')}), "
                               f"{engine.label}", engine.over_bound, COMPILED_BOUND_TARGET if judged else None,
                               engine.over_bound <= COMPILED_BOUND_TARGET if judged else None, "x",
                               limit_of="target" if judged else ""))
    return rows


def check_m1(data: ReportInputs, machine_fallback: dict | None = None) -> Milestone:
    """Pass/fail on the eager (seed-faithful) engine; same_output must hold on every engine."""
    reps = data.config.get("kvcache", {}).get("reps")
    stamps = stamps_for(
        data,
        "kv_summary" if data.has("kv_summary") else "kv_timings",
        f"{reps} reps, median" if reps else "n/a",
        "no KV cache (every step recomputes the whole prefix), same prompt, greedy, batch 1",
        machine_fallback,
    )
    absent = missing_milestone(data, "M1", stamps)
    if absent is not None:
        return absent
    summary, timings, fit = data.require("kv_summary"), data.require("kv_timings"), data.require("kv_fit")
    roofline = data.view("roofline")
    engines = {e: kv_engine(summary, fit, roofline, e) for e in engines_in(summary)}
    same = timings["same_output"].astype(bool)
    seed = data.seed_reference.get("kvcache", {})
    ev = KvEvidence(engines, max(next(iter(engines.values())).ratio_by_length), int(seed.get("max_length", 256)),
        int(same.sum()), len(same),
        {str(e): int((~g).sum()) for e, g in same.groupby(timings["engine"], sort=False)},
        _num(seed.get("cpu_ratio_at_256")),
        timing(data, stamps, "M1", eager_calls_in=("kv_timings",)))
    p = ev.primary
    if p.predicted_ratio is not None and p.flop_estimate_ratio is not None:
        miss = abs(p.predicted_ratio - p.ratio)
        ev.fit_explains = miss <= FIT_TOLERANCE * p.ratio and miss < abs(p.flop_estimate_ratio - p.ratio)
    ev.targets = kv_targets(ev)
    problems = []
    if ev.same_output < ev.runs:
        differ = ", ".join(f"{e} {n}" for e, n in ev.differs_by_engine.items())
        problems.append(f"outputs token-identical in only {ev.same_output} of {ev.runs} runs (differing: {differ})")
    if ev.primary.flop_estimate_ratio is None or ev.primary.a_ms is None:
        problems.append("the explanation lacks the FLOP estimate or the fit")
    return checked("M1", ev, stamps, problems)
