"""Weight quantisation: the scheme table, round-to-nearest grids, storage accounting, low-bit kernels.

Every scheme is one row of ``SCHEMES``; nothing below branches on a scheme's name. A scheme
quantises every Linear inside the transformer blocks; the tied embedding (also the output head)
stays fp32 and is reported as such.

Conventions (those of the GPTQ reference code):
- a weight is stored as unsigned integer codes q in [0, 2^b - 1] with a scale s and a zero code z,
  and dequantises to (q - z) * s;
- symmetric grids fix z = 2^(b-1) and s = 2 * max|w| / (2^b - 1), so all 2^b levels are used
  (levels -2^(b-1) .. 2^(b-1)-1); nothing but the scale is stored;
- asymmetric grids span [min(w, 0), max(w, 0)] with s = (max - min) / (2^b - 1) and an integer
  zero code z = round(-min / s), which is stored;
- the evaluation uses the dequantised fp32 weights, so quality numbers do not depend on a kernel.

Storage assumed by the effective-bits column: each scale is a 16-bit float (fp16 in a file; the
CPU kernels take bf16, also 16 bits) and each zero point is an integer of the weight's own width
(b bits, as GPTQ packs them). Symmetric schemes store no zero point. bf16 weights cost 16 bits.
"""

from __future__ import annotations

import copy
import statistics
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TextIO

import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from inferlab.evaluation import evaluate_loss, windows
from inferlab.generate import generate
from inferlab.quant_names import BITS, LAYOUTS, integer_scheme_name
from inferlab.timing import timed_ms

SCALE_BITS = 16  # one 16-bit float per scale
EMBEDDING_NOTE = "tok_emb (tied with the output head) kept in fp32, not quantised"


# --------------------------------------------------------------------------------------------
# Integer representation of one weight matrix


@dataclass
class QuantizedWeight:
    """Codes, scales and zero codes of one (N, K) weight; rows are output channels."""

    codes: torch.Tensor   # (N, K) int32 in [0, 2^bits - 1]
    scale: torch.Tensor   # (N, G) float32; G = K // group_size
    zero: torch.Tensor    # (N, G) float32 holding integer zero codes
    bits: int
    group_size: int       # input columns sharing one (scale, zero); K for per-channel and per-tensor

    def dequantize(self) -> torch.Tensor:
        scale = self.scale.repeat_interleave(self.group_size, dim=1)  # (N, K)
        zero = self.zero.repeat_interleave(self.group_size, dim=1)
        return (self.codes.float() - zero) * scale


