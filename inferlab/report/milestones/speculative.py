"""M3, what speculative sampling buys: the chosen draft and k with its reason, per engine, and greedy identity."""

from __future__ import annotations

import pandas as pd

from inferlab.report.inputs import ReportInputError, ReportInputs
from inferlab.report.milestones.common import (
    FAIL,
    PASS,
    Milestone,
    caveats,
    engine_rows,
    engines_in,
    missing_milestone,
)
from inferlab.report.stamp_reader import stamps_for
from inferlab.review.numbers import fmt_number as _fmt
from inferlab.review.numbers import number as _num

# Milestone evidence key -> column of speculative_bench.summarise.
SPEC_EVIDENCE = {
    "alpha": "alpha",
    "measured_yield": "tokens_per_target_forward",
    "formula_E": "formula_tokens_per_target_forward",
    "rel_error": "formula_rel_error",
    "c_time": "c_time",
    "speedup_params": "speedup_theory_params",
    "speedup_time": "speedup_theory_time",
    "wall_speedup": "wall_speedup",
    "wall_speedup_min": "wall_speedup_min",
    "wall_speedup_max": "wall_speedup_max",
}


# A round's wall time split as speculative_summary.round_breakdown writes it.
ROUND_PARTS = ("round_ms", "round_draft_ms", "round_verify_ms", "round_prefill_ms", "round_rest_ms",
               "draft_step_in_round_ms")
# Each step against its bound, as speculative_summary.with_step_bounds writes it.
STEP_BOUNDS = ("target_step_ms", "draft_step_ms", "c_params", "target_step_bound_ms", "draft_step_bound_ms",
               "target_step_over_bound", "draft_step_over_bound", "verify_bound_ratio", "speedup_at_bound")
# How far the machine's speed moved between the group jobs (speculative_summary.with_job_speed_spread).
JOB_SPEED = ("job_speed_spread", "job_speeds_differ")

# The engine's target: on the compiled engine, whose rounds are one graph each, the fastest group
# beats compiled target-only sampling by this on the wall clock.
COMPILED_WALL_TARGET = 1.2
# ... and a (k+1)-token verification costs at most this many single steps, for every k up to VERIFY_TARGET_MAX_K.
COMPILED_VERIFY_TARGET, VERIFY_TARGET_MAX_K = 1.3, 4
# ... and the smallest draft's step costs at most this fraction of a target step (c by time), in every group,
COMPILED_DRAFT_C_TARGET = 0.15
# ... and the packages a group runs take no longer than this to compile (the compile rules' time for each).
COMPILE_TARGET_S = 120.0


def _steps(k: int, in_one_graph: bool) -> str:
    steps = "1 draft step" if k == 1 else f"{k} draft steps"
    return f"{steps} as one graph" if in_one_graph else steps


def _rest(rest_ms: float) -> str:
    """What a round costs beyond its calls timed one by one: on an engine that runs the round as
    one graph it can cost less than those calls made separately (each pays a call's fixed cost)."""
    if rest_ms >= 0:
        return f"and the rest (accept rule, sampling, the cost of each call) +{rest_ms:.2f}"
    return f"and the round as one graph costs {-rest_ms:.2f} ms less than those calls made one by one"


def _form_clause(form: str) -> str:
    """Which rounds the marginal draft step was fitted over, by the form of their draft's projections."""
    return f", whose rounds run the draft's projections as {form}" if form else ""


def _bound_clause(rows: pd.DataFrame, draft: str) -> str:
    """How far the target's step and the draft's are from their bounds (weights and cache read once at
    the probe's bandwidth): the draft's step far above its own is a call's fixed cost, which is why
    c by time stays well above c by parameters. Where the round runs its drafts as one graph, what one
    more draft step adds there, with no call of its own, within the rounds whose draft projections take
    the same form (speculative_summary.with_marginal_draft_step)."""
    row = rows[rows["draft"] == draft].iloc[0]
    text = (f"; a target step takes {row['target_step_ms']:.3f} ms, {row['target_step_over_bound']:.1f}x its bound "
            f"({row['target_step_bound_ms']:.3f} ms), a {draft} step {row['draft_step_ms']:.3f} ms, "
            f"{row['draft_step_over_bound']:.1f}x its bound ({row['draft_step_bound_ms']:.3f} ms), so c by time "
            f"{row['c_time']:.3f} against {row['c_params']:.3f} by parameters")
    if bool(row["drafts_in_one_graph"]) and pd.notna(row["draft_step_marginal_ms"]):
        text += (f"; inside a round's graph, where no draft step is a call of its own, each further {draft} step "
                 f"adds {row['draft_step_marginal_ms']:.3f} ms (c {row['c_time_marginal']:.3f}; the slope over "
                 f"k = {row['draft_step_marginal_ks'].replace(',', ', ')}{_form_clause(row['draft_form'])})")
    return text


