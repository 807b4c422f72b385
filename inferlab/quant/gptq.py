"""GPTQ (Frantar et al. 2023), following the IST-DASLab reference algorithm.

For one Linear with weight W (N, K) and calibration inputs X (K, n tokens):
- H = 2 X X^T / n, the Hessian of the layer's squared output error;
- dead inputs (H_jj = 0) get H_jj = 1 and W[:, j] = 0;
- damping: H += damp * mean(diag H) * I;
- columns are quantised left to right; each column's rounding error, divided by the matching
  diagonal entry of U (the upper Cholesky factor of H^-1), is spread over the columns not yet
  quantised along U's row. Inside a block of block_size columns this update is applied at once;
  the columns right of the block get the block's accumulated error in one matmul (lazy batch).

Layers are quantised in sequence: the calibration windows run through the blocks already
quantised, and inside a block each Linear's H is collected after the Linears before it were
quantised ("true sequential" in the reference).
"""

from __future__ import annotations

from typing import TextIO

import torch
from torch import nn
from tqdm import tqdm

from inferlab.quant.grids import QuantizedWeight, grid_params, quantize_codes


def calibration_windows(train_ids: torch.Tensor, n_windows: int, seq_len: int, seed: int) -> torch.Tensor:
    """n_windows random windows (n, seq_len) of training text; validation text is never used."""
    if len(train_ids) <= seq_len:
        raise ValueError(f"training split of {len(train_ids)} tokens is shorter than seq_len {seq_len}")
    generator = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, len(train_ids) - seq_len, (n_windows,), generator=generator)
    return torch.stack([train_ids[s:s + seq_len] for s in starts.tolist()])


class HessianAccumulator:
    """Running H = 2 X X^T / n over every input row a Linear sees."""

    def __init__(self, in_features: int):
        self.sum = torch.zeros(in_features, in_features)
        self.rows = 0

    def add(self, x: torch.Tensor) -> None:
        x = x.reshape(-1, x.size(-1)).float()  # (tokens, K)
        self.sum += x.T @ x
        self.rows += x.size(0)

    def hessian(self) -> torch.Tensor:
        if self.rows == 0:
            raise RuntimeError("no calibration inputs reached this layer")
        return 2.0 * self.sum / self.rows


