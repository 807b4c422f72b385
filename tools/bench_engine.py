"""Benchmark (not a test): ms per cached forward and per speculative round, eager against compiled variants.

Usage: .venv/bin/python tools/bench_engine.py [--rows 1 2 3 5 9] [--reps 40] [--context 247]
                                              [--variants ...] [--ks 2 4] [--parts forwards calls rounds]
                                              [--out table.parquet]

--out writes the forward table as Parquet with its machine stamp and settings (the call-path and
rounds tables beside it, as <name>-calls.parquet and <name>-rounds.parquet; --parts measures and
writes only those named). The committed
reports/reference/engine-bench.parquet
is what Experiment 1's section quotes and the report's appendix holds; rerun it on a quiet
machine after an engine change.

Random models of the lab's three shapes (ref_baseline d256, c1_dim128, c1_dim64; 4 layers,
vocab 2112) are enough: a forward's time does not depend on the weights. Each forward runs after
`context` cached positions. By default that is the latest start from which every row count writes inside
the same context bucket (core/static_forward.context_bucket), so the row counts compare over one attention
span: from 255, a step attends over 256 slots and every longer forward over 512. Variants are
interleaved rep by rep, so a busy neighbour slows all of them alike; quote same-run ratios, medians
and minima.

Variants of the forward (the compiled ones record what inductor generated, so a variant that
did not reach inductor's C++ GEMM template shows 0 template kernels):
- eager: GPT.forward with the growing cache;
- compiled: the compiled engine, each forward an AOTInductor package (core/packages.py) called through
  the engine's session;
- one_thread, serial_loops (only when named in --variants): the compiled engine with inductor's
  cpp.threads = 1, and with cpp.min_chunk_size = 65536 (small loops run serially), the threads-per-graph
  probes.
The call-path table times the compiled engine's four call paths (a session's step, a fused round,
target-only sampling's step, a round's draft half), each against its package's loader.run on the same
tensors, interleaved call by call: what a path costs over its loader, per call. The torch.compile
engine this replaced was measured once, in
reports/reference/engine-bench-torch-compile.parquet.
Rounds (--ks): one speculative round of target ref_baseline with each draft, as Python over
compiled steps (reference) and as one graph (fused), and the fused target-only step beside them.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import time
from contextlib import ExitStack, contextmanager
from functools import partial
from pathlib import Path

import pandas as pd
import torch

from inferlab.core.config import GPTConfig
from inferlab.core.engine import DEFAULT_INDUCTOR_OPTIONS, EagerEngine, make_engine, own_rows
from inferlab.core.model import GPT
from inferlab.core.static_forward import context_bucket
from inferlab.jobs.machine import machine_stamp
from inferlab.jobs.tables import write_table
from inferlab.speculative.decode import (
    SamplingSettings,
    autoregressive_decode,
    draft_half_call,
    fused_rounds,
    sampled_steps,
    speculative_decode,
)
from inferlab.speculative.forwards import open_sessions_of

MODELS = {"ref_baseline": 256, "c1_dim128": 128, "c1_dim64": 64}
VARIANTS = {
    "eager": ("eager", {}),
    "compiled": ("compiled", {}),
    # threads per graph, measured and not taken (docs/engines.md): each graph's kernels on one thread
    # (blocked for one), and loops too small to split kept serial
    "one_thread": ("compiled", {"threads": 1}),
    "serial_loops": ("compiled", {"inductor_options": {**DEFAULT_INDUCTOR_OPTIONS, "cpp.min_chunk_size": 65536}}),
}
# the committed table's, the compiled engine last: the report quotes the last variant as the engine's
TABLED_VARIANTS = ["eager", "compiled"]


def build_engine(variant: str):
    name, options = VARIANTS[variant]
    return make_engine(name, **options)


def _paired_us(ways: dict, reps: int) -> dict[str, list[float]]:
    """µs per call of each way, called in turn call by call, reps times; the order alternates rep by rep
    (the first call of a pair ran measurably slower than the second, whichever it was)."""
    times: dict[str, list[float]] = {way: [] for way in ways}
    for rep in range(reps):
        for way, call in (list(ways.items()) if rep % 2 == 0 else list(ways.items())[::-1]):
            start = time.perf_counter()
            call()
            times[way].append((time.perf_counter() - start) * 1e6)
    return times


def _median_difference(times: list[float], baseline: list[float]) -> float:
    return statistics.median(a - b for a, b in zip(times, baseline, strict=True))


@contextmanager
def _call_paths(engine, target: GPT, draft: GPT, context: int, k: int):
    """The compiled engine's four call paths after `context` cached positions, each with the loader of the
    package it runs on the same tensors: {path: (the path's call, its loader's call)}."""
    settings = SamplingSettings()
    with torch.no_grad(), ExitStack() as stack:
        target_session, draft_session = stack.enter_context(open_sessions_of(engine, [target, draft], context + k + 1))
        ids = torch.randint(target.config.vocab_size, (1, context + 1))
        for session in (target_session, draft_session):
            session.fill(ids[:, :context])
        token = own_rows(ids[:, context:])
        target_session.step(token, context)  # finds (or builds) its package
        # the package the session's table holds for this step, and its inputs as the session passes them
        step_run = engine.token_steps_of(target, 1)[context][1]
        step_tensors = [token, engine.positions(context, 1, token.device), *target_session.k_caches,
                        *target_session.v_caches]
        rounds = fused_rounds(engine, target_session, draft_session, k, settings)
        rounds.host["last_two"][0], rounds.host["n"][0] = ids[0, context - 2:context].tolist(), context
        steps = sampled_steps(engine, target_session, settings)
        steps.host["token"][0, 0], steps.host["position"][0] = int(token), context
        draft_half = stack.enter_context(draft_half_call(draft, context, k, settings, engine))
        paths = {"step (session.step)": (partial(target_session.step, token, context),
                                            partial(step_run, step_tensors))}
        for path, calls, end in (("round (fused)", rounds, context + k), ("target-only step", steps, context + 1)):
            bound = calls.bind(end)
            paths[path] = (partial(calls, end), partial(bound.package.loader_run, bound.tensors))
        paths["draft half"] = (draft_half, partial(draft_half.package.loader_run, draft_half.tensors))
        yield paths


def call_cost_table(models: dict[str, GPT], context: int, reps: int, k: int = 2,
                    build_dir: str | None = None) -> pd.DataFrame:
    """What each of the compiled engine's four call paths (a session's step, a fused round, target-only
    sampling's step, a round's draft half) costs over its package's loader.run on the same tensors:
    target ref_baseline with each draft, the path and its loader interleaved call by call, with the loader
    a second time beside them. over_loader_us is the median of the per-call differences; the loader against
    itself (loader_over_loader_us) is what that median reads when nothing differs, this run's noise.
    build_dir keeps the packages for the next run."""
    engine = make_engine("compiled", build_dir=build_dir)
    records = []
    for draft_name in ("c1_dim64", "c1_dim128"):
        with _call_paths(engine, models["ref_baseline"], models[draft_name], context, k) as paths:
            for path, (call, loader) in paths.items():
                times = _paired_us({"path": call, "loader": loader, "loader again": loader}, reps)
                records.append({"draft": draft_name, "k": k, "path": path,
                                "path_median_us": statistics.median(times["path"]),
                                "loader_median_us": statistics.median(times["loader"]),
                                "over_loader_us": _median_difference(times["path"], times["loader"]),
                                "loader_over_loader_us": _median_difference(times["loader again"], times["loader"]),
                                "over_loader_min_us": min(times["path"]) - min(times["loader"])})
    table = pd.DataFrame(records)
    print(table.to_string(index=False), flush=True)
    return table


def forward_table(models: dict[str, GPT], variants: list[str], rows: list[int], context: int,
                  reps: int) -> pd.DataFrame:
    engines = {v: build_engine(v) for v in variants}
    records = []
    for model_name, model in models.items():
        ids = torch.randint(model.config.vocab_size, (1, context + max(rows)))
        for n in rows:
            sessions = {}
            for variant, engine in engines.items():
                session = engine.open(model, 1, context + n)
                session.fill(ids[:, :context])
                start = time.perf_counter()
                session.forward(ids[:, context:context + n], context)  # compiles on first use
                sessions[variant] = (session, (time.perf_counter() - start) * 1e3)
            times: dict[str, list[float]] = {v: [] for v in sessions}
            for _ in range(reps):
                for variant, (session, _) in sessions.items():
                    start = time.perf_counter()
                    session.forward(ids[:, context:context + n], context)
                    times[variant].append((time.perf_counter() - start) * 1e3)
            for variant, values in times.items():
                kernels = engines[variant].stamp().get("kernels", {})
                launched = [v for label, v in kernels.items() if f":T{n}:B1:" in label]
                records.append({"model": model_name, "rows": n, "variant": variant,
                                "median_ms": statistics.median(values), "min_ms": min(values),
                                "first_call_ms": sessions[variant][1],
                                "kernel_launches": launched[-1]["kernel_launches"] if launched else None,
                                "cpp_gemm_template": launched[-1]["cpp_gemm_template"] if launched else None,
                                "aten_calls": launched[-1]["aten_calls"] if launched else None})
                sessions[variant][0].close()
            print(pd.DataFrame(records[-len(times):]).to_string(index=False), flush=True)
    return pd.DataFrame(records)


def round_table(models: dict[str, GPT], ks: list[int], reps: int, new_tokens: int = 48) -> pd.DataFrame:
    """ms per emitted token of greedy speculative decoding (a draft equal to nothing in
    particular: random weights, so rounds end early) and of target-only decoding."""
    target = models["ref_baseline"]
    prompt = list(range(1, 9))
    eager, compiled = EagerEngine(), make_engine("compiled")
    records = []
    for draft_name in ("c1_dim64", "c1_dim128"):
        draft = models[draft_name]
        for k in ks:
            # a trace asks for the reference round, so the compiled engine runs it on its steps
            cases = {"eager reference": (eager, False), "compiled reference": (compiled, True),
                     "compiled fused": (compiled, False)}
            times: dict[str, list[float]] = {c: [] for c in cases}
            for rep in range(reps + 1):
                for case, (engine, reference) in cases.items():
                    start = time.perf_counter()
                    result = speculative_decode(target, draft, prompt, new_tokens, k, SamplingSettings(),
                                                torch.Generator().manual_seed(rep), engine=engine,
                                                trace=[] if reference else None)
                    if rep:  # rep 0 compiles
                        times[case].append((time.perf_counter() - start) * 1e3 / new_tokens)
            for case, values in times.items():
                records.append({"draft": draft_name, "k": k, "case": case, "rounds": result.stats.rounds,
                                "median_ms_per_token": statistics.median(values), "min_ms_per_token": min(values)})
    for engine_name, engine in (("eager", eager), ("compiled fused", compiled)):
        values = []
        for rep in range(reps + 1):
            start = time.perf_counter()
            autoregressive_decode(target, prompt, new_tokens, SamplingSettings(), torch.Generator().manual_seed(rep),
                                  engine=engine)
            if rep:
                values.append((time.perf_counter() - start) * 1e3 / new_tokens)
        records.append({"draft": "none (target only)", "k": 0, "case": engine_name, "rounds": new_tokens,
                        "median_ms_per_token": statistics.median(values), "min_ms_per_token": min(values)})
    table = pd.DataFrame(records)
    print(table.to_string(index=False), flush=True)
    print("compile ms:", {label: round(ms) for label, ms in compiled.stamp()["compile_ms"].items()})
    print("kernels:", compiled.stamp()["kernels"])
    return table


def one_bucket_context(rows: list[int], max_seq_len: int) -> int:
    """The latest start whose forwards of every row count attend over one context bucket: the
    bucket a step ending at the middle of the context uses."""
    return context_bucket(max_seq_len // 2, max_seq_len) - max(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 2, 3, 5, 9])
    parser.add_argument("--reps", type=int, default=40)
    parser.add_argument("--context", type=int, help="cached positions before each forward (default: the latest "
                        "from which every row count attends over one context bucket, 247 for up to 9 rows)")
    parser.add_argument("--variants", nargs="+", default=TABLED_VARIANTS, choices=list(VARIANTS))
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--ks", type=int, nargs="*", default=[2, 4])
    parser.add_argument("--round-reps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--parts", nargs="+", default=["forwards", "calls", "rounds"],
                        choices=["forwards", "calls", "rounds"], help="which tables to measure (default: all)")
    parser.add_argument("--out", help="write the forward table here as Parquet, and the others beside it")
    parser.add_argument("--build-dir", help="keep the call paths' packages here, to reuse them in the next run")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    models = {name: GPT(GPTConfig(d_model=MODELS[name], n_layer=4, vocab_size=2112)).eval() for name in MODELS}
    max_seq_len = models["ref_baseline"].config.max_seq_len
    if args.context is None:
        args.context = one_bucket_context(args.rows, max_seq_len)
    spans = sorted({context_bucket(args.context + n, max_seq_len) for n in args.rows})
    if len(spans) > 1:
        print(f"warning: from {args.context} the row counts attend over different spans {spans}: "
              "their ratios mix rows with attention span")
    print(f"threads={torch.get_num_threads()} reps={args.reps} context={args.context}")
    parts = {
        "forwards": lambda: forward_table({m: models[m] for m in args.models}, args.variants, args.rows, args.context,
                                          args.reps),
        "calls": lambda: call_cost_table(models, args.context, 20 * args.reps, build_dir=args.build_dir),
        "rounds": lambda: round_table(models, args.ks, args.round_reps),
    }
    tables = {part: parts[part]() for part in args.parts}
    if args.out:
        out = Path(args.out)
        provenance = {"machine": machine_stamp("cpu"), "measured_at": datetime.datetime.now(datetime.UTC).isoformat(
            timespec="seconds"), "settings": {"rows": args.rows, "reps": args.reps, "context": args.context,
                                              "attention_spans": spans,
                                              "round_reps": args.round_reps, "ks": args.ks,
                                              "weights": "random, the lab's three shapes"}}
        for part, table in tables.items():  # each table stamped with the run that measured it
            write_table(table, out if part == "forwards" else out.with_name(f"{out.stem}-{part}.parquet"),
                        provenance=provenance)

if __name__ == "__main__":
    main()
