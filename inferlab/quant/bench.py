"""Experiment 4 as jobs: one scheme's quality (and speed where a kernel exists); the summary and
the choice are in inferlab.quant.choice.

A scheme job quantises the target, evaluates fp32 and quantised weights on the full validation
split in the same process with the same code (evaluate_loss), and, where the scheme's integer
layout has a low-bit kernel available on the device, times cached greedy decode of the kernel
model against the fp32 model, interleaved rep by rep.
"""

from __future__ import annotations

import math
import statistics
import time
from pathlib import Path
from typing import TextIO

import torch
from torch import nn

from inferlab.core.engine import EagerEngine, Engine, make_engine
from inferlab.core.engine_rows import eager_call_counter
from inferlab.core.evaluation import evaluate_against_reference
from inferlab.core.generate import decode_after_prompt
from inferlab.core.timing import timed_ms
from inferlab.quant import kernels as quant_kernels
from inferlab.quant import methods as quant
from inferlab.quant.gptq import calibration_windows
from inferlab.quant.schemes import QUALITY_ONLY

BASELINE = "fp32 weights of the same checkpoint, evaluated in the same job with the same code"
GPTQ_KEYS = ("calibration_windows", "damp", "block_size", "seed")  # config quantization.gptq

# The low-bit kernels are library ops (int4pack and int8 weight-only matmuls) for which autotuning
# restricted to the C++ GEMM template has no choice. Here the fp32 model and every kernel model
# are packaged with frozen weights and inductor's default lowering, so each speed ratio compares like
# with like; the workflow builds fp32's packages once and each kernel model's in its own compile job
# (rule compile_quant).
KERNEL_INDUCTOR_OPTIONS: dict = {}


def speed_status(scheme: quant.Scheme, device: str) -> tuple[str, bool]:
    """What the speed columns mean for this scheme, and whether a measurement is made."""
    if scheme.kernel is None:
        return f"{QUALITY_ONLY}: no low-bit matmul kernel for this layout", False
    kernel = quant_kernels.KERNELS[scheme.kernel]
    if not kernel.available(device):
        return f"{QUALITY_ONLY}: kernel {kernel.name} not available on {device}", False
    return f"measured: {kernel.description}", True


def run_scheme(reference: nn.Module, scheme_name: str, val_ids: torch.Tensor, train_ids: torch.Tensor,
               seq_len: int, prompt: torch.Tensor, new_tokens: int, reps: int,
               gptq: dict | None = None, device: str = "cpu", batch_size: int = 16,
               progress_file: TextIO | None = None, engines: tuple[str, ...] = ("eager",),
               graph_dirs: tuple[Path, ...] = ()) -> dict:
    """One row: quality against fp32, storage, and speed if measurable.

    The verdict against the noise floor is quant_summary's (choice.summary_table), so that a change
    of the floor re-decides every scheme without re-running any.

    gptq: config's quantization.gptq {calibration_windows, damp, block_size, seed}; required by
    methods that calibrate, which take no defaults of their own.
    engines: the decode engines the speed is timed on; eager's columns have no suffix, every other
    engine's columns end in _<engine> (fp32 and kernel model always on the same engine). Among them
    eager_calls (eager_calls_compiled, ...): the forwards of that engine's timed decodes that ran eagerly.
    graph_dirs: where the compiled engine finds the packages of fp32 and the kernel model
    (build_speed_graphs); with none it compiles them itself, in a directory of its own.
    """
    scheme = quant.get_scheme(scheme_name)
    layers = quant.quantized_linears(reference)
    shapes = [tuple(linear.weight.shape) for _, linear in layers]
    quantised_params = sum(n * k for n, k in shapes)
    start = time.perf_counter()
    quantised, result = quantize(reference, scheme_name, train_ids, seq_len, gptq, progress_file)
    quantize_s = time.perf_counter() - start
    n_calibration = int(gptq["calibration_windows"]) if scheme.method == "gptq" else 0
    quality = evaluate_against_reference(reference, quantised, val_ids, seq_len, batch_size,
                                               progress_file=progress_file)
    status, measurable = speed_status(scheme, device)
    speed = {f"{column}{engine_suffix(name)}": math.nan for name in engines for column in SPEED_COLUMNS}
    speed |= {f"{column}{engine_suffix(name)}": "" for name in engines
              for column in ("engine_used", "engine_fallback_reason")}
    speed["kernel_max_rel_err"] = math.nan
    if measurable:
        fast = quant_kernels.kernel_model(quantised, result, scheme_name)
        for name in engines:
            engine = make_engine(name, inductor_options=KERNEL_INDUCTOR_OPTIONS, graph_dirs=graph_dirs)
            measured = measure_decode_speed(reference, fast, prompt, new_tokens, reps, engine)
            speed |= {f"{column}{engine_suffix(name)}": measured[column] for column in SPEED_COLUMNS}
            speed[f"engine_used{engine_suffix(name)}"] = engine.engine_used
            # why a compiled row ran eager (its compile rule's unavailable.txt), as every other timing table says
            speed[f"engine_fallback_reason{engine_suffix(name)}"] = engine.engine_fallback_reason or ""
        speed["kernel_max_rel_err"] = quant_kernels.kernel_max_rel_error(quantised, fast)
    return {
        "scheme": scheme.name, "method": scheme.method, "bits": scheme.bits,
        "granularity": scheme.granularity, "group_size": scheme.group_size or 0,
        "symmetric": scheme.symmetric,
        "quantized_layers": len(layers), "quantized_params": quantised_params,
        "fp32_params": sum(p.numel() for p in reference.parameters()) - quantised_params,
        "embedding": quant.EMBEDDING_NOTE,
        "effective_bits_per_weight": quant.effective_bits_per_weight(scheme, shapes),
        "scale_storage": "none" if scheme.granularity == "none" else f"{quant.SCALE_BITS}-bit float",
        "zero_storage": "none" if scheme.symmetric else f"{scheme.bits}-bit integer",
        "seq_len": seq_len, "eval_tokens": quality["eval_tokens"],
        "loss": quality["loss"], "fp32_loss": quality["fp32_loss"], "delta_loss": quality["delta_loss"],
        "kl_mean_nats": quality["kl_mean_nats"], "top1_agreement": quality["top1_agreement"],
        "calibration_windows": n_calibration, "quantize_s": quantize_s,
        "kernel": scheme.kernel or "none", "speed_status": status,
        "speed_reps": reps if measurable else 0, "speed_new_tokens": new_tokens if measurable else 0,
        **speed,
    }


