"""The machine stamp: where and with what a number was measured."""

from __future__ import annotations

import os
import platform
import socket
from pathlib import Path

import torch

from inferlab.jobs.lineage import git_state


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def resolve_device(requested: str = "cpu") -> str:
    """'auto' picks CUDA, then MPS, then CPU; an explicit device must exist."""
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
        return torch.cuda.get_device_name()
    return cpu_model() if device == "cpu" else device


def machine_stamp(device: str = "cpu") -> dict:
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
        **git_state(),
    }


def format_machine(stamp: dict) -> str:
    dirty = {True: "+dirty", False: "", None: ""}[stamp.get("git_dirty")]
    node = f" on {stamp['node']}" if stamp.get("node") else ""  # stamps from before the node field
    return (f"{stamp['device_name']} ({stamp['device']}){node}, {stamp['cpu_cores']} cores, "
            f"{stamp['torch_threads']} torch threads, torch {stamp['torch_version']}, "
            f"{stamp['os']}, git {str(stamp['git_commit'])[:10]}{dirty}")
