"""Experiment 3's summary, from the groups' counters and timings (torch-free: the summary job
only aggregates). The per-group table of SPEC §4: acceptance α, tokens per target forward
against the formula E = (1 - α^(k+1)) / (1 - α), the theoretical speedup E / (k c + 1) with two
choices of c, and the measured wall-clock speedup; then the best group by each criterion.
"""

from __future__ import annotations

import math
import statistics

import numpy
import pandas as pd

from inferlab.core.engine_rows import total_eager_calls


def expected_tokens_per_round(alpha: float, k: int) -> float:
    """E = (1 - α^(k+1)) / (1 - α): tokens per target forward when each draft is accepted
    independently with probability α (Leviathan et al. 2023, eq. 1); k + 1 at α = 1."""
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def theoretical_speedup(expected_tokens: float, k: int, cost_ratio: float) -> float:
    """E / (k c + 1): one round costs k draft steps of relative cost c plus one target step."""
    return expected_tokens / (k * cost_ratio + 1.0)


def forward_model_speedup(expected_tokens, k, target_ms, draft_ms, verify_ms):
    """E t_target / (k t_draft + t_verify): a round costs k draft steps and one (k+1)-token
    verification, each at its own time, against E target steps. Scalars or aligned Series."""
    return expected_tokens * target_ms / (k * draft_ms + verify_ms)


