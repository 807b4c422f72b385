"""The four stamps of a milestone (model, machine, repeats, baseline), read from the table's provenance.

The producers write them with inferlab.jobs.stamps; results/milestones.parquet flattens them into columns.
"""

from __future__ import annotations

import json
from dataclasses import asdict, is_dataclass

import pandas as pd

from inferlab.report.inputs import ReportInputs
from inferlab.review.numbers import fmt

MACHINE_KEYS = ("cpu_model", "cpu_cores", "torch_threads", "device", "device_name", "node", "fingerprint",
                "cpu_kernel_flags", "cpu_caches", "memory_gib", "torch_version", "os", "git_commit", "git_dirty")
# The machine stamp's columns in results/milestones.parquet (docs/report.md lists them).
TABLE_MACHINE_KEYS = ("cpu_model", "cpu_cores", "torch_threads", "device", "device_name", "node", "torch_version",
                      "os", "git_commit", "git_dirty")


def _model_stamp(data: ReportInputs, prov: dict) -> dict:
    """From the table's provenance when it has one, else from the target checkpoint's meta."""
    stamp = prov.get("model") if isinstance(prov.get("model"), dict) else {}
    if "checkpoint_sha256" in stamp:
        return {k: stamp.get(k) for k in ("model", "params", "checkpoint_sha256", "val_loss")}
    meta = data.metas.get(data.target) or {}
    return {"model": data.target, "params": meta.get("params"), "checkpoint_sha256": meta.get("weights_sha256"),
            "val_loss": meta.get("val_loss")}


def _machine_stamp(prov: dict, fallback: dict | None) -> dict:
    """Where the numbers were measured: the table's machine stamp, else the report job's."""
    machine = prov.get("machine") if isinstance(prov.get("machine"), dict) else None
    if machine is None and "cpu_model" in prov:  # tables whose provenance *is* the machine stamp
        machine = prov
    if machine is None:
        return {**{k: (fallback or {}).get(k) for k in MACHINE_KEYS},
                "source": "report job (the table carries no machine stamp)"}
    return {**{k: machine.get(k) for k in MACHINE_KEYS}, "source": "table provenance"}


def _count(value) -> str:
    return str(len(value)) if isinstance(value, list | tuple) else str(value)


def repeats_in_words(value: dict) -> str:
    """A structured `repeats` stamp as a reader says it: "30 timed forwards; 3 reruns of 4 prompts ×
    3 seeds × 96 tokens"; keys it does not know read as "key value"."""
    value = dict(value)
    parts = []
    if "timing_reps" in value:
        setup = " × ".join(f"{_count(value.pop(k))} {word}" for k, word in
                           (("prompts", "prompts"), ("seeds", "seeds"), ("new_tokens", "tokens")) if k in value)
        parts.append(f"{value.pop('timing_reps')} reruns" + (f" of {setup}" if setup else ""))
    if "forward_reps" in value:
        reps, calls = value.pop("forward_reps"), value.pop("forward_calls", None)
        parts.insert(0, f"{reps} timed forwards" if calls is None else f"{reps} reps of each forward ({calls})")
    if "quality" in value:
        parts.append(f"quality: {value.pop('quality')}")
    if "speed_reps" in value:
        parts.append(f"speed: {value.pop('speed_reps')} timed reruns")
    parts += [f"{k.replace('_', ' ')} {_count(v)}" for k, v in value.items()]
    return "; ".join(parts)


def _repeats(value, default: str) -> str:
    if value in (None, "") or isinstance(value, str):
        return value or default
    if isinstance(value, dict):
        return repeats_in_words(value)
    return f"{value} ({default})" if default != "n/a" else str(value)


def stamps_for(data: ReportInputs, key: str, repeats: str, baseline: str, fallback_machine: dict | None) -> dict:
    """A milestone's stamps from table `key`'s provenance; `repeats` and `baseline` where it records none."""
    prov = data.provenance.get(key, {})
    base = prov.get("baseline")
    return {"model": _model_stamp(data, prov), "machine": _machine_stamp(prov, fallback_machine),
            "repeats": _repeats(prov.get("repeats"), repeats),
            "baseline": baseline if base in (None, "") else base if isinstance(base, str)
            else json.dumps(base, ensure_ascii=False)}


