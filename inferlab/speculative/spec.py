"""Experiment 3, speculative sampling, as the report and the review read them."""

from __future__ import annotations

from inferlab.spec import REP_RANGE, Export, Figure, Metric, Spec, Table

GROUP = "{draft} k={k:.0f}"
# Counter-derived numbers repeat exactly under the same seeds; the rest come from forward timings.
_EXACT = (("alpha", ""), ("tokens_per_target_forward", "tokens/forward"),
          ("formula_tokens_per_target_forward", "tokens/forward"), ("speedup_theory_params", "x"))
_TIMED = ("speedup_theory_time", "speedup_forward_model", "speedup_at_bound")

SPEC = Spec(
    name="speculative",
    tables=(
        # speculative_summary: summarise, with_step_bounds, with_compile_seconds, with_job_speed_spread; M3
        # reads these, a round's accounting and each step against its bound are in the appendix's table
        Table("spec_summary", "speculative_summary", "summary", "Speculative: every (engine, draft, k) group",
              reads=("engine", "draft", "k", "alpha", "tokens_per_target_forward", "formula_tokens_per_target_forward",
                     "c_time", "speedup_theory_params", "speedup_theory_time", "wall_speedup", "verify_cost_ratio",
                     "c_time_in_round", "compile_s", "packages", "target_step_ms", "c_params",
                     "target_step_bound_ms", "draft_step_bound_ms", "verify_bound_ratio", "job_speeds_differ"),
              reads_if_present=("contended", "eager_calls"), timed=True),
        Table("spec_best", "speculative_summary", "best", "Speculative: best group per criterion",
              reads=("engine", "criterion", "draft", "k", "value", "reason")),
        Table("spec_identity", "speculative_summary", "greedy", "Speculative: greedy identity per case",
              reads=("identical",)),
    ),
    metrics=(
        *(Metric(name, "spec_summary", name, GROUP, unit, higher_is_better=True) for name, unit in _EXACT),
        *(Metric(name, "spec_summary", name, GROUP, "x", REP_RANGE, timing=True, higher_is_better=True)
          for name in _TIMED),
        Metric("wall_speedup", "spec_summary", "wall_speedup", GROUP, "x", REP_RANGE, timing=True,
               higher_is_better=True, bounds=("wall_speedup_min", "wall_speedup_max"), reps="timing_reps"),
        # the recommended (draft, k): the text is the group, the value the criterion's
        Metric("chosen_group", "spec_best", "value", "{column}", noise=REP_RANGE, timing=True,
               where=("criterion", "chosen"), text=GROUP, by_engine=False),
    ),
    columns={
        "draft": "draft model", "k": "k (drafted tokens)", "identical": "identical", "cases": "cases",
        "alpha": "α (acceptance)", "c_params": "c (params ratio)", "c_time": "c (time ratio)",
        "accepted": "accepted", "proposed": "proposed", "target_forwards": "target forwards",
        "tokens_per_target_forward": "tokens/target forward",
        "formula_tokens_per_target_forward": "tokens/target forward (formula)", "formula_rel_error": "formula error",
        "speedup_theory_params": "speedup, theory by params (×)", "speedup_theory_time": "speedup, theory by time (×)",
        "speedup_forward_model": "speedup, forward model (×)",
        "wall_speedup": "wall-clock speedup (×)", "wall_speedup_min": "wall-clock speedup min (×)",
        "wall_speedup_max": "wall-clock speedup max (×)", "wall_ms": "wall ms", "overlap_mean": "overlap (mean)",
        "verify_cost_ratio": "verification cost (steps)", "round_ms": "ms per round",
        "round_draft_ms": "draft steps (ms/round)", "round_verify_ms": "verification (ms/round)",
        "round_prefill_ms": "prefill per round (ms)", "round_rest_ms": "rest of a round (ms)",
        "draft_step_in_round_ms": "draft step in a round (ms)",
        "wall_speedup_without_prefill": "wall-clock speedup, rounds alone (×)",
        "c_time_in_round": "c in a round (time ratio)", "drafts_in_one_graph": "drafts as one graph",
        "speedup_at_bound": "speedup at the roofline (×)", "verify_bound_ratio": "verification at the bound (steps)",
        "runner_up_draft": "runner-up draft", "runner_up_k": "runner-up k", "runner_up_value": "runner-up value",
        "chosen_group": "chosen group", "eager_calls": "eager calls (forwards run op by op)",
    },
    figures={"speculative_yield": Figure(
        "Speculative: yield per round and wall-clock speedup, measured vs formula", "3 Speculative",
        caption=("Small multiples, one colour per draft. First panel: measured tokens per target forward (dots) "
                 "against the formula E = (1 - alpha^(k+1)) / (1 - alpha) (dashed), per k, on the first engine (the "
                 "yield does not depend on the engine). Then one panel per engine: the measured wall-clock speedup "
                 "over target-only sampling (dots) against the theoretical speedup with c by parameters (dashed) and "
                 "against the forward model with every forward at its roofline bound (dotted, 'at the roofline'); "
                 "the line at 1× is break-even."),
        draw="inferlab.report.figures:speculative_yield")},
    exports=(Export("precomputed", "speculative", {"summary": "spec_summary", "greedy_identity": "spec_identity",
                                                   "best": "spec_best"}),),
    milestone="M3",
    milestone_title="Speculative: chosen draft and k with reason, greedy identity in every case",
    required=("spec_summary", "spec_identity", "spec_best"),
    reviewed=("speculative",),
    # read on the first engine (acceptance and yield do not depend on it), then the wall clock per engine
    body=("draft", "k", "alpha", "tokens_per_target_forward", "formula_tokens_per_target_forward",
          "speedup_theory_params"),
    body_needs=("spec_summary",),
)