def _roofline(rows: pd.DataFrame, picks: pd.DataFrame) -> tuple[dict, str, str]:
    """What the roofline leaves the rounds (speculative_summary.with_step_bounds): the verification's
    bound in steps at their bound, per k, and the best group with every forward at its bound (the
    producer's "speedup_at_bound" criterion). Returns the evidence and the two clauses."""
    by_k = rows.groupby("k")["verify_bound_ratio"].first().astype(float)
    pick = picks[picks["criterion"] == "speedup_at_bound"].iloc[0]
    ev = {"verify_bound_ratio_by_k": {int(k): float(r) for k, r in by_k.items()},
          "speedup_at_bound": float(pick["value"]), "speedup_at_bound_group": f"{pick['draft']} k={int(pick['k'])}"}
    verify = (f" (at this machine's roofline {'/'.join(f'{r:.2f}' for r in by_k)} steps at k = "
              f"{'/'.join(str(int(k)) for k in by_k.index)}: its weights are read once, but its arithmetic grows "
              "with k + 1)")
    best = (f"; with every forward at its bound the best group, {ev['speedup_at_bound_group']}, would run at "
            f"{ev['speedup_at_bound']:.2f}x")
    return ev, verify, best


def _verify_target(rows: pd.DataFrame, bound_ratio_by_k: pd.Series) -> tuple[dict, str]:
    """The compiled engine's verification target, per k up to VERIFY_TARGET_MAX_K (every group of that k
    must meet it), and the k at which the roofline itself puts a verification above it: there an engine
    whose every forward ran at its bound would miss it on this machine (a step far above its bound can
    still meet it, its fixed cost being paid once by a verification too). bound_ratio_by_k: k -> the
    verification's bound in steps at their bound, as _roofline reads it."""
    worst = rows[rows["k"] <= VERIFY_TARGET_MAX_K].groupby("k")["verify_cost_ratio"].max().astype(float)
    at_bound = bound_ratio_by_k[bound_ratio_by_k.index <= VERIFY_TARGET_MAX_K]
    unmet = [int(k) for k, ratio in worst.items() if ratio > COMPILED_VERIFY_TARGET]
    beyond = [int(k) for k, ratio in at_bound.items() if ratio > COMPILED_VERIFY_TARGET]
    ev = {"verify_target_met": not unmet, "verify_target_unmet_k": unmet, "verify_target_beyond_roofline_k": beyond,
          "verify_worst_by_k": {int(k): float(ratio) for k, ratio in worst.items()}}
    text = f"; the verification target (at most {COMPILED_VERIFY_TARGET:.2f} steps for k <= {VERIFY_TARGET_MAX_K}) is "
    text += ("met" if not unmet else "not met at k = " + ", ".join(f"{k} ({worst[k]:.2f})" for k in unmet))
    if beyond:
        text += (", and an engine at this machine's roofline would miss it at k = "
                 + ", ".join(f"{k} ({at_bound[k]:.2f} steps)" for k in beyond))
    return ev, text


def _draft_and_compile_targets(rows: pd.DataFrame) -> tuple[dict, str]:
    """The compiled engine's two remaining targets: c by time of the smallest draft (fewest parameters) in
    every group, as a call of its own and inside a round's graph, and each group job's compile time."""
    smallest = rows.loc[rows["c_params"].astype(float).idxmin(), "draft"]
    own = rows[rows["draft"] == smallest]
    c_call, c_round = own["c_time"].astype(float), own["c_time_in_round"].astype(float)
    compile_s = rows["compile_s"].astype(float)
    slowest = rows.loc[compile_s.idxmax()]
    ev = {"draft_c_target_met": bool(c_call.max() <= COMPILED_DRAFT_C_TARGET), "draft_c_draft": str(smallest),
          "draft_c_range": [float(c_call.min()), float(c_call.max())],
          "draft_c_in_round_range": [float(c_round.min()), float(c_round.max())],
          "draft_c_at_bound": float(own["draft_step_bound_ms"].iloc[0] / own["target_step_bound_ms"].iloc[0]),
          "compile_s_min": float(compile_s.min()), "compile_s_max": float(slowest["compile_s"]),
          "compile_longest_group": f"{slowest['draft']} k={int(slowest['k'])}",
          "compile_packages": int(slowest["packages"])}
    ev["compile_target_met"] = bool(slowest["compile_s"] <= COMPILE_TARGET_S)
    compile_text = ("met" if ev["compile_target_met"] else "not met") + (
        f" (longest {ev['compile_longest_group']}, {ev['compile_s_max']:.0f} s over its {ev['compile_packages']} "
        "packages, built by the compile rules)")
    text = (f"; the draft-cost target (c by time at most {COMPILED_DRAFT_C_TARGET:.2f} for {smallest}) is "
            + ("met" if ev["draft_c_target_met"] else "not met")
            + f" (c {c_call.min():.2f}-{c_call.max():.2f} as a call of its own, "
            f"{c_round.min():.2f}-{c_round.max():.2f} inside a round's graph)"
            f"; the compile-time target (at most {COMPILE_TARGET_S:.0f} s for a group's packages) is {compile_text}")
    return ev, text