def stamp_line(stamps: dict) -> str:
    """The four stamps in one line: model, machine (with node), repeats, baseline."""
    model, machine = stamps.get("model") or {}, stamps.get("machine") or {}
    node = f" on {machine['node']}" if machine.get("node") else ""
    device = machine.get("device_name") or machine.get("cpu_model")
    imported = " (imported)" if stamps.get("imported") else ""
    return (f"model {model.get('model')}{imported} · machine {device} ({machine.get('device')}){node} · "
            f"repeats {stamps.get('repeats')} · baseline {stamps.get('baseline')}")


def stamp_lines(stamps: dict) -> list[str]:
    """The stamp lines under a milestone: model, machine (with its node), repeats, baseline, and the
    timing caveats (contended, different nodes) when the check found them."""
    model, machine = stamps.get("model") or {}, stamps.get("machine") or {}
    sha = str(model.get("checkpoint_sha256") or "n/a")
    dirty = {True: " (dirty)", False: "", None: " (dirty flag unknown)"}.get(machine.get("git_dirty"), "")
    lines = [
        f"Model: {model.get('model')}, {fmt(model.get('params')) or 'n/a'} params, checkpoint sha256 {sha[:16]}…, "
        f"val loss {fmt(model.get('val_loss')) or 'n/a'}"
        + (f"; imported from {stamps['imported']}" if stamps.get("imported") else ""),
        f"Machine: {machine.get('device_name') or machine.get('cpu_model')} ({machine.get('device')})"
        + (f" on node {machine['node']}" if machine.get("node") else "")
        + f", CPU {machine.get('cpu_model')}, {machine.get('cpu_cores')} cores, {machine.get('torch_threads')} torch "
        f"threads, torch {machine.get('torch_version')}, {machine.get('os')}, "
        f"git {str(machine.get('git_commit'))[:12]}{dirty}"
        + (f", code {stamps['code_sha256']}" if stamps.get("code_sha256") else "")
        + (f" [stamp from {machine.get('source')}]" if machine.get("source") not in (None, "table provenance") else ""),
        f"Repeats: {stamps.get('repeats')}",
        f"Baseline: {stamps.get('baseline')}",
    ]
    if stamps.get("contended"):
        lines.append("Timing: contended (other work loaded the machine during the timing jobs)")
    if len(stamps.get("nodes") or []) > 1:
        lines.append(f"Timing: not comparable (different nodes: {', '.join(stamps['nodes'])})")
    return lines


def _milestone_row(m) -> dict:
    model, machine = m.stamps.get("model", {}), m.stamps.get("machine", {})
    return {"milestone": m.id, "title": m.title, "status": m.status, "headline": m.headline, "verdict": m.verdict,
            "evidence_json": json.dumps(asdict(m.evidence) if is_dataclass(m.evidence) else m.evidence,
                                        ensure_ascii=False, sort_keys=True, default=str),
            "problems": "; ".join(m.problems), "missing_inputs": "; ".join(m.missing_inputs),
            "stale_inputs": "; ".join(f"{key} ({why})" for key, why in (m.stale.reasons if m.stale else {}).items()),
            "model": model.get("model"),
            **{f"model_{k}": model.get(k) for k in ("params", "checkpoint_sha256", "val_loss")},
            **{f"machine_{k}": machine.get(k) for k in TABLE_MACHINE_KEYS},
            "machine_stamp_source": machine.get("source"),
            "repeats": m.stamps.get("repeats"), "baseline": m.stamps.get("baseline")}


def milestones_table(milestones: list) -> pd.DataFrame:
    """results/milestones.parquet: one row per milestone, evidence as JSON, stamps as flat columns."""
    df = pd.DataFrame([_milestone_row(m) for m in milestones])
    for col in ("model_params", "machine_cpu_cores", "machine_torch_threads"):
        df[col] = pd.to_numeric(df[col], errors="coerce").astype("Int64")
    df["model_val_loss"] = pd.to_numeric(df["model_val_loss"], errors="coerce")
    df["machine_git_dirty"] = df["machine_git_dirty"].astype("boolean")
    return df
