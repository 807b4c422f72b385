"""Experiment 1 and the roofline, as the report and the review read them."""

from __future__ import annotations

from inferlab.spec import EXACT, REP_RANGE, Export, Figure, Metric, Spec, Table, theirs

# The headers of the columns the report computes for Experiment 1's compact table (in no Parquet table).
GENERATED_TOKENS = "generated tokens"
FLOP_ESTIMATE = "FLOP estimate (×)"
SEED_CPU_RATIO = theirs("CPU") + " (×)"

_TIMED = {"noise": REP_RANGE, "timing": True}

SPEC = Spec(
    name="kvcache",
    tables=(
        Table("kv_timings", "kvcache_summary", "timings", "KV cache: every timed generation",
              reads=("engine", "same_output"), reads_if_present=("contended", "eager_calls"), timed=True),
        Table("kv_summary", "kvcache_summary", "summary", "KV cache: timings per engine, length and mode",
              reads=("engine", "length", "mode", "speed_ratio", "speed_ratio_min", "speed_ratio_max",
                     "ms_per_token_median"), reads_if_present=("engine_used", "contended"), timed=True),
        Table("kv_fit", "kvcache_summary", "fit", "KV cache: fit of the step time a + b·positions",
              reads=("engine", "length", "flop_estimate_ratio", "a_ms", "predicted_ratio"),
              reads_if_present=("contended",), timed=True),
        Table("kv_steps", "kvcache_steps", "steps", "KV cache: step-time probes", reads_if_present=("contended",),
              timed=True),
        Table("kv_profile", "kvcache_steps", "profile", "KV cache: torch.profiler operators",
              reads_if_present=("contended",), timed=True),
        Table("roofline_probe", "roofline_probe", 0, "Roofline: this machine's probe"),
        Table("roofline", "roofline", 0, "Roofline: anchor and our model",
              reads=("subject", "engine", "lower_bound_ms_per_token")),
        # measured outside the DAG on a quiet machine and committed; the report quotes it with its own stamp
        Table("engine_bench", None, "reports/reference/engine-bench.parquet",
              "Engine variants: ms per cached forward by model, rows and variant "
              "(tools/bench_engine.py, not this run)"),
        Table("engine_calls", None, "reports/reference/engine-bench-calls.parquet",
              "Engine call paths: µs per call over the package's own loader (tools/bench_engine.py, not this run)"),
    ),
    metrics=(
        Metric("speed_ratio", "kv_summary", "speed_ratio", "{length}", "x",
               bounds=("speed_ratio_min", "speed_ratio_max"), reps="reps", higher_is_better=True, once_per_key=True,
               **_TIMED),
        Metric("ms_per_token", "kv_summary", "ms_per_token_median", "{length} {mode}", "ms/token",
               bounds=("ms_per_token_min", "ms_per_token_max"), reps="reps", higher_is_better=False, **_TIMED),
        Metric("fit_a_ms", "kv_fit", "a_ms", "uncached step", "ms", once_per_key=True, **_TIMED),
        Metric("fit_b_ms_per_position", "kv_fit", "b_ms_per_position", "uncached step", "ms/position",
               once_per_key=True, **_TIMED),
        Metric("predicted_ratio", "kv_fit", "predicted_ratio", "{length}", "x", higher_is_better=True, **_TIMED),
        Metric("lower_bound_ms_per_token", "roofline", "lower_bound_ms_per_token", "{model}", "ms/token",
               where=("subject", "ours"), higher_is_better=False, experiment="roofline", **_TIMED),
        Metric("measured_over_bound", "roofline", "measured_over_bound", "{model}", "x", where=("subject", "ours"),
               higher_is_better=False, experiment="roofline", **_TIMED),
        Metric("lower_bound_ms_per_token", "roofline", "lower_bound_ms_per_token", "{model} ctx={context_tokens:.0f}",
               "ms/token", EXACT, where=("subject", "anchor"), higher_is_better=False, experiment="roofline"),
    ),
    columns={
        "ms_per_token": "ms/token", "ms_per_token_median": "ms/token (median)", "ms_per_token_min": "ms/token (min)",
        "ms_per_token_max": "ms/token (max)", "total_ms_median": "total ms (median)", "ratio": "ratio (×)",
        "ratio_min": "ratio min (×)", "ratio_max": "ratio max (×)", "a_ms": "fixed cost a (ms)",
        "a_cache_ms": "cached step a (ms)", "b_ms_per_position": "per-position cost b (ms)", "r2": "R²",
        "predicted_ratio": "predicted ratio (×)", "prediction_error": "prediction error",
        "fixed_share_no_cache": "fixed share, no cache", "flop_estimate_ratio": "FLOP-estimate ratio (×)",
        "kv_bytes_per_token": "KV bytes/token", "bytes_per_token": "bytes/token",
        "lower_bound_ms_per_token": "lower bound (ms/token)", "memory_bound_ms_per_token": "memory bound (ms/token)",
        "compute_bound_ms_per_token": "compute bound (ms/token)", "measured_over_bound": "measured / bound (×)",
        "upper_bound_tokens_per_s": "upper bound (tokens/s)", "limited_by": "limited by", "op_ms": "operator ms",
        "op_ms_per_step": "operator ms/step", "op_share": "share of step",
        "split_step_ms": "step with kernel events (ms)", "entry_ms": "Python around the package's call (ms)",
        "graph_code_ms": "package code between kernels (ms)", "kernel_ms": "kernels (ms)", "kernel_events": "kernels",
        "same_output_all": "same output (all reruns)", "length": "length (tokens)",
        "context_tokens": "context (tokens)",
        "mode": "mode", "speed_ratio": "speed ratio (×)", "fit_a_ms": "fit: fixed cost a (ms)",
        "fit_b_ms_per_position": "fit: per-position cost b (ms)",
        "eager_calls": "eager calls (forwards run op by op)",
        "eager_calls_steps": "eager calls in the step probes",
    },
    figures={"kvcache_ratio": Figure(
        "KV cache: speed ratio vs generated length", "1 KV cache",
        caption=("One panel per engine, eager first: no-cache / cache generation time per generated length (both axes "
                 "logarithmic), measured (median of paired reps, min-max), predicted from the fit a + b·positions of "
                 "the no-cache step, and the FLOP estimate; the seed page's CPU ratio at 256 tokens (their machine) "
                 "as a cross on the eager panel when our lengths reach 256."),
        draw="inferlab.report.figures:kvcache_ratio")},
    exports=(Export("inference", "kvcache", {"timings": "kv_timings", "summary": "kv_summary", "fit": "kv_fit",
                                             "profile": "kv_profile", "roofline": "roofline"}),),
    milestone="M1",
    milestone_title="KV cache: speed ratio at the longest length, same output, explanation",
    required=("kv_timings", "kv_summary", "kv_fit", "kv_profile"),
    optional=("roofline", "kv_steps"),
    reviewed=("kvcache", "roofline"),
    body_needs=("kv_timings", "kv_summary"),
    overlay=("speed_ratio", "KV cache: no-cache / cache time, by length"),
)
