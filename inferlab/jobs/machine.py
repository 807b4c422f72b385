"""The machine stamp: where and with what a number was measured."""

from __future__ import annotations

import hashlib
import os
import platform
import socket
from pathlib import Path

from inferlab.jobs.lineage import git_state


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# The instruction-set flags that pick PyTorch's kernels (and so change timings, and bf16 results).
KERNEL_FLAGS = ("avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "avx512_fp16",
                "amx_tile", "amx_bf16", "amx_int8")


def _cpu_flags() -> list[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return sorted(set(line.split(":", 1)[1].split()))
    except OSError:
        pass
    return []


def _caches() -> str | None:
    """'L1d 48K, L1i 32K, L2 2048K, L3 307200K' of cpu0, from sysfs; None where sysfs has none."""
    parts = []
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            level, kind, size = ((index / name).read_text().strip() for name in ("level", "type", "size"))
        except OSError:
            continue
        parts.append(f"L{level}{ {'Data': 'd', 'Instruction': 'i'}.get(kind, '')} {size}")
    return ", ".join(parts) or None


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except (OSError, ValueError, IndexError):
        pass
    return None


def hardware_fingerprint() -> dict:
    """What tells two machines of one name apart: kernel-relevant CPU flags (and a hash of all of
    them), cache sizes, cores and memory. `fingerprint` hashes them all; two VMs sold as the same
    kind but built on different hosts differ here even when their CPU model string agrees."""
    flags = _cpu_flags()
    parts = {
        "cpu_kernel_flags": " ".join(f for f in KERNEL_FLAGS if f in flags) or "none",
        "cpu_flags_sha256": hashlib.sha256(" ".join(flags).encode()).hexdigest()[:16] if flags else None,
        "cpu_caches": _caches(),
        "memory_gib": _memory_gib(),
    }
    identity = [cpu_model(), os.cpu_count(), parts["cpu_flags_sha256"], parts["cpu_caches"], parts["memory_gib"]]
    parts["fingerprint"] = hashlib.sha256(repr(identity).encode()).hexdigest()[:12]
    return parts


def resolve_device(requested: str = "cpu") -> str:
    """'auto' picks CUDA, then MPS, then CPU; an explicit device must exist."""
    import torch  # only compute jobs probe a device; aggregation jobs stay torch-free

    if requested == "auto":
        if torch.cuda.is_available():
            return "cuda"
        if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
            return "mps"
        return "cpu"
    if requested == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device 'cuda' requested but torch.cuda.is_available() is False")
    if requested == "mps" and not torch.backends.mps.is_available():
        raise RuntimeError("device 'mps' requested but MPS is not available")
    return requested


def device_name(device: str) -> str:
    if device == "cuda":
        import torch

        return torch.cuda.get_device_name()
    return cpu_model() if device == "cpu" else device


def machine_stamp(device: str = "cpu") -> dict:
    """Called by the jobs that measure, which have imported torch already (its thread count is
    part of the stamp)."""
    import torch

    return {
        # the host that ran the job: under a cluster executor each job may land on another
        # node, and timings from different nodes are not comparable
        "node": socket.gethostname(),
        "cpu_model": cpu_model(),
        "cpu_cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "device": device,
        "device_name": device_name(device),
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "os": platform.platform(),
        **hardware_fingerprint(),
        **git_state(),
    }


def format_machine(stamp: dict) -> str:
    dirty = {True: "+dirty", False: "", None: ""}[stamp.get("git_dirty")]
    node = f" on {stamp['node']}" if stamp.get("node") else ""  # stamps from before the node field
    return (f"{stamp['device_name']} ({stamp['device']}){node}, {stamp['cpu_cores']} cores, "
            f"{stamp['torch_threads']} torch threads, torch {stamp['torch_version']}, "
            f"{stamp['os']}, git {str(stamp['git_commit'])[:10]}{dirty}")
