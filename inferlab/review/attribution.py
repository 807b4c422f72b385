"""Why a metric moved: the nearest recorded differences between two runs' lineage graphs, as Causes.

From the table that holds a metric (its `source`), the comparison goes up both runs' graphs
(inferlab.review.lineage_graph) through every input whose recorded sha256 differs, and at each job
names every recorded difference, most specific first: its settings (config, by the config path that
made the same change), its code (code: module by module; library: only the numeric stack moved), an
input that moved (with that input's own causes; inputs moved by one cause read as one), and the
machine it ran on (same_machine). A job's own change does not hide the others: a job whose code
changed while it read a checkpoint retrained on another CPU names both. A deterministic metric that
moved with none of these recorded is **unexplained**: the lab is not reproducible at that point.

render() is the only place a Cause becomes text: whatever needs a cause's job, input or values reads
its fields, never its text.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import PurePosixPath

from inferlab.experiments import MILESTONES
from inferlab.review.lineage_graph import META_FILE, WEIGHTS_FILE, LineageGraph, lineage_key
from inferlab.review.numbers import fmt

UNEXPLAINED, CONFIG, CODE, LIBRARY, INPUT, MACHINE, CONTENDED, NOISE, NOT_RECORDED = (
    "unexplained", "config", "code", "library", "input", "machine", "contended", "noise", "not recorded")
# a determinism bug first, then the most specific cause
CAUSE_ORDER = [UNEXPLAINED, CONFIG, CODE, LIBRARY, INPUT, MACHINE, CONTENDED, NOT_RECORDED, NOISE]
# Between a metric's causes in the diff's `cause` column; "; " already separates a cause's own parts
# (two settings, two machine fields)
CAUSE_SEPARATOR = " · "
# the causes that name no job and no field
FIXED_TEXT = {
    UNEXPLAINED: "a deterministic number moved and nothing recorded differs",
    CODE: "milestone stale: its tables were made by other code or inputs than the checkout that built the report "
          "(the report checks every table's lineage against the current code)",
    CONTENDED: "a run was contended (other work loaded the machine while it timed)",
    NOISE: "nothing recorded differs (code, config, inputs, machine): load or noise beyond the rep range",
    NOT_RECORDED: "the older run records no lineage, so its code and config cannot be compared",
}
SCRIPT = "<script>"  # among a code cause's fields: the rule's own script, beside the modules it imports
# A setting's value longer than this (a grid of cells, a list of prompts) is named by its size.
SHOWN_VALUE_CHARS = 60

# the machine-stamp fields a job's results can depend on, as a cause names them
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
    """One recorded difference, by kind (CAUSE_ORDER).

    rule: the job the cause names; field: what differs (config paths, modules, packages, machine
        fields, input files, tables measured again), None where the runs did not record it;
    old, new: per field, its value in each run (an input's sha256; None where a run did not read it);
    via: for an input, the cause upstream that moved it.
    """

    kind: str
    rule: str | None = None
    field: tuple | None = ()
    old: tuple = ()
    new: tuple = ()
    via: Cause | None = None

    @classmethod
    def changed(cls, kind: str, moves: Mapping[str, tuple], rule: str | None = None) -> Cause:
        """From {field: (old, new)}."""
        return cls(kind, rule, tuple(moves), *(tuple(pair[i] for pair in moves.values()) for i in (0, 1)))

    @property
    def identity(self) -> str:
        """Every field, upstream causes included, canonically: two causes are one exactly when this is equal
        (a setting's value may be a list or a mapping, so the dataclass itself does not hash)."""
        return json.dumps(asdict(self), sort_keys=True, default=str, ensure_ascii=False)


def render(c: Cause, with_kind: bool = True, input_joiner: str = ": ") -> str:
    """The cause as text, '<kind>: <what differs>'. input_joiner: between an input and the cause that moved
    it (": " in the diff's `cause` column, " — from " where a group lists its causes one per line)."""
    if with_kind:
        return f"{c.kind}: {render(c, False, input_joiner)}"
    if c.kind in FIXED_TEXT and c.rule is None and c.field == ():
        return FIXED_TEXT[c.kind]
    first, more = (label(c.field[0]), len(c.field) - 1) if c.field else ("", 0)
    if c.kind == INPUT and c.via is not None:
        retrained = " retrained" if first != c.field[0] else ""  # a checkpoint: its model was trained again
        return f"{first}{retrained}{f' and {more} more like it' if more else ''}{input_joiner}{render(c.via)}"
    if c.kind == INPUT and None in (c.old[0], c.new[0]):
        how = "added" if c.old[0] is None else "removed"
        return f"{first} and {more} more {how} as inputs" if more else f"{first} {how} as an input"
    if c.kind == INPUT:
        return f"{first} changed (sha256 {str(c.old[0])[:8]} → {str(c.new[0])[:8]})"
    if c.kind == UNEXPLAINED:
        return f"{first} changed though nothing its job ({c.rule}) records differs: that job is not deterministic"
    if c.kind == NOISE:
        others = f" and {more} more" if more else ""
        return f"{first}{others} measured again, with nothing else its job records differing"
    if c.kind == CODE and c.field:
        return f"{c.rule}: " + ", ".join(f"the script of {c.rule}" if f == SCRIPT else f for f in c.field)
    if c.kind == CODE:
        why = "; the modules behind it were not recorded" if c.field is None else ", but not in a recorded module"
        return f"{c.rule} (its code hash differs{why})"
    if c.field is None:
        return f"{c.rule} settings (values not recorded)"
    names = MACHINE_FIELDS if c.kind == MACHINE else {}
    moves = [_move(*move, names) for move in zip(c.field, c.old, c.new, strict=True)]
    moves = (", " if c.kind == LIBRARY else "; ").join(moves)
    return f"{c.rule} ran on another machine: {moves}" if c.rule else moves


def _move(field: str, old, new, names: Mapping[str, str]) -> str:
    if field in CALIBRATION_FIELDS:
        name, unit = CALIBRATION_FIELDS[field]
        return f"{name} {fmt(old, ' ' + unit)} → {fmt(new, ' ' + unit)}"
    return f"{names.get(field, field)} {shown_value(old)} → {shown_value(new)}"


def label(path: str) -> str:
    """A file as a cause names it: a checkpoint (its weights or meta.json) by its model."""
    parts = PurePosixPath(lineage_key(path)).parts
    return f"checkpoint {parts[-2]}" if parts[-1] == META_FILE and len(parts) >= 2 else str(path)


def shown_value(value) -> str:
    text = "absent" if value is None else fmt(value) if isinstance(value, float) else str(value)
    if len(text) <= SHOWN_VALUE_CHARS:
        return text
    if isinstance(value, list | tuple | Mapping):
        return f"[{len(value)} entries]" if len(value) != 1 else "[1 entry]"
    return text[:SHOWN_VALUE_CHARS - 1] + "…"


def flatten(value, prefix: str = "") -> dict[str, object]:
    """{dotted path: leaf} of nested dicts; lists and scalars are leaves."""
    if not isinstance(value, Mapping):
        return {prefix: value}
    return {path: leaf for key, inner in value.items()
            for path, leaf in flatten(inner, f"{prefix}.{key}" if prefix else str(key)).items()}


def leaf_changes(old, new) -> dict[str, tuple]:
    """{dotted path: (old, new)} for every leaf that differs, in path order."""
    old_flat, new_flat = flatten(old or {}), flatten(new or {})
    return {key: (old_flat.get(key), new_flat.get(key)) for key in sorted(old_flat.keys() | new_flat.keys())
            if old_flat.get(key) != new_flat.get(key)}


def config_changes(old_settings, new_settings, old_config, new_config) -> dict[str, tuple]:
    """{path: (old, new)} per changed setting, named by the config path that made the same change
    (e.g. the rule's `gptq.damp` is the config's `quantization.gptq.damp`)."""
    in_config = leaf_changes(old_config, new_config)
    named = {}
    for key, change in leaf_changes(old_settings, new_settings).items():
        paths = [p for p, c in in_config.items() if c == change]
        last = key.rsplit(".", 1)[-1]
        paths = [p for p in paths if p.rsplit(".", 1)[-1] == last] or paths
        named.update((path, change) for path in paths or [key])
    return dict(sorted(named.items()))


def _module_path(name: str, modules: Mapping[str, str]) -> str:
    is_package = any(other.startswith(name + ".") for other in modules)
    return "/".join(name.split(".")) + ("/__init__.py" if is_package else ".py")


def code_changes(rule: str, old_rule: Mapping | None, new_rule: Mapping | None) -> Cause:
    """The modules (or numeric-stack versions) that make a rule's code hash differ."""
    if not old_rule or not new_rule or old_rule.get("modules") is None or new_rule.get("modules") is None:
        return Cause(CODE, rule, field=None)
    old_modules, new_modules = old_rule["modules"], new_rule["modules"]
    changed = [_module_path(m, {**old_modules, **new_modules}) for m in sorted(old_modules.keys() | new_modules.keys())
               if old_modules.get(m) != new_modules.get(m)]
    if old_rule.get("script") != new_rule.get("script"):
        changed.insert(0, SCRIPT)
    if changed:
        return Cause(CODE, rule, tuple(changed))
    versions = leaf_changes(old_rule.get("versions"), new_rule.get("versions"))
    return Cause.changed(LIBRARY, versions) if versions else Cause(CODE, rule)


def same_machine(old: Mapping, new: Mapping) -> bool:
    """The one definition of "the same machine": the diff, the report and the causes use it."""
    fields = IDENTITY_FIELDS if old.get("fingerprint") or new.get("fingerprint") else UNFINGERPRINTED_IDENTITY
    return all(old.get(field) == new.get(field) for field in fields)


def machine_moves(old: Mapping | None, new: Mapping | None) -> dict[str, tuple]:
    """{stamp field: (old, new)} where two machines differ; {} when they are the same machine
    (same_machine) or either is unknown. The fingerprint is named when no other field tells them apart."""
    if not old or not new or same_machine(old, new):
        return {}
    on_cpu = all(stamp.get("device_name") == stamp.get("cpu_model") for stamp in (old, new))
    moved = {field: (old.get(field), new.get(field)) for field in MACHINE_FIELDS
             if not (on_cpu and field == "device_name") and (field in old or field in new)
             and old.get(field) != new.get(field)}
    return moved or {"fingerprint": (old.get("fingerprint"), new.get("fingerprint"))}


def calibration_moves(old: Mapping | None, new: Mapping | None) -> dict[str, tuple]:
    """{probe rate: (old, new)} where this run's probe differs from the other's by more than
    CALIBRATION_RATIO; {} when they agree or either run has no probe."""
    pairs = {field: (old.get(field), new.get(field)) for field in CALIBRATION_FIELDS} if old and new else {}
    return {field: (a, b) for field, (a, b) in pairs.items()
            if a is not None and b is not None and a > 0 and b > 0 and max(a, b) / min(a, b) > CALIBRATION_RATIO}


class Comparison:
    """Two runs' lineage graphs (kept in their causes records) compared file by file, each file once."""

    def __init__(self, old: Mapping, new: Mapping):
        self.old, self.new = old, new
        self.graphs = LineageGraph.of_record(old), LineageGraph.of_record(new)
        self._cache: dict[str, list[Cause] | None] = {}

    def source_causes(self, source: str | None) -> list[Cause] | None:
        """The recorded differences behind a metric's source table(s); None when a run did not record them."""
        files = source_files(source, self.new) or source_files(source, self.old)
        found = [self.file_causes(path) for path in files]
        return unique([c for f in found for c in f]) if files and None not in found else None

    def jobs(self, path: str) -> tuple[Mapping | None, Mapping | None]:
        return self.graphs[0].job(path), self.graphs[1].job(path)

    def file_causes(self, path: str) -> list[Cause] | None:
        """The nearest recorded differences behind one file; [] when both runs recorded it the same,
        None when either run did not record it."""
        key = lineage_key(path)
        if key not in self._cache:
            self._cache[key] = None  # a cycle (none exist in a DAG) ends here
            self._cache[key] = self._differences(*self.jobs(path))
        return self._cache[key]

    def _differences(self, old: Mapping | None, new: Mapping | None) -> list[Cause] | None:
        if old is None or new is None:
            return None
        own = self._own_changes(old, new)
        inputs = []
        old_inputs, new_inputs = old.get("inputs_sha256") or {}, new.get("inputs_sha256") or {}
        for path in sorted(old_inputs.keys() | new_inputs.keys()):
            if old_inputs.get(path) != new_inputs.get(path) and not self._same_checkpoint(path, old_inputs, new_inputs):
                inputs += self._input_causes(path, old_inputs.get(path), new_inputs.get(path))
        # A job whose own code changed may also read inputs that moved, and run on another machine:
        # each is named, since any of them can be what moved its numbers (a checkpoint retrained on
        # a CPU with other bf16 kernels moves everything downstream, whatever else changed).
        # An input moved by the same change as the job itself (a setting both read) is that change.
        inputs = [c for c in inputs if c.via not in own]
        moved = machine_moves(old.get("machine"), new.get("machine"))
        machine = [Cause.changed(MACHINE, moved, rule=new.get("rule"))] if moved else []
        return unique(own + _merge_inputs(inputs) + machine)

    def _own_changes(self, old: Mapping, new: Mapping) -> list[Cause]:
        """The job itself differs: its settings, its code, or both."""
        own, rule = [], new.get("rule")
        if old.get("config_sha256") != new.get("config_sha256"):
            named = config_changes(old.get("settings"), new.get("settings"), self.old.get("config"),
                                   self.new.get("config"))
            recorded = named and old.get("settings") is not None
            own.append(Cause.changed(CONFIG, named) if recorded else Cause(CONFIG, rule, field=None))
        if old.get("code_sha256") != new.get("code_sha256"):
            own.append(code_changes(rule, self.old.get("rules", {}).get(rule), self.new.get("rules", {}).get(rule)))
        return own

    def _same_checkpoint(self, path: str, old_inputs: Mapping, new_inputs: Mapping) -> bool:
        """A checkpoint's meta.json also records how long its training took, so a retraining to the
        same weights rewrites it: with the same weights (the input beside it, or the hash each run's
        meta.json records), the checkpoint is the same."""
        if PurePosixPath(path).name != META_FILE:
            return False
        weights = str(PurePosixPath(path).with_name(WEIGHTS_FILE))
        if weights in old_inputs and weights in new_inputs:
            return old_inputs[weights] == new_inputs[weights]
        old, new = ((job or {}).get("weights_sha256") for job in self.jobs(path))
        return old is not None and old == new

    def _input_causes(self, path: str, old_sha, new_sha) -> list[Cause]:
        upstream = self.file_causes(path)
        if upstream is None:  # a file without lineage (the corpus) or one a run did not record
            return [Cause(INPUT, field=(path,), old=(old_sha,), new=(new_sha,))]
        if not upstream:
            return [Cause(UNEXPLAINED, (self.jobs(path)[1] or {}).get("rule"), field=(path,))]
        return [c if c.kind in (INPUT, MACHINE, UNEXPLAINED) else
                Cause(INPUT, field=(path,), old=(old_sha,), new=(new_sha,), via=c) for c in upstream]


def _merge_inputs(causes: list[Cause]) -> list[Cause]:
    """Input causes that differ only by the file (thirty grid cells of one rule, all moved by the same
    code change, or no longer read by a smaller grid) read as one: the first file and how many more.
    A checkpoint's weights and meta.json are one input."""
    groups: dict[str, dict[str, Cause]] = {}
    for c in causes:
        if c.kind == INPUT and (c.via or None in (c.old[0], c.new[0])):  # moved upstream, added or removed
            alike = c.via.identity if c.via else "added" if c.old[0] is None else "removed"
            groups.setdefault(alike, {}).setdefault(label(c.field[0]), c)
        else:  # any other cause, or a file without lineage that changed (by its own sha256): only itself
            groups.setdefault(c.identity, {"": c})
    alike = [[group[name] for name in sorted(group)] for group in groups.values()]
    return [files[0] if len(files) == 1 else  # one cause: each file with its old and new sha256
            Cause(INPUT, None, *zip(*((c.field[0], c.old[0], c.new[0]) for c in files), strict=True), files[0].via)
            for files in alike]


def unique(causes: list[Cause]) -> list[Cause]:
    """Each cause once (equal in every field, whichever walk found it), most specific first; two that
    differ only where their text is cut (a sha256 beyond 8 digits, a long setting) stay two."""
    by_identity = {cause.identity: cause for cause in reversed(causes)}
    return sorted(by_identity.values(), key=lambda c: (CAUSE_ORDER.index(c.kind), render(c), c.identity))


def source_files(source: str | None, record: Mapping) -> list[str]:
    """The files a metric's `source` stands for: one table, a checkpoint, or a milestone's tables."""
    sources = record.get("sources") or {}
    if source and source.startswith("milestones/"):
        spec = MILESTONES.get(source.split("/", 1)[1])
        keys = spec.inputs if spec else ()
    else:
        keys = (source,) if source else ()
    return [sources[k] for k in keys if k in sources]