def _wall_by_rep(runs: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Total wall time, and the part of it spent caching prompts, of every rerun (sums over prompts
    and seeds)."""
    return runs.groupby([*keys, "rep"], as_index=False)[["wall_ms", "prefill_ms"]].sum()


def round_breakdown(spec_wall_ms: float, spec_prefill_ms: float, rounds: int, k: int, draft_ms: float,
                    verify_ms: float, draft_half_ms: float | None = None) -> dict:
    """Where a round's wall time goes: its k draft steps, one verification, its share of the prompts'
    prefill, and the rest (the accept rule, sampling, Python and the cost of each call).

    The drafts cost draft_half_ms where the engine runs them as one graph (timed as such), else k
    separate steps; the verification is timed as a call of its own. The prefill (both models cache
    each prompt before the first round) is timed inside every decode and spread over the rounds, so
    the rest holds only what the rounds themselves pay. The rest is negative where the whole round,
    one graph, saves a call's fixed cost over its parts timed apart."""
    round_ms = spec_wall_ms / rounds
    drafts_ms = k * draft_ms if draft_half_ms is None else draft_half_ms
    prefill_ms = spec_prefill_ms / rounds
    return {"round_ms": round_ms, "round_draft_ms": drafts_ms, "round_verify_ms": verify_ms,
            "round_prefill_ms": prefill_ms, "round_rest_ms": round_ms - drafts_ms - verify_ms - prefill_ms,
            "draft_step_in_round_ms": drafts_ms / k, "drafts_in_one_graph": draft_half_ms is not None}


def with_step_bounds(summary: pd.DataFrame, bound_ms: dict[str, float], target_name: str,
                     verify_bound_ms: dict[int, float]) -> pd.DataFrame:
    """Each group's steps against their bounds, and what the group would buy at those bounds.

    bound_ms maps model -> the bound of its one-token cached step, verify_bound_ms maps k -> the bound
    of the target's (k+1)-token verification, both at the forward timings' position (weights and cache
    read once at the probe's bandwidth, or the forward's FLOPs at its FLOP/s if slower). A step far above
    its bound pays a call's fixed cost, whatever the model's size. The verification's bound is where the
    roofline sets verify_cost_ratio: its weights are read once for every row, but its arithmetic grows
    with k + 1, so once (k+1) x a step's FLOPs outlast the weights' read it costs more than one step even
    on an engine at the bound. speedup_at_bound is the forward model (speedup_forward_model) with every
    forward at its bound: what the group would buy, at its measured α, on an engine that reached them."""
    target_bound = bound_ms[target_name]
    draft_bound = summary["draft"].map(bound_ms).astype(float)
    verify_bound = summary["k"].map(verify_bound_ms).astype(float)
    return summary.assign(
        target_step_bound_ms=target_bound, draft_step_bound_ms=draft_bound,
        target_step_over_bound=summary["target_step_ms"] / target_bound,
        draft_step_over_bound=summary["draft_step_ms"] / draft_bound,
        verify_bound_ms=verify_bound, verify_bound_ratio=verify_bound / target_bound,
        verify_over_bound=summary["verify_forward_ms"] / verify_bound,
        speedup_at_bound=forward_model_speedup(summary["formula_tokens_per_target_forward"], summary["k"],
                                               target_bound, draft_bound, verify_bound))


def summarise(runs: pd.DataFrame, forward: pd.DataFrame, baseline: pd.DataFrame,
              params: dict[str, int], target_name: str) -> pd.DataFrame:
    """One row per (draft, k). runs, forward and baseline (the group's own target-only runs) carry
    draft and k columns; params maps model -> count.

    Counters come from rerun 0 (reruns repeat the same seeds, so they repeat the counts).
    α = accepted / proposed counts only draft tokens that reached the accept test, the
    per-token acceptance probability the formula assumes; accepted / drafted (all k per round)
    is (E - 1) / k instead and is reported as accepted_per_drafted. For k = 1 the measured
    yield is 1 + α by construction, so the formula check only has content for k >= 2.
    The wall-clock speedup pairs rerun r of the group's target-only runs with its rerun r (the
    group's job timed them interleaved); its median, min and max over r are reported. eager_calls is
    the total of the forwards that ran eagerly in the group's timed rows (every rerun of both decoders
    and every forward timing; NaN where a table predates that count).
    """
    counted = runs[runs["rep"] == 0]
    # reruns repeat the seeds, so their tokens must repeat too (a check on determinism)
    outputs = runs.assign(ids=runs["new_token_ids"].map(tuple))
    consistent = outputs.groupby(["draft", "k", "prompt_index", "seed"])["ids"].nunique().eq(1)
    consistent = consistent.groupby(["draft", "k"]).all()
    sums = counted.groupby(["draft", "k"], as_index=False).agg(
        runs=("seed", "size"), new_tokens=("new_tokens", "sum"), rounds=("rounds", "sum"),
        target_forwards=("target_forwards", "sum"), draft_forwards=("draft_forwards", "sum"),
        drafted=("drafted", "sum"), proposed=("proposed", "sum"), accepted=("accepted", "sum"),
        generated=("generated", "sum"), overlap_sum=("overlap_sum", "sum"))
    group_keys = ["draft", "k"]
    walls = _wall_by_rep(runs, group_keys).merge(_wall_by_rep(baseline, group_keys), on=[*group_keys, "rep"],
                                                 suffixes=("_spec", "_base"))
    fwd = forward.groupby(["draft", "k", "role", "tokens_per_forward"])["forward_ms"].median()
    forms = _draft_forms(forward)
    rows = []
    for rec in sums.to_dict("records"):
        draft, k = rec["draft"], int(rec["k"])
        alpha = rec["accepted"] / rec["proposed"]
        measured = rec["generated"] / rec["target_forwards"]
        formula = expected_tokens_per_round(alpha, k)
        overlap_mean = rec["overlap_sum"] / rec["proposed"]
        target_ms = float(fwd[(draft, k, "target", 1)])
        draft_ms = float(fwd[(draft, k, "draft", 1)])
        verify_ms = float(fwd[(draft, k, "target", k + 1)])
        draft_half = fwd.get((draft, k, "draft_half", k))
        form = forms.get((draft, k), "")
        c_params = params[draft] / params[target_name]
        c_time = draft_ms / target_ms
        paired = walls[(walls["draft"] == draft) & (walls["k"] == k)]
        ratios = paired["wall_ms_base"] / paired["wall_ms_spec"]
        # the same ratio for the decoding loops alone, each decoder's prefill taken out of its own rerun
        loop_ratios = ((paired["wall_ms_base"] - paired["prefill_ms_base"])
                       / (paired["wall_ms_spec"] - paired["prefill_ms_spec"]))
        in_group = [t[(t["draft"] == draft) & (t["k"] == k)] for t in (runs, baseline, forward)]
        spec_wall_ms = float(paired["wall_ms_spec"].median())
        spec_prefill_ms = float(paired["prefill_ms_spec"].median())
        breakdown = round_breakdown(spec_wall_ms, spec_prefill_ms, rec["rounds"], k, draft_ms, verify_ms,
                                    None if draft_half is None else float(draft_half))
        rows.append({
            **{key: rec[key] for key in ("draft", "k", "runs", "new_tokens", "rounds", "target_forwards",
                                         "draft_forwards", "drafted", "proposed", "accepted", "generated")},
            "alpha": alpha,
            "overlap_mean": overlap_mean,
            "alpha_minus_overlap": alpha - overlap_mean,
            "accepted_per_drafted": rec["accepted"] / rec["drafted"],
            "tokens_per_target_forward": measured,
            "delivered_tokens_per_target_forward": rec["new_tokens"] / rec["target_forwards"],
            "formula_tokens_per_target_forward": formula,
            "formula_rel_error": (formula - measured) / measured,
            "formula_from_overlap": expected_tokens_per_round(overlap_mean, k),
            "draft_params": params[draft], "target_params": params[target_name],
            "c_params": c_params,
            "target_step_ms": target_ms, "draft_step_ms": draft_ms, "verify_forward_ms": verify_ms,
            "c_time": c_time,
            "verify_cost_ratio": verify_ms / target_ms,
            "speedup_theory_params": theoretical_speedup(formula, k, c_params),
            "speedup_theory_time": theoretical_speedup(formula, k, c_time),
            # the same cost model, with the measured cost of the (k+1)-token verification
            "speedup_forward_model": forward_model_speedup(formula, k, target_ms, draft_ms, verify_ms),
            **breakdown,
            "draft_form": form,
            # c as a round pays it: on an engine that runs the round as one graph, no call per draft step
            "c_time_in_round": breakdown["draft_step_in_round_ms"] / target_ms,
            "spec_wall_ms": spec_wall_ms,
            "baseline_wall_ms": float(paired["wall_ms_base"].median()),
            "wall_speedup": float(statistics.median(ratios)),
            "wall_speedup_min": float(ratios.min()),
            "wall_speedup_max": float(ratios.max()),
            "spec_prefill_ms": spec_prefill_ms,
            "baseline_prefill_ms": float(paired["prefill_ms_base"].median()),
            "wall_speedup_without_prefill": float(statistics.median(loop_ratios)),
            "timing_reps": len(ratios),
            "reruns_identical": bool(consistent[(draft, k)]),
            "eager_calls": total_eager_calls(*in_group),
        })
    table = with_job_speed_spread(with_marginal_draft_step(pd.DataFrame(rows)))
    return table.sort_values(["draft", "k"], ignore_index=True)


# Group jobs whose own target steps (same model, same position) differ by more than this factor ran
# at different machine speeds: each job's ratios (c, wall_speedup) stay valid, being taken within
# the job, but milliseconds from two jobs do not compare.
JOB_SPEED_SPREAD_LIMIT = 1.5


def with_job_speed_spread(summary: pd.DataFrame) -> pd.DataFrame:
    """How far the machine's speed moved between the group jobs, read off each job's own target step:
    the largest over the smallest (job_speed_spread), and whether it passes JOB_SPEED_SPREAD_LIMIT.
    A shared VM can slow down for minutes without load or steal showing it."""
    spread = float(summary["target_step_ms"].max() / summary["target_step_ms"].min())
    return summary.assign(job_speed_spread=spread, job_speeds_differ=spread > JOB_SPEED_SPREAD_LIMIT)


def _draft_forms(forward: pd.DataFrame) -> dict[tuple[str, int], str]:
    """(draft, k) -> the form a round's draft half ran its projections as (fused.draft_forward_form),
    where the group job timed one; tables from before the column have none."""
    if "draft_form" not in forward.columns:
        return {}
    halves = forward[forward["role"] == "draft_half"].dropna(subset=["draft_form"])
    return {(draft, int(k)): form for (draft, k), form in halves.groupby(["draft", "k"])["draft_form"].first().items()}


def with_marginal_draft_step(summary: pd.DataFrame) -> pd.DataFrame:
    """Per draft and draft form, what one more draft step adds to a round: the least-squares slope of
    round_draft_ms over the k whose rounds run the draft's projections in that form (what a round pays
    once for its drafts, such as a call's fixed cost, stays in the intercept; a slope across two forms
    would be the difference between them), that slope as c against the median target step of all the
    draft's groups, and the k it was fitted over (draft_step_marginal_ks, "1,2"). NaN where the form
    has a single k."""
    target_ms = summary.groupby("draft")["target_step_ms"].median()
    parts = []
    for (draft, _), rows in summary.groupby(["draft", "draft_form"], sort=False):
        ks, drafts_ms = rows["k"].astype(float), rows["round_draft_ms"].astype(float)
        slope = float(numpy.polyfit(ks, drafts_ms, 1)[0]) if ks.nunique() > 1 else math.nan
        parts.append(rows.assign(draft_step_marginal_ms=slope, c_time_marginal=slope / float(target_ms[draft]),
                                 draft_step_marginal_ks=",".join(str(int(k)) for k in sorted(ks.unique()))))
    return pd.concat(parts)


def with_compile_seconds(summary: pd.DataFrame, stamps: dict[tuple[str, int, str], dict]) -> pd.DataFrame:
    """What compiling each group's graphs cost, in s (compile_s): the compile rules' time for every package
    its job ran on that engine (the rounds, the forwards it times, target-only sampling's step; packages
    a group shares with others count in each), and how many packages that was. stamps maps (draft, k,
    engine) -> the engine's stamp; a group the stamps do not name gets NaN, not a free compile."""
    keys = list(zip(summary["draft"], summary["k"].astype(int), summary["engine"], strict=True))

    def stamped(field: str, scale: float = 1.0) -> list[float]:
        return [float(stamps[key].get(field, math.nan)) * scale if key in stamps else math.nan for key in keys]
    return summary.assign(compile_s=stamped("package_compile_ms_total", 1e-3), packages=stamped("packages"))


BEST_CRITERIA = {
    "tokens_per_target_forward": "measured tokens per target forward (yield)",
    "speedup_theory_params": "E/(k c + 1), c = parameter ratio",
    "speedup_theory_time": "E/(k c + 1), c = measured draft/target step time",
    "speedup_forward_model": "E t_target / (k t_draft + t_verify), measured forward times",
    "speedup_at_bound": "E t_target / (k t_draft + t_verify), every forward at its roofline bound",
    "wall_speedup": "measured wall-clock speedup over target-only sampling (median of reruns)",
}
# how a reason sentence names each criterion (a reader of the report never sees the column name)
CRITERION_NAMES = {
    "tokens_per_target_forward": "yield",
    "speedup_theory_params": "theoretical speedup with c by parameters",
    "speedup_theory_time": "theoretical speedup with c by step time",
    "speedup_forward_model": "forward-model speedup",
    "speedup_at_bound": "speedup at the roofline",
    "wall_speedup": "wall-clock speedup",
}
# The choice for milestone M3: the theoretical speedup costed by measured forward time. It uses
# the measured yield (via α) and this machine's real cost ratio, but unlike the wall clock it
# does not move with a noisy rerun; the wall clock is quoted beside it as the check.
CHOICE_CRITERION = "speedup_theory_time"


def _reason(row: pd.Series, criterion: str) -> str:
    # the value first, then its definition: "= x" after "c = ..." would read as the value of c
    return (f"{row['draft']} k={int(row['k'])}: highest {CRITERION_NAMES[criterion]} = {row[criterion]:.3f} "
            f"({BEST_CRITERIA[criterion]}); "
            f"α {row['alpha']:.3f}, measured {row['tokens_per_target_forward']:.3f} tokens per target forward "
            f"(formula E {row['formula_tokens_per_target_forward']:.3f}), theoretical speedup "
            f"{row['speedup_theory_params']:.2f}x with c by parameters ({row['c_params']:.3f}), "
            f"{row['speedup_theory_time']:.2f}x with c by measured step time ({row['c_time']:.3f}); "
            f"wall clock {row['wall_speedup']:.2f}x "
            f"(reruns {row['wall_speedup_min']:.2f}-{row['wall_speedup_max']:.2f})")


def best_groups(summary: pd.DataFrame) -> pd.DataFrame:
    """The best (draft, k) by each criterion, with the runner-up's value to show the margin.

    The first row, criterion "chosen", is the recommendation (CHOICE_CRITERION) with its reason.
    """
    rows = []
    for label, column in [("chosen", CHOICE_CRITERION), *((c, c) for c in BEST_CRITERIA)]:
        ranked = summary.sort_values(column, ascending=False, ignore_index=True)
        top = ranked.iloc[0]
        second = ranked.iloc[1] if len(ranked) > 1 else None
        rows.append({"criterion": label, "column": column, "description": BEST_CRITERIA[column],
                     "draft": top["draft"], "k": int(top["k"]), "value": float(top[column]),
                     "runner_up_draft": None if second is None else str(second["draft"]),
                     "runner_up_k": -1 if second is None else int(second["k"]),
                     "runner_up_value": float("nan") if second is None else float(second[column]),
                     "reason": _reason(top, column)})
    fastest = summary["wall_speedup"].max()
    if fastest < 1.0:
        rows[0]["reason"] += (f"; on this machine no group beats target-only sampling on the wall clock "
                              f"(best median {fastest:.2f}x)")
    return pd.DataFrame(rows)


def best_groups_by_engine(summary: pd.DataFrame) -> pd.DataFrame:
    """best_groups for each engine, with an engine column; exactly one row has criterion "chosen".

    Each engine's own recommendation is criterion "chosen_for_engine"; the overall choice is the
    engine recommendation with the highest CHOICE_CRITERION value, moved to the first row and
    labelled "chosen" (overall_choice True), so a reader that wants one answer finds it as before.
    """
    parts = []
    for (engine, engine_used), rows in summary.groupby(["engine", "engine_used"], sort=False):
        part = best_groups(rows.reset_index(drop=True))
        part.insert(0, "engine_used", engine_used)
        part.insert(0, "engine", engine)
        parts.append(part)
    table = pd.concat(parts, ignore_index=True)
    table.loc[table["criterion"] == "chosen", "criterion"] = "chosen_for_engine"
    candidates = table[table["criterion"] == "chosen_for_engine"]
    overall = candidates["value"].idxmax()
    chosen = table.loc[[overall]].assign(criterion="chosen")
    chosen["reason"] = f"[{chosen['engine'].iloc[0]} engine] " + chosen["reason"]
    table = pd.concat([chosen, table], ignore_index=True)
    table["overall_choice"] = table.index == 0
    return table