def _group(summary: pd.DataFrame, draft, k) -> pd.Series | None:
    match = summary[(summary["draft"] == draft) & (summary["k"] == k)]
    return match.iloc[0] if len(match) else None


def _engine_spec(summary: pd.DataFrame, best: pd.DataFrame, engine: str) -> tuple[dict, str]:
    """One engine's evidence and sentence: c per draft, its own best (draft, k), the wall clock."""
    rows = engine_rows(summary, engine)
    picks = engine_rows(best, engine)
    pick = picks[picks["criterion"].isin(["chosen_for_engine", "chosen"])].iloc[0]
    top = _group(rows, pick["draft"], pick["k"])
    c_by_draft = {str(d): float(g["c_time"].iloc[0]) for d, g in rows.groupby("draft", sort=False)}
    # the fastest group on the wall clock is the producer's "wall_speedup" criterion (best_groups)
    wall_pick = picks[picks["criterion"] == "wall_speedup"].iloc[0]
    fastest = _group(rows, wall_pick["draft"], wall_pick["k"])
    ev = {"best_draft": str(pick["draft"]), "best_k": int(pick["k"]), "c_time_by_draft": c_by_draft,
          "best_wall_speedup": float(fastest["wall_speedup"]),
          "best_wall_group": f"{fastest['draft']} k={int(fastest['k'])}"}
    if top is not None:
        ev.update({"speedup_time": _num(top["speedup_theory_time"]), "wall_speedup": _num(top["wall_speedup"]),
                   "alpha": _num(top["alpha"])})
    verify = rows["verify_cost_ratio"].astype(float)
    ev.update({"verify_cost_ratio_min": float(verify.min()), "verify_cost_ratio_max": float(verify.max()),
               **{key: float(fastest[key]) for key in (*ROUND_PARTS, "wall_speedup_without_prefill")}})
    # three sentences: the outcome, why (c from each step against its bound), where a round's time goes
    text = (f"{engine}: best {pick['draft']} k={int(pick['k'])}, theoretical {_fmt(ev.get('speedup_time'), 2)}x, "
            f"wall clock {_fmt(ev.get('wall_speedup'), 2)}x against target-only sampling timed interleaved with it")
    if engine == "compiled":
        met = ev["best_wall_speedup"] >= COMPILED_WALL_TARGET
        ev["compiled_target_met"] = met
        text += (f"; the {COMPILED_WALL_TARGET:.2f}x compiled target is " + ("met" if met else "not met")
                 + f" (fastest group on the wall clock: {ev['best_wall_group']} at {ev['best_wall_speedup']:.2f}x)")
    text += (". Why: c by time " + ", ".join(f"{d} {c:.3f}" for d, c in c_by_draft.items())
             + _bound_clause(rows, str(fastest["draft"])))
    roofline, verify_at_bound, at_bound = _roofline(rows, picks)
    ev.update(roofline)
    text += (f". A (k+1)-token verification costs {verify.min():.2f}-{verify.max():.2f} single steps"
             f"{verify_at_bound}, and "
             f"a round of {ev['best_wall_group']} takes {ev['round_ms']:.2f} ms: "
             f"{_steps(int(fastest['k']), bool(fastest['drafts_in_one_graph']))} "
             f"{ev['round_draft_ms']:.2f}, the verification {ev['round_verify_ms']:.2f}, its share of the prompts' "
             f"prefill (both models) {ev['round_prefill_ms']:.2f}, " + _rest(ev['round_rest_ms'])
             + f"; without each decoder's prefill, its rounds run at {ev['wall_speedup_without_prefill']:.2f}x "
             "target-only's steps")
    text += at_bound
    if engine == "compiled":
        target, clause = _verify_target(rows, pd.Series(roofline["verify_bound_ratio_by_k"]))
        ev.update(target)
        text += clause
        targets, clause = _draft_and_compile_targets(rows)
        ev.update(targets)
        text += clause
    if ev["best_wall_speedup"] < 1.0:
        text += (f"; no group beats target-only on the wall clock (best {ev['best_wall_speedup']:.2f}x, "
                 f"{ev['best_wall_group']}: alpha {float(fastest['alpha']):.3f}, c {float(fastest['c_time']):.3f})")
    ev["job_speed_spread"] = float(rows["job_speed_spread"].iloc[0])
    if bool(rows["job_speeds_differ"].iloc[0]):
        steps = rows["target_step_ms"].astype(float)
        text += (f"; the group jobs ran at different machine speeds (their own target step {steps.min():.3f}-"
                 f"{steps.max():.3f} ms): each ratio above is taken within one job, but their milliseconds "
                 "do not compare")
    return ev, text