def quantize(reference: nn.Module, scheme_name: str, train_ids: torch.Tensor, seq_len: int,
             gptq: dict | None, progress_file: TextIO | None = None) -> tuple[nn.Module, quant.QuantResult]:
    """The scheme applied to reference: (model with dequantised weights, the integer layout). A
    calibrating method reads its settings (config quantization.gptq) and its windows of train_ids."""
    if quant.get_scheme(scheme_name).method != "gptq":
        return quant.quantize_model(reference, scheme_name)
    absent = [key for key in GPTQ_KEYS if key not in (gptq or {})]
    if absent:
        raise ValueError(f"{scheme_name}: GPTQ settings {absent} missing (config quantization.gptq)")
    windows = calibration_windows(train_ids, int(gptq["calibration_windows"]), seq_len, int(gptq["seed"]))
    return quant.quantize_model(reference, scheme_name, calibration=windows, damp=float(gptq["damp"]),
                                block_size=int(gptq["block_size"]), progress_file=progress_file)


def build_speed_graphs(reference: nn.Module, scheme_name: str | None, train_ids: torch.Tensor, seq_len: int,
                       prompt: torch.Tensor, new_tokens: int, gptq: dict | None, engine: Engine,
                       device: str = "cpu") -> None:
    """Runs once on a building engine the decode a scheme job times: fp32's (scheme_name None) or the
    scheme's kernel model's, whose weights equal the scheme job's only where both quantise with the same
    thread count (GPTQ's matmuls sum in an order that depends on it)."""
    model = reference
    if scheme_name is not None:
        if not speed_status(quant.get_scheme(scheme_name), device)[1]:
            return
        quantised, result = quantize(reference, scheme_name, train_ids, seq_len, gptq)
        model = quant_kernels.kernel_model(quantised, result, scheme_name)
    time_decode(model, prompt, new_tokens, engine)


# eager_calls: the model forwards of the timed decodes (fp32's and the kernel model's) that ran eagerly
SPEED_COLUMNS = ("fp32_ms_per_token", "ms_per_token", "speedup_vs_fp32", "greedy_agreement_vs_fp32", "eager_calls")


def engine_suffix(engine_name: str) -> str:
    """Column suffix of an engine's speed figures: none for the eager baseline engine."""
    return "" if engine_name == "eager" else f"_{engine_name}"


def time_decode(model: nn.Module, prompt: torch.Tensor, new_tokens: int,
                engine: Engine | None = None) -> tuple[float, torch.Tensor]:
    """Wall ms per new token of a cached greedy decode, and its tokens. The prompt but its last token is
    cached first, untimed (session.fill); each new token is then one timed step (decode_after_prompt), so
    that the figure is the decode's speed, and the compiled engine runs every forward of it, the fill
    included, on the step's packages."""
    session = (engine or EagerEngine()).open(model, prompt.size(0), prompt.size(1) + new_tokens)
    try:
        if prompt.size(1) > 1:
            session.fill(prompt[:, :-1])
        out, elapsed_ms = timed_ms(lambda: decode_after_prompt(session, prompt, new_tokens))
    finally:
        session.close()
    return elapsed_ms / new_tokens, out.tokens


def measure_decode_speed(reference: nn.Module, fast: nn.Module, prompt: torch.Tensor,
                         new_tokens: int, reps: int, engine: Engine | None = None) -> dict:
    """Median ms/token of fp32 and kernel decode on one engine, interleaved rep by rep so drift
    hits both alike; eager_calls counts the forwards of the timed decodes that ran eagerly."""
    engine = engine or EagerEngine()
    for model in (reference, fast):  # warm-up: first-call allocation, kernel dispatch, package loads
        time_decode(model, prompt, new_tokens, engine)
    eager_calls = eager_call_counter(engine)
    ref_ms, fast_ms = [], []
    for _ in range(reps):
        ms, ref_tokens = time_decode(reference, prompt, new_tokens, engine)
        ref_ms.append(ms)
        ms, fast_tokens = time_decode(fast, prompt, new_tokens, engine)
        fast_ms.append(ms)
    fp32_median, fast_median = statistics.median(ref_ms), statistics.median(fast_ms)
    new_ref, new_fast = ref_tokens[:, prompt.size(1):], fast_tokens[:, prompt.size(1):]
    return {"fp32_ms_per_token": fp32_median, "ms_per_token": fast_median,
            "speedup_vs_fp32": fp32_median / fast_median,
            "fp32_ms_per_token_reps": ref_ms, "ms_per_token_reps": fast_ms,
            "greedy_agreement_vs_fp32": float((new_ref == new_fast).float().mean()),
            "eager_calls": eager_calls()}