@torch.no_grad()
def gptq_quantize_weight(weight: torch.Tensor, hessian: torch.Tensor, bits: int, symmetric: bool = False,
                         group_size: int | None = None, *, damp: float, block_size: int) -> QuantizedWeight:
    """GPTQ for one (N, K) weight given its (K, K) Hessian; per-channel unless group_size is set.

    damp and block_size have no defaults: the workflow takes them from config (quantization.gptq).
    """
    W = weight.detach().float().clone()
    n, k = W.shape
    group = min(group_size or k, k)
    if k % group:
        raise ValueError(f"group size {group} does not divide the {k} input columns")
    H = hessian.detach().float().clone()
    dead = torch.diag(H) == 0
    H[dead, dead] = 1.0
    W[:, dead] = 0.0  # an input that is always zero contributes nothing; quantise it to exactly 0

    H += damp * torch.mean(torch.diag(H)) * torch.eye(k)
    # U with H^-1 = U^T U: row i of U gives column i's error propagation to the later columns.
    U = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(H)), upper=True)

    codes = torch.zeros(n, k, dtype=torch.int32)
    scales = torch.zeros(n, k // group)
    zeros = torch.zeros(n, k // group)
    if group == k:  # per-channel: one grid per row, found before any error feedback (as in the reference)
        scale, zero = grid_params(W, bits, symmetric)  # (N, 1)

    for b0 in range(0, k, block_size):
        b1 = min(b0 + block_size, k)
        W1 = W[:, b0:b1].clone()       # (N, B) columns of this block, updated as we go
        Err1 = torch.zeros_like(W1)    # (N, B) scaled errors, for the lazy update right of the block
        U1 = U[b0:b1, b0:b1]
        for i in range(b1 - b0):
            col = b0 + i
            if group != k and col % group == 0:
                # A new group's grid is found on its columns as they stand now, with the errors of
                # the earlier columns folded in. (A group reaching past this block sees the part
                # beyond it without this block's pending update, as in the reference code; with
                # group sizes dividing block_size that never happens.)
                current = W1[:, i:i + group] if i + group <= b1 - b0 else \
                    torch.cat([W1[:, i:], W[:, b1:col + group]], dim=1)
                scale, zero = grid_params(current, bits, symmetric)
                scales[:, col // group], zeros[:, col // group] = scale[:, 0], zero[:, 0]
            w = W1[:, i]
            q = quantize_codes(w.unsqueeze(1), scale, zero, bits)  # (N, 1)
            codes[:, col] = q[:, 0].to(torch.int32)
            err = (w - ((q - zero) * scale)[:, 0]) / U1[i, i]  # (N,)
            W1[:, i:] -= err.unsqueeze(1) @ U1[i, i:].unsqueeze(0)
            Err1[:, i] = err
        W[:, b1:] -= Err1 @ U[b0:b1, b1:]

    if group == k:
        scales[:, 0], zeros[:, 0] = scale[:, 0], zero[:, 0]
    return QuantizedWeight(codes, scales, zeros, bits, group)


class _StopForward(Exception):
    pass


@torch.no_grad()
def _block_inputs(model: nn.Module, calibration: torch.Tensor, batch_size: int) -> list[tuple]:
    """The positional arguments blocks[0] receives for each calibration mini-batch."""
    captured: list[tuple] = []

    def grab(module, args):
        captured.append(args)
        raise _StopForward

    handle = model.blocks[0].register_forward_pre_hook(grab)
    try:
        for i in range(0, calibration.size(0), batch_size):
            try:
                model(calibration[i:i + batch_size])
            except _StopForward:
                pass
    finally:
        handle.remove()
    return captured


@torch.no_grad()
def _layer_hessian(block: nn.Module, linear: nn.Linear, inputs: list[tuple]) -> torch.Tensor:
    acc = HessianAccumulator(linear.in_features)
    handle = linear.register_forward_hook(lambda mod, args, out: acc.add(args[0]))
    try:
        for args in inputs:
            block(*args)
    finally:
        handle.remove()
    return acc.hessian()


@torch.no_grad()
def gptq_quantize_model(model: nn.Module, calibration: torch.Tensor, bits: int, symmetric: bool = False,
                        group_size: int | None = None, *, damp: float, block_size: int,
                        batch_size: int = 16, progress_file: TextIO | None = None
                        ) -> dict[str, QuantizedWeight]:
    """Quantises every Linear in model.blocks in place (dequantised weights), block by block.

    calibration: (n_windows, seq_len) token ids of training text.
    """
    model.eval()
    inputs = _block_inputs(model, calibration, batch_size)  # per mini-batch: (x, cos, sin, input_pos)
    n_layers = sum(isinstance(m, nn.Linear) for m in model.blocks.modules())
    bar = tqdm(total=n_layers, desc=f"GPTQ int{bits}", file=progress_file, mininterval=5.0, ascii=True)
    results: dict[str, QuantizedWeight] = {}
    for bi, block in enumerate(model.blocks):
        for name, linear in [(n, m) for n, m in block.named_modules() if isinstance(m, nn.Linear)]:
            H = _layer_hessian(block, linear, inputs)  # earlier Linears of this block already quantised
            qw = gptq_quantize_weight(linear.weight, H, bits, symmetric, group_size, damp=damp, block_size=block_size)
            linear.weight.copy_(qw.dequantize())
            results[f"blocks.{bi}.{name}"] = qw
            bar.update()
        inputs = [(block(*args), *args[1:]) for args in inputs]  # the quantised block feeds the next
    bar.close()
    return results
