"""Training loop: AdamW, linear warm-up then cosine decay, bf16 autocast on CPUs that run it natively."""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TextIO

import pandas as pd
import torch
import torch.nn.functional as F
from tqdm import tqdm

from inferlab.core.config import GPTConfig
from inferlab.core.evaluation import evaluate_loss
from inferlab.core.model import GPT


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 500
    batch_size: int = 32
    seq_len: int = 256
    lr: float = 3e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 50
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0
    seed: int = 1337
    eval_every: int = 100
    eval_windows: int = 32
    precision: str = "auto"  # auto | bf16 | fp32

    def to_dict(self) -> dict:
        return asdict(self)


def lr_at(step: int, cfg: TrainConfig) -> float:
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    cosine = 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
    return cfg.lr * (cfg.min_lr_ratio + (1.0 - cfg.min_lr_ratio) * cosine)


# CPU flags (as /proc/cpuinfo spells them) that mean bf16 matmuls run in hardware. oneDNN's
# own check (_is_mkldnn_bf16_supported) is also true on plain AVX-512, where bf16 autocast is
# emulated and slower than fp32, so it must not decide alone.
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16", "amx_tile")


def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> set[str] | None:
    """The CPU's feature flags, or None where /proc/cpuinfo does not exist (macOS, Windows)."""
    try:
        text = Path(cpuinfo).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(("flags", "Features")) and ":" in line:
            return set(line.split(":", 1)[1].split())
    return set()


def choose_precision(requested: str, flags: set[str] | None = None) -> tuple[str, str]:
    """(precision, reason). "auto" picks bf16 only where the CPU has native bf16 instructions.

    flags defaults to the probe of this machine (cpu_flags); tests pass their own.
    """
    if requested in ("bf16", "fp32"):
        return requested, f"{requested} requested in the config"
    if requested != "auto":
        raise ValueError(f"precision must be auto, bf16 or fp32, got {requested!r}")
    flags = cpu_flags() if flags is None else flags
    if flags is None:
        return "fp32", "auto: no /proc/cpuinfo to prove native bf16, so fp32"
    native = sorted(set(NATIVE_BF16_FLAGS) & flags)
    if native:
        return "bf16", f"auto: CPU has native bf16 ({', '.join(native)})"
    return "fp32", (f"auto: CPU lacks {'/'.join(NATIVE_BF16_FLAGS)}; bf16 autocast would be emulated "
                    f"(slower than fp32)")


def sample_batch(ids: torch.Tensor, batch_size: int, seq_len: int, generator: torch.Generator
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    starts = torch.randint(0, len(ids) - seq_len - 1, (batch_size,), generator=generator)
    x = torch.stack([ids[s:s + seq_len] for s in starts.tolist()])
    y = torch.stack([ids[s + 1:s + seq_len + 1] for s in starts.tolist()])
    return x, y


def _optimizer(model: GPT, cfg: TrainConfig) -> torch.optim.Optimizer:
    # Decay matrices only; norm weights are gains and are left alone.
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2))


def train_model(model_config: GPTConfig, cfg: TrainConfig, train_ids: torch.Tensor,
                val_ids: torch.Tensor, progress_file: TextIO | None = None
                ) -> tuple[GPT, pd.DataFrame, dict]:
    """Returns the trained model, the loss curve and a summary (val loss on the full split)."""
    if cfg.seq_len > model_config.max_seq_len:
        raise ValueError(f"seq_len {cfg.seq_len} exceeds the model context {model_config.max_seq_len}")
    torch.manual_seed(cfg.seed)
    model = GPT(model_config)
    model.train()
    precision, precision_reason = choose_precision(cfg.precision)
    if progress_file is not None:
        print(f"precision {precision}: {precision_reason}", file=progress_file, flush=True)
    optimizer = _optimizer(model, cfg)
    batch_rng = torch.Generator().manual_seed(cfg.seed + 1)
    eval_rng = torch.Generator().manual_seed(cfg.seed + 2)
    rows = []
    start = time.perf_counter()
    bar = tqdm(range(cfg.steps), desc=f"train d={model_config.d_model}", file=progress_file,
               mininterval=5.0, ascii=True)
    for step in bar:
        lr = lr_at(step, cfg)
        for group in optimizer.param_groups:
            group["lr"] = lr
        x, y = sample_batch(train_ids, cfg.batch_size, cfg.seq_len, batch_rng)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            logits = model(x)
        loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        row = {"step": step + 1, "train_loss": loss.item(), "lr": lr,
               "tokens_seen": (step + 1) * cfg.batch_size * cfg.seq_len,
               "elapsed_s": time.perf_counter() - start, "val_loss_sample": float("nan")}
        if (step + 1) % cfg.eval_every == 0 or step + 1 == cfg.steps:
            row["val_loss_sample"] = _sampled_val_loss(model, val_ids, cfg, eval_rng)
            bar.set_postfix(train=f"{row['train_loss']:.3f}", val=f"{row['val_loss_sample']:.3f}")
        rows.append(row)
    train_seconds = time.perf_counter() - start
    model.eval()
    val_loss = evaluate_loss(model, val_ids, cfg.seq_len)
    tokens = cfg.steps * cfg.batch_size * cfg.seq_len
    summary = {"val_loss": val_loss, "steps": cfg.steps, "tokens_seen": tokens,
               "train_seconds": train_seconds, "tokens_per_s": tokens / train_seconds,
               "precision": precision,
               "precision_reason": precision_reason, "final_train_loss": rows[-1]["train_loss"] if rows else None}
    return model, pd.DataFrame(rows), summary


@torch.no_grad()
def _sampled_val_loss(model: GPT, val_ids: torch.Tensor, cfg: TrainConfig, rng: torch.Generator) -> float:
    """A cheap progress estimate on random windows; the reported loss uses the full split."""
    model.eval()
    x, y = sample_batch(val_ids, cfg.eval_windows, cfg.seq_len, rng)
    loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten()).item()
    model.train()
    return loss