def check_m3(data: ReportInputs, machine_fallback: dict | None = None) -> Milestone:
    title = "M3 Speculative: chosen draft and k with reason, greedy identity in every case"
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
    absent = missing_milestone(data, "M3", title, stamps)
    if absent is not None:
        return absent
    summary = data.require("spec_summary", "draft", "k", "verify_cost_ratio", "c_time_in_round", "compile_s",
                           "packages",
                           *ROUND_PARTS, *STEP_BOUNDS,
                           *JOB_SPEED, *SPEC_EVIDENCE.values())
    ident = data.require("spec_identity", "identical")
    best = data.require("spec_best", "criterion", "draft", "k", "reason")
    chosen = best[best["criterion"] == "chosen"]
    if chosen.empty:
        raise ReportInputError(f"{data.paths.get('spec_best', 'spec_best')} has no row with criterion 'chosen'")
    row = chosen.iloc[0]
    # the choice row, enriched with the summary's numbers for that group (on the choice's engine)
    match = _group(engine_rows(summary, row["engine"]), row["draft"], row["k"])
    if match is not None:
        row = pd.concat([match, row[~row.index.isin(match.index)]])
    identical = ident["identical"]
    n_ok, n_all = int(identical.astype(bool).sum()), int(len(identical))
    ev = {"draft": str(row["draft"]), "k": int(row["k"]), "greedy_identical": n_ok, "greedy_cases": n_all}
    ev["engine"] = str(row["engine"])
    for key, column in SPEC_EVIDENCE.items():
        if column in row.index and _num(row[column]) is not None:
            ev[key] = float(row[column])
    reason = str(row["reason"])  # speculative_bench.best_groups' own sentence
    ev["reason"] = reason
    engines = engines_in(summary)
    per_engine = {}
    texts = []
    for engine in engines:
        per_engine[engine], text = _engine_spec(summary, best, engine)
        texts.append(text)
    ev["engines"] = per_engine
    problems = []
    if n_ok != n_all or n_all == 0:
        problems.append(f"greedy speculative output differs from target greedy in {n_all - n_ok} of {n_all} cases")
    verdict = (f"Chosen: draft {ev['draft']}, k = {ev['k']}; {reason}.\n\nPer engine:\n"
               + "".join(f"- {text}.\n" for text in texts) + f"\nGreedy identity {n_ok}/{n_all}.")
    verdict += caveats(data, stamps, "spec_summary")
    if problems:
        verdict += " Failed: " + "; ".join(problems) + "."
    seed_sp = data.seed_reference.get("speculative", {})
    walls = ", ".join(f"{e} {v['best_wall_speedup']:.2f}x" for e, v in per_engine.items())
    headline = (f"Speculative: {ev['draft']} k={ev['k']}, best wall clock {walls}, greedy identical {n_ok}/{n_all} "
                f"(seed page: {seed_sp.get('best_by_params', {}).get('draft')} "
                f"k={seed_sp.get('best_by_params', {}).get('k')} by parameters, wall clock "
                f"{seed_sp.get('wall_clock')})"
                + ("; timings contended" if stamps.get("contended") else "") + ".")
    return Milestone("M3", title, FAIL if problems else PASS, verdict, ev, stamps, [], problems, headline)
