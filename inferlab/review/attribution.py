"""Why a metric moved: the nearest recorded difference between two runs' causes records.

For one metric, the walk starts at the table that holds it (the metrics table's `source`) and
goes up the DAG through every input whose recorded sha256 differs. At each job it names every
recorded difference, most specific first:
  1. config:  its resolved settings (named by their config path where the run's config shows
              the same old → new change);
  2. code:    its rule's code hash, named module by module (or library: only the numeric stack's
              versions moved);
  3. input:   an input that moved, with that input's own causes (a file without lineage of its
              own, such as the corpus, by its sha256); inputs moved by the same cause read as one;
  4. machine: the same job ran on another machine (same_machine: another fingerprint, device or host).
A job's own change does not hide the others: a job whose code changed while it read a checkpoint
retrained on another CPU names both, since either can have moved its numbers.
A deterministic metric that moved with none of these recorded is **unexplained**: the lab is
not reproducible at that point. A timing is also judged against the machines' own stamps and
this run's probe (calibration), since the same code runs at another speed on another VM.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath

from inferlab.review.causes import META_FILE, WEIGHTS_SUFFIX, lineage_key
from inferlab.review.milestone_map import MILESTONE_INPUTS

UNEXPLAINED, CONFIG, CODE, LIBRARY, INPUT, MACHINE, CONTENDED, NOISE, NOT_RECORDED = (
    "unexplained", "config", "code", "library", "input", "machine", "contended", "noise", "not recorded")
# How the diff orders causes: a determinism bug first, then the most specific cause.
CAUSE_ORDER = [UNEXPLAINED, CONFIG, CODE, LIBRARY, INPUT, MACHINE, CONTENDED, NOT_RECORDED, NOISE]
# Between a metric's causes in the diff's `cause` column; "; " already separates a cause's own parts
# (two settings, two machine fields)
CAUSE_SEPARATOR = " · "

# The machine-stamp fields a job's results can depend on, with how a change is named.
MACHINE_FIELDS = {"cpu_model": "CPU", "cpu_kernel_flags": "kernel flags", "cpu_caches": "caches",
                  "memory_gib": "memory GiB", "cpu_cores": "cores", "torch_threads": "torch threads",
                  "device_name": "device", "node": "node"}
# What makes two stamps the same machine (same_machine): the hardware fingerprint
# (inferlab.jobs.machine.hardware_fingerprint), the device the job ran on, and the host, since two
# hosts of one hardware kind still time differently. Two stamps from before the fingerprint compare by
# the fields it hashes; against a fingerprinted one, such a stamp cannot be told apart, so it differs.
IDENTITY_FIELDS = ("fingerprint", "device_name", "node")
UNFINGERPRINTED_IDENTITY = ("cpu_model", "cpu_cores", "cpu_caches", "memory_gib", "device_name", "node")
# Two probes of one machine agree within this ratio; beyond it the machines run at other speeds.
CALIBRATION_RATIO = 1.2
CALIBRATION_FIELDS = {"bandwidth_GB_per_s": ("probe bandwidth", "GB/s"),
                      "peak_GFLOP_per_s": ("probe matmul", "GFLOP/s")}


@dataclass(frozen=True)
class Cause:
    kind: str
    text: str  # the same for every metric one difference moved, so the diff can group by it

    def __str__(self) -> str:
        return f"{self.kind}: {self.text}"


def label(path: str) -> str:
    parts = PurePosixPath(lineage_key(path)).parts
    if parts[-1] == META_FILE and len(parts) >= 2:
        return f"checkpoint {parts[-2]}"
    return str(path)


# A setting's value longer than this (a grid of cells, a list of prompts) is named by its size.
SHOWN_VALUE_CHARS = 60


def shown_value(value) -> str:
    """A setting's value as a cause names it: absent, a short number, or a long list by its size."""
    if value is None:
        return "absent"
    if isinstance(value, float):
        return f"{value:g}"
    text = str(value)
    if len(text) <= SHOWN_VALUE_CHARS:
        return text
    if isinstance(value, list | tuple | Mapping):
        return f"[{len(value)} entries]" if len(value) != 1 else "[1 entry]"
    return text[:SHOWN_VALUE_CHARS - 1] + "…"


