"""Probes of this machine's memory bandwidth and fp32 matmul throughput, for the roofline
(`inferlab.kvcache.roofline`). Units are in the column names: GB/s = 1e9 bytes/s, GFLOP/s = 1e9 FLOP/s.
"""

from __future__ import annotations

import statistics

import pandas as pd
import torch

from inferlab.core.timing import timed_ms


def _median_ms(fn, device: str, repeats: int) -> float:
    fn()  # warm-up: first touch of the pages, kernel selection
    return statistics.median(timed_ms(fn, device)[1] for _ in range(repeats))


@torch.no_grad()
def probe_bandwidth(device: str, n_bytes: int, repeats: int) -> list[dict]:
    """Memory bandwidth from a tensor of n_bytes: a sum (reads n_bytes) and a copy (reads and writes)."""
    n = max(1, n_bytes // 4)
    src = torch.rand(n, device=device)
    dst = torch.empty_like(src)
    rows = []
    for kind, fn, moved in (("read_sum", lambda: src.sum(), n * 4),
                            ("copy", lambda: dst.copy_(src), 2 * n * 4)):
        ms = _median_ms(fn, device, repeats)
        rows.append({"probe": f"bandwidth_{kind}", "size_bytes": n * 4, "median_ms": ms,
                     "value": moved / (ms / 1e3) / 1e9, "unit": "GB/s", "repeats": repeats})
    return rows


@torch.no_grad()
def probe_matmul(device: str, size: int, repeats: int) -> dict:
    """fp32 matmul throughput: (size × size) @ (size × size) is 2·size³ FLOPs."""
    a = torch.rand(size, size, device=device)
    b = torch.rand(size, size, device=device)
    ms = _median_ms(lambda: a @ b, device, repeats)
    return {"probe": "matmul_fp32", "size_bytes": 3 * size * size * 4, "median_ms": ms,
            "value": 2.0 * size ** 3 / (ms / 1e3) / 1e9, "unit": "GFLOP/s", "repeats": repeats}


def run_probes(device: str, sizes_bytes: list[int], matmul_size: int, repeats: int) -> pd.DataFrame:
    """Bandwidth at each size (e.g. the model's weight size and one far above the caches), matmul once."""
    rows = [row for size in sizes_bytes for row in probe_bandwidth(device, size, repeats)]
    rows.append(probe_matmul(device, matmul_size, repeats))
    table = pd.DataFrame(rows)
    table.insert(0, "threads", torch.get_num_threads())
    table.insert(0, "device", device)
    return table