def grid_params(w: torch.Tensor, bits: int, symmetric: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """One grid per row of w (R, C): returns scale (R, 1) and zero code (R, 1)."""
    maxq = 2 ** bits - 1
    # The grid always contains 0, so exact zeros (e.g. dead columns) stay exact.
    lo = w.amin(dim=1, keepdim=True).clamp(max=0.0)
    hi = w.amax(dim=1, keepdim=True).clamp(min=0.0)
    if symmetric:
        amax = torch.maximum(-lo, hi)
        scale = 2.0 * amax / maxq
        zero = torch.full_like(scale, float((maxq + 1) // 2))
    else:
        scale = (hi - lo) / maxq
        zero = torch.round(-lo / scale.clamp(min=torch.finfo(scale.dtype).tiny))
    # An all-zero row has no range; any positive scale represents it exactly.
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    return scale, zero.clamp(0, maxq)


def quantize_codes(w: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, bits: int) -> torch.Tensor:
    """Round-to-nearest codes of w under a grid broadcastable to it."""
    return torch.clamp(torch.round(w / scale) + zero, 0, 2 ** bits - 1)


# How each granularity groups a (N, K) weight: a function returning (rows of the grid view,
# columns per grid). One grid is found per row of w.reshape(rows, columns).
GROUPINGS: dict[str, Callable[[int, int, int | None], tuple[int, int]]] = {
    "tensor": lambda n, k, g: (1, n * k),
    "channel": lambda n, k, g: (n, k),
    "group": lambda n, k, g: (n * k // g, g),
}


def rtn_quantize(weight: torch.Tensor, bits: int, granularity: str, symmetric: bool,
                 group_size: int | None = None) -> QuantizedWeight:
    """Round-to-nearest quantisation of a (N, K) weight at the given granularity."""
    w = weight.detach().float()
    n, k = w.shape
    if granularity == "group":
        group_size = min(group_size, k)  # a group wider than the row is the row (as in the reference)
    if granularity == "group" and k % group_size:
        raise ValueError(f"group size {group_size} does not divide the {k} input columns")
    rows, cols = GROUPINGS[granularity](n, k, group_size)
    view = w.reshape(rows, cols)
    scale, zero = grid_params(view, bits, symmetric)  # (rows, 1)
    codes = quantize_codes(view, scale, zero, bits).reshape(n, k)
    # Express every granularity as per-row groups of `group` columns: per-tensor repeats the one
    # grid on every row, per-channel is a single group of K.
    group = group_size if granularity == "group" else k
    groups = k // group
    scale = scale.reshape(-1, 1).expand(-1, n * groups // rows).reshape(n, groups)
    zero = zero.reshape(-1, 1).expand(-1, n * groups // rows).reshape(n, groups)
    return QuantizedWeight(codes.to(torch.int32), scale.contiguous(), zero.contiguous(), bits, group)


# --------------------------------------------------------------------------------------------
# The scheme table


@dataclass(frozen=True)
class Scheme:
    name: str
    method: str              # key of METHODS: "rtn", "gptq" or "bf16"
    bits: int                # nominal bits per weight; bf16 counts as 16
    granularity: str         # "tensor", "channel", "group" or "none" (bf16)
    symmetric: bool
    group_size: int | None = None
    kernel: str | None = None  # key of KERNELS for the speed measurement; None = quality only

    @property
    def simplicity(self) -> tuple[int, int, int]:
        """Tie-break order: per-tensor < per-channel < group < GPTQ, symmetric < asymmetric."""
        return (METHOD_RANK[self.method], GRANULARITY_RANK[self.granularity], int(not self.symmetric))

    def storage_bits(self, n: int, k: int) -> int:
        """Bits to store one (N, K) weight: codes, 16-bit scales and b-bit zero points."""
        grids = GRID_COUNT[self.granularity](n, k, self.group_size)
        zero_bits = 0 if self.symmetric else self.bits
        return n * k * self.bits + grids * (SCALE_BITS + zero_bits)


METHOD_RANK = {"bf16": 0, "rtn": 0, "gptq": 1}
GRANULARITY_RANK = {"none": 0, "tensor": 0, "channel": 1, "group": 2}
GRID_COUNT: dict[str, Callable[[int, int, int | None], int]] = {
    "none": lambda n, k, g: 0,
    "tensor": lambda n, k, g: 1,
    "channel": lambda n, k, g: n,
    "group": lambda n, k, g: n * (k // min(g, k)),
}


def _kernel_for(scheme: Scheme) -> str | None:
    """The first kernel in KERNELS that can run this scheme's integer layout, if any."""
    return next((name for name, kern in KERNELS.items() if kern.supports(scheme)), None)


def _build_schemes() -> dict[str, Scheme]:
    table = {integer_scheme_name(bits, suffix): Scheme(integer_scheme_name(bits, suffix), method, bits, gran, sym,
                                                       group)
             for bits in BITS
             for suffix, (method, gran, sym, group) in LAYOUTS.items()}
    table["bf16"] = Scheme("bf16", "bf16", 16, "none", True)
    return {name: replace(s, kernel=_kernel_for(s)) for name, s in table.items()}


def get_scheme(name: str) -> Scheme:
    try:
        return SCHEMES[name]
    except KeyError:
        raise ValueError(f"unknown quantization scheme {name!r}; known: {sorted(SCHEMES)}") from None


def quantized_linears(model: nn.Module) -> list[tuple[str, nn.Linear]]:
    """Every Linear inside the transformer blocks, in execution order (the scope of all schemes)."""
    return [(f"blocks.{i}.{name}", mod) for i, block in enumerate(model.blocks)
            for name, mod in block.named_modules() if isinstance(mod, nn.Linear)]


def effective_bits_per_weight(scheme: Scheme, shapes: list[tuple[int, int]]) -> float:
    """Stored bits / quantised weights over all layers, scales and zero points included."""
    return sum(scheme.storage_bits(n, k) for n, k in shapes) / sum(n * k for n, k in shapes)


# --------------------------------------------------------------------------------------------
# Methods: each quantises the model's block Linears in place (dequantised fp32 weights) and
# returns the integer form per layer (None where there is none, i.e. bf16).

QuantResult = dict[str, QuantizedWeight | None]


@torch.no_grad()
def _rtn_method(model: nn.Module, scheme: Scheme, **_) -> QuantResult:
    out: QuantResult = {}
    for name, linear in quantized_linears(model):
        qw = rtn_quantize(linear.weight, scheme.bits, scheme.granularity, scheme.symmetric, scheme.group_size)
        linear.weight.copy_(qw.dequantize())
        out[name] = qw
    return out


@torch.no_grad()
def _bf16_method(model: nn.Module, scheme: Scheme, **_) -> QuantResult:
    out: QuantResult = {}
    for name, linear in quantized_linears(model):
        linear.weight.copy_(linear.weight.to(torch.bfloat16).float())
        out[name] = None
    return out


def _gptq_method(model: nn.Module, scheme: Scheme, calibration: torch.Tensor | None = None,
                 damp: float = 0.01, block_size: int = 128, progress_file: TextIO | None = None
                 ) -> QuantResult:
    from inferlab.gptq import gptq_quantize_model  # gptq.py builds on this module's grids

    if calibration is None:
        raise ValueError(f"{scheme.name}: GPTQ needs calibration windows of training text")
    return gptq_quantize_model(model, calibration, scheme.bits, scheme.symmetric, scheme.group_size,
                               damp=damp, block_size=block_size, progress_file=progress_file)


METHODS: dict[str, Callable[..., QuantResult]] = {
    "rtn": _rtn_method,
    "bf16": _bf16_method,
    "gptq": _gptq_method,
}


def quantize_model(model: nn.Module, scheme_name: str, **method_options) -> tuple[nn.Module, QuantResult]:
    """A quantised deep copy of model (dequantised fp32 weights) and the per-layer integer form.

    method_options go to the method (GPTQ: calibration, damp, block_size, progress_file).
    """
    scheme = get_scheme(scheme_name)
    quantised = copy.deepcopy(model).eval()
    return quantised, METHODS[scheme.method](quantised, scheme, **method_options)


# --------------------------------------------------------------------------------------------
# Quality against the fp32 reference


@torch.no_grad()
def evaluate_against_reference(reference: nn.Module, candidate: nn.Module, ids: torch.Tensor,
                               seq_len: int, batch_size: int = 16,
                               progress_file: TextIO | None = None) -> dict:
    """Both losses through evaluate_loss, plus mean KL(ref || candidate) and top-1 agreement.

    The candidate's pass recomputes the reference logits batch by batch (same windows, same
    order), so nothing the size of the validation logits is ever held in memory.
    """
    reference.eval()
    n_batches = sum(1 for _ in windows(ids, seq_len, batch_size))
    bar = tqdm(total=2 * n_batches, desc="eval fp32 + quantised", file=progress_file,
               mininterval=5.0, ascii=True)
    ref_loss = evaluate_loss(reference, ids, seq_len, batch_size, on_batch=lambda *_: bar.update())
    device = next(reference.parameters()).device
    batches = windows(ids, seq_len, batch_size)
    totals = {"kl": 0.0, "agree": 0, "tokens": 0}

    def on_batch(logits: torch.Tensor, targets: torch.Tensor) -> None:
        x, y = next(batches)
        if not torch.equal(y.to(targets.device), targets):
            raise RuntimeError("reference and candidate windows went out of step")
        ref_logp = F.log_softmax(reference(x.to(device)), dim=-1)  # (B, T, V)
        logp = F.log_softmax(logits, dim=-1)
        totals["kl"] += (ref_logp.exp() * (ref_logp - logp)).sum().item()
        totals["agree"] += (ref_logp.argmax(-1) == logp.argmax(-1)).sum().item()
        totals["tokens"] += targets.numel()
        bar.update()

    loss = evaluate_loss(candidate, ids, seq_len, batch_size, on_batch=on_batch)
    bar.close()
    return {"loss": loss, "fp32_loss": ref_loss, "delta_loss": loss - ref_loss,
            "kl_mean_nats": totals["kl"] / totals["tokens"],
            "top1_agreement": totals["agree"] / totals["tokens"], "eval_tokens": totals["tokens"]}


# --------------------------------------------------------------------------------------------
# Low-bit kernels, used only for the speed measurement. The CPU kernels' fast paths take bf16
# activations, so each wrapper casts its input to compute_dtype and returns float32; with
# compute_dtype=float32 they reproduce the dequantised matmul to fp32 rounding (tested).


class Int8WeightOnlyLinear(nn.Module):
    """aten._weight_int8pack_mm: int8 weight (N, K) times per-row scales.

    Asymmetric rows (zero code z != 128) are handled exactly with one extra row-sum:
    w = (q - z) s = (q - 128) s + (128 - z) s, so y = int8mm(x, q - 128, s) + sum(x) * (128 - z) s.
    """

    def __init__(self, qw: QuantizedWeight, compute_dtype: torch.dtype = torch.bfloat16):
        super().__init__()
        if qw.bits != 8 or qw.scale.size(1) != 1:
            raise ValueError("the int8 kernel needs 8-bit codes with one scale per output row")
        self.compute_dtype = compute_dtype
        self.register_buffer("weight", (qw.codes - 128).to(torch.int8))  # (N, K)
        self.register_buffer("scales", qw.scale[:, 0].to(compute_dtype))  # (N,)
        offset = (128.0 - qw.zero[:, 0]) * qw.scale[:, 0]  # (N,)
        self.register_buffer("offset", offset if bool(offset.ne(0).any()) else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        y = torch.ops.aten._weight_int8pack_mm(x2.to(self.compute_dtype), self.weight, self.scales).float()
        if self.offset is not None:
            y = y + x2.float().sum(-1, keepdim=True) * self.offset
        return y.reshape(*shape[:-1], -1)


INT4_KERNEL_GROUPS = (256, 128, 64, 32)  # group sizes aten's CPU int4 kernel accepts


class Int4GroupwiseLinear(nn.Module):
    """aten._weight_int4pack_mm_for_cpu: 4-bit codes packed two per byte, (scale, zero) per group.

    The kernel dequantises as (q - 8) * s + zf, so our (q - z) * s needs zf = (8 - z) * s. Per-channel
    and per-tensor grids are passed as the kernel's largest group size with the scale repeated.
    """

    def __init__(self, qw: QuantizedWeight, compute_dtype: torch.dtype = torch.bfloat16):
        super().__init__()
        n, k = qw.codes.shape
        if qw.bits != 4:
            raise ValueError("the int4 kernel needs 4-bit codes")
        kernel_group = next((g for g in INT4_KERNEL_GROUPS if qw.group_size % g == 0 and k % g == 0), None)
        if kernel_group is None or n % 8:
            raise ValueError(f"int4 kernel cannot take a ({n}, {k}) weight with groups of {qw.group_size}")
        inner_k_tiles = next(t for t in (8, 4, 2) if k % (16 * t) == 0)
        self.compute_dtype, self.group, self.out_features = compute_dtype, kernel_group, n
        self.register_buffer("weight", torch.ops.aten._convert_weight_to_int4pack_for_cpu(
            qw.codes.to(torch.int32).contiguous(), inner_k_tiles))
        repeat = qw.group_size // kernel_group
        scale = qw.scale.repeat_interleave(repeat, dim=1)                   # (N, K / group)
        zero_float = (8.0 - qw.zero.repeat_interleave(repeat, dim=1)) * scale
        self.register_buffer("scales_and_zeros", torch.stack([scale, zero_float], dim=-1)
                             .transpose(0, 1).contiguous().to(compute_dtype))  # (K / group, N, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        y = torch.ops.aten._weight_int4pack_mm_for_cpu(
            x.reshape(-1, shape[-1]).to(self.compute_dtype), self.weight, self.group, self.scales_and_zeros)
        return y.float().reshape(*shape[:-1], self.out_features)


class Bf16Linear(nn.Module):
    """bf16 weights and activations through the ordinary (oneDNN) matmul; output back in fp32."""

    def __init__(self, weight: torch.Tensor, compute_dtype: torch.dtype = torch.bfloat16):
        super().__init__()
        self.compute_dtype = compute_dtype
        self.register_buffer("weight", weight.detach().to(torch.bfloat16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x.to(self.compute_dtype), self.weight.to(self.compute_dtype)).float()


@dataclass(frozen=True)
class Kernel:
    name: str
    op: str                                   # aten op whose presence makes the kernel available
    description: str
    supports: Callable[[Scheme], bool]        # can this scheme's integer layout run on it?
    build: Callable[[nn.Linear, QuantizedWeight | None, torch.dtype], nn.Module]
    devices: tuple[str, ...] = ("cpu",)

    def available(self, device: str) -> bool:
        return device in self.devices and hasattr(torch.ops.aten, self.op)


KERNELS: dict[str, Kernel] = {
    "int8_weight_only": Kernel(
        "int8_weight_only", "_weight_int8pack_mm",
        "aten._weight_int8pack_mm (int8 weight, one scale per output row; asym via a row-sum term)",
        supports=lambda s: s.bits == 8 and s.granularity in ("tensor", "channel"),
        build=lambda lin, qw, dt: Int8WeightOnlyLinear(qw, dt)),
    "int4_groupwise": Kernel(
        "int4_groupwise", "_weight_int4pack_mm_for_cpu",
        "aten._weight_int4pack_mm_for_cpu (4-bit packed weight, bf16 scale and zero per group)",
        supports=lambda s: s.bits == 4 and (s.group_size is None or s.group_size in INT4_KERNEL_GROUPS),
        build=lambda lin, qw, dt: Int4GroupwiseLinear(qw, dt)),
    "bf16_matmul": Kernel(
        "bf16_matmul", "mm", "bf16 weights and activations through torch's matmul (oneDNN on CPU)",
        supports=lambda s: s.method == "bf16",
        build=lambda lin, qw, dt: Bf16Linear(lin.weight, dt)),
}

SCHEMES: dict[str, Scheme] = _build_schemes()


def kernel_model(quantised: nn.Module, result: QuantResult, scheme_name: str,
                 compute_dtype: torch.dtype = torch.bfloat16) -> nn.Module:
    """A copy of the dequantised model whose block Linears run on the scheme's low-bit kernel."""
    scheme = get_scheme(scheme_name)
    if scheme.kernel is None:
        raise ValueError(f"{scheme_name} has no low-bit kernel")
    kern = KERNELS[scheme.kernel]
    fast = copy.deepcopy(quantised).eval()
    for name, linear in quantized_linears(fast):
        parent_name, _, child = name.rpartition(".")
        setattr(fast.get_submodule(parent_name), child, kern.build(linear, result[name], compute_dtype))
    return fast


def time_decode(model: nn.Module, prompt: torch.Tensor, new_tokens: int) -> tuple[float, torch.Tensor]:
    """Wall ms per generated token of one cached greedy generate() call, and its tokens."""
    out, elapsed_ms = timed_ms(lambda: generate(model, prompt, new_tokens, use_cache=True))
    return elapsed_ms / new_tokens, out.tokens


def measure_decode_speed(reference: nn.Module, fast: nn.Module, prompt: torch.Tensor,
                         new_tokens: int, reps: int) -> dict:
    """Median ms/token of fp32 and kernel decode, interleaved rep by rep so drift hits both alike."""
    for model in (reference, fast):  # warm-up: first-call allocation and kernel dispatch
        time_decode(model, prompt, new_tokens)
    ref_ms, fast_ms = [], []
    for _ in range(reps):
        ms, ref_tokens = time_decode(reference, prompt, new_tokens)
        ref_ms.append(ms)
        ms, fast_tokens = time_decode(fast, prompt, new_tokens)
        fast_ms.append(ms)
    fp32_median, fast_median = statistics.median(ref_ms), statistics.median(fast_ms)
    new_ref, new_fast = ref_tokens[:, prompt.size(1):], fast_tokens[:, prompt.size(1):]
    return {"fp32_ms_per_token": fp32_median, "ms_per_token": fast_median,
            "speedup_vs_fp32": fp32_median / fast_median,
            "fp32_ms_per_token_reps": ref_ms, "ms_per_token_reps": fast_ms,
            "greedy_agreement_vs_fp32": float((new_ref == new_fast).float().mean())}


@torch.no_grad()
def kernel_max_rel_error(quantised: nn.Module, fast: nn.Module, seed: int = 0) -> float:
    """Largest relative error of any kernel Linear against the dequantised matmul on random inputs."""
    generator = torch.Generator().manual_seed(seed)
    worst = 0.0
    for name, linear in quantized_linears(quantised):
        x = torch.randn(4, linear.in_features, generator=generator)
        ref = linear(x)
        worst = max(worst, ((fast.get_submodule(name)(x) - ref).abs().max() / ref.abs().max()).item())
    return worst