def flatten(value, prefix: str = "") -> dict[str, object]:
    """{dotted path: leaf} of nested dicts; lists and scalars are leaves."""
    if isinstance(value, Mapping):
        out = {}
        for key, inner in value.items():
            out.update(flatten(inner, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: value}


def leaf_changes(old, new) -> dict[str, tuple]:
    old_flat, new_flat = flatten(old or {}), flatten(new or {})
    return {key: (old_flat.get(key), new_flat.get(key)) for key in sorted(old_flat.keys() | new_flat.keys())
            if old_flat.get(key) != new_flat.get(key)}


def config_changes(old_settings, new_settings, old_config, new_config) -> list[str]:
    """'path old → new' per changed setting, named by the config path that made the same change
    (e.g. the rule's `gptq.damp` is the config's `quantization.gptq.damp`)."""
    in_config = leaf_changes(old_config, new_config)
    named = []
    for key, change in leaf_changes(old_settings, new_settings).items():
        paths = [p for p, c in in_config.items() if c == change]
        last = key.rsplit(".", 1)[-1]
        paths = [p for p in paths if p.rsplit(".", 1)[-1] == last] or paths
        for path in paths or [key]:
            named.append(f"{path} {shown_value(change[0])} → {shown_value(change[1])}")
    return sorted(set(named))


def _module_path(name: str, modules: Mapping[str, str]) -> str:
    is_package = any(other.startswith(name + ".") for other in modules)
    return "/".join(name.split(".")) + ("/__init__.py" if is_package else ".py")


def code_changes(rule: str, old_rule: Mapping | None, new_rule: Mapping | None) -> Cause:
    """The modules (or numeric-stack versions) that make a rule's code hash differ."""
    if not old_rule or not new_rule or old_rule.get("modules") is None or new_rule.get("modules") is None:
        return Cause(CODE, f"{rule} (its code hash differs; the modules behind it were not recorded)")
    old_modules, new_modules = old_rule["modules"], new_rule["modules"]
    changed = [_module_path(m, {**old_modules, **new_modules}) for m in sorted(old_modules.keys() | new_modules.keys())
               if old_modules.get(m) != new_modules.get(m)]
    if old_rule.get("script") != new_rule.get("script"):
        changed.insert(0, f"the script of {rule}")
    if changed:
        return Cause(CODE, f"{rule}: {', '.join(changed)}")
    versions = leaf_changes(old_rule.get("versions"), new_rule.get("versions"))
    if versions:
        return Cause(LIBRARY, ", ".join(f"{k} {shown_value(a)} → {shown_value(b)}" for k, (a, b) in versions.items()))
    return Cause(CODE, f"{rule} (its code hash differs, but not in a recorded module)")


def same_machine(old: Mapping, new: Mapping) -> bool:
    """The one definition of "the same machine" that the diff, the report and the causes use."""
    fields = IDENTITY_FIELDS if old.get("fingerprint") or new.get("fingerprint") else UNFINGERPRINTED_IDENTITY
    return all(old.get(field) == new.get(field) for field in fields)


def machine_changes(old: Mapping | None, new: Mapping | None) -> str | None:
    """How two machines differ ('CPU A → B; node x → y'), or None when they are the same machine
    (same_machine) or either is unknown. The fingerprint is named when no other field tells them apart."""
    if not old or not new or same_machine(old, new):
        return None
    on_cpu = all(stamp.get("device_name") == stamp.get("cpu_model") for stamp in (old, new))
    shown = {field: name for field, name in MACHINE_FIELDS.items() if not (on_cpu and field == "device_name")}
    parts = [f"{name} {shown_value(old.get(field))} → {shown_value(new.get(field))}"
             for field, name in shown.items() if field in old or field in new
             if old.get(field) != new.get(field)]
    fingerprints = (shown_value(stamp.get("fingerprint")) for stamp in (old, new))
    return "; ".join(parts) or "fingerprint {} → {}".format(*fingerprints)


def calibration_changes(old: Mapping | None, new: Mapping | None) -> str | None:
    """'probe bandwidth 121 → 186 GB/s' where this run's probe differs from the other's by more than
    CALIBRATION_RATIO; None when they agree or either run has no probe."""
    if not old or not new:
        return None
    parts = []
    for field, (name, unit) in CALIBRATION_FIELDS.items():
        a, b = old.get(field), new.get(field)
        if a is None or b is None or not (a > 0 and b > 0) or math.isnan(a) or math.isnan(b):
            continue
        if max(a, b) / min(a, b) > CALIBRATION_RATIO:
            parts.append(f"{name} {a:.3g} → {b:.3g} {unit}")
    return "; ".join(parts) or None


class Walk:
    """The lineage walk over two causes records (old, new), cached per file."""

    def __init__(self, old: Mapping, new: Mapping):
        self.old, self.new = old, new
        self._cache: dict[str, list[Cause] | None] = {}

    def entries(self, path: str) -> tuple[Mapping | None, Mapping | None]:
        key = lineage_key(path)
        return self.old.get("files", {}).get(key), self.new.get("files", {}).get(key)

    def file_causes(self, path: str) -> list[Cause] | None:
        """The nearest recorded differences behind one file; [] when both runs recorded it the same,
        None when either run did not record it."""
        key = lineage_key(path)
        if key not in self._cache:
            self._cache[key] = None  # a cycle (none exist in a DAG) ends here
            self._cache[key] = self._differences(*self.entries(path))
        return self._cache[key]

    def _differences(self, old: Mapping | None, new: Mapping | None) -> list[Cause] | None:
        if old is None or new is None:
            return None
        own = []  # the job itself differs: its settings, its code, or both
        if old.get("config_sha256") != new.get("config_sha256"):
            named = config_changes(old.get("settings"), new.get("settings"), self.old.get("config"),
                                   self.new.get("config"))
            own.append(Cause(CONFIG, "; ".join(named) if named and old.get("settings") is not None
                             else f"{new.get('rule')} settings (values not recorded)"))
        if old.get("code_sha256") != new.get("code_sha256"):
            rule = new.get("rule")
            own.append(code_changes(rule, self.old.get("rules", {}).get(rule), self.new.get("rules", {}).get(rule)))
        inputs = []
        old_inputs, new_inputs = old.get("inputs_sha256") or {}, new.get("inputs_sha256") or {}
        for path in sorted(old_inputs.keys() | new_inputs.keys()):
            if old_inputs.get(path) != new_inputs.get(path) and not self._same_checkpoint(path, old_inputs, new_inputs):
                inputs += self._input_causes(path, old_inputs.get(path), new_inputs.get(path))
        # A job whose own code changed may also read inputs that moved, and run on another machine:
        # each is named, since any of them can be what moved its numbers (a checkpoint retrained on
        # a CPU with other bf16 kernels moves everything downstream, whatever else changed).
        # an input moved by the same change as the job itself (a setting both read) is that change
        inputs = [c for c in inputs if not any(c.text.endswith(f": {o}") for o in own)]
        moved = machine_changes(old.get("machine"), new.get("machine"))
        machine = [Cause(MACHINE, f"{new.get('rule')}{_RAN_ON_ANOTHER_MACHINE}{moved}")] if moved else []
        return _unique(own + _merge_inputs(inputs) + machine)

    def _same_checkpoint(self, path: str, old_inputs: Mapping, new_inputs: Mapping) -> bool:
        """A checkpoint's meta.json also records how long its training took, so a retraining to the
        same weights rewrites it: with the same weights (the input beside it, or the hash each run's
        meta.json records), the checkpoint is the same."""
        if PurePosixPath(path).name != META_FILE:
            return False
        weights = str(PurePosixPath(path).with_name(WEIGHTS_SUFFIX))
        if weights in old_inputs and weights in new_inputs:
            return old_inputs[weights] == new_inputs[weights]
        old, new = ((entry or {}).get("weights_sha256") for entry in self.entries(path))
        return old is not None and old == new

    def _input_causes(self, path: str, old_sha, new_sha) -> list[Cause]:
        upstream = self.file_causes(path)
        if upstream is None:  # a file without lineage (the corpus) or one a run did not record
            if old_sha is None or new_sha is None:
                return [Cause(INPUT, f"{label(path)}{_ADDED if old_sha is None else _REMOVED}")]
            return [Cause(INPUT, f"{label(path)} changed (sha256 {str(old_sha)[:8]} → {str(new_sha)[:8]})")]
        if not upstream:
            rule = (self.entries(path)[1] or {}).get("rule")
            return [Cause(UNEXPLAINED, f"{label(path)}{_NOTHING_RECORDED_DIFFERS} ({rule}) records "
                                       "differs: that job is not deterministic")]
        verb = " retrained" if label(path).startswith("checkpoint ") else ""
        return [c if c.kind in (INPUT, MACHINE, UNEXPLAINED) else Cause(INPUT, f"{label(path)}{verb}: {c}")
                for c in upstream]


_NOTHING_RECORDED_DIFFERS = " changed though nothing its job"
_ADDED, _REMOVED = " added as an input", " removed as an input"
_MANY = {_ADDED: " added as inputs", _REMOVED: " removed as inputs"}
_RAN_ON_ANOTHER_MACHINE = " ran on another machine: "


def job_on_another_machine(cause_text: str) -> tuple[str, str] | None:
    """(job, how its machine differs) from a job's machine cause ("machine: <job> ran on another
    machine: <change>"), or None for any other cause."""
    kind, _, text = cause_text.partition(": ")
    job, sep, moved = text.partition(_RAN_ON_ANOTHER_MACHINE)
    return (job, moved) if kind == MACHINE and sep else None


def unexplained_input(cause: Cause) -> str | None:
    """The input an unexplained cause names (a table that changed with nothing its job records
    differing), or None for any other cause."""
    head, sep, _ = cause.text.partition(_NOTHING_RECORDED_DIFFERS)
    return head if cause.kind == UNEXPLAINED and sep else None


def _merge_inputs(causes: list[Cause]) -> list[Cause]:
    """Input causes that differ only by the file (thirty grid cells of one rule, all moved by the
    same code change, or no longer read by a smaller grid) read as one: the first file and how many more."""
    by_reason: dict[tuple[str, str], list[str]] = {}
    for cause in causes:
        head, reason = _file_and_reason(cause)
        by_reason.setdefault((cause.kind, reason), []).append(head)
    merged = []
    for (kind, reason), repeated in by_reason.items():
        heads = sorted(set(repeated))  # a checkpoint's weights and meta.json are one input
        if reason in _MANY:
            merged.append(Cause(kind, heads[0] + (reason if len(heads) == 1 else
                                                  f" and {len(heads) - 1} more{_MANY[reason]}")))
        elif kind != INPUT or len(heads) == 1:
            merged.append(Cause(kind, f"{heads[0]}: {reason}" if heads[0] else reason))
        else:
            merged.append(Cause(kind, f"{heads[0]} and {len(heads) - 1} more like it: {reason}"))
    return merged


def _file_and_reason(cause: Cause) -> tuple[str, str]:
    """(the input file, what moved it) of an input cause; ("", the text) for any other cause."""
    if cause.kind != INPUT:
        return "", cause.text
    for ending in _MANY:
        if cause.text.endswith(ending):
            return cause.text[:-len(ending)], ending
    head, sep, reason = cause.text.partition(": ")
    return (head, reason) if sep else ("", cause.text)


def _unique(causes: list[Cause]) -> list[Cause]:
    return sorted(set(causes), key=lambda c: (CAUSE_ORDER.index(c.kind), c.text))


def source_files(source: str | None, record: Mapping) -> list[str]:
    """The files a metric's `source` stands for: one table, a checkpoint, or a milestone's tables."""
    sources = record.get("sources") or {}
    if source and source.startswith("milestones/"):
        inputs = MILESTONE_INPUTS.get(source.split("/", 1)[1])
        keys = inputs.tables if inputs else ()
    else:
        keys = (source,) if source else ()
    return [sources[k] for k in keys if k in sources]


def lineage_causes(source: str | None, old: Mapping | None, new: Mapping | None,
                   walk: Walk | None = None) -> list[Cause] | None:
    """The recorded differences behind a metric's source table(s); None when a run recorded no lineage."""
    if not old or not new:
        return None
    walk = walk or Walk(old, new)
    files = source_files(source, new) or source_files(source, old)
    found = [walk.file_causes(path) for path in files]
    if not files or any(f is None for f in found):
        return None
    return _unique([c for f in found for c in f])
