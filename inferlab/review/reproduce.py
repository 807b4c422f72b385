"""Reproducing a published run from its checkpoints: the source, its checks, and the import.

A source is a reviewer bundle (reports/c13-bundle.zip of a run that bundled its checkpoints) or a finished
run's directory (its results/models/, results/noise/ and results/metrics.parquet). Both read as one set of
members named as in the bundle: `models/<name>/<file>`, `noise/seed<N>/<file>`, `metrics.parquet`.

Every check runs when the workflow is parsed, before any job, and ends in one ReproduceError:
- the source exists and is a whole zip (or a directory);
- the bundle's own sha256 equals reproduce_sha256 when one is given (the trust root from outside);
- every file its MANIFEST.sha256 lists has that sha256 (a directory's files are hashed as they are);
- it holds the checkpoints and the metrics of every model and noise rerun the config names;
- the training settings of the config are the published run's, and so is the corpus;
- every checkpoint's tensors have the shapes the config's models have.

The import jobs then copy each member out as a real file; the rules check its sha256 again (ensure).
Torch-free: the rule files import it at parse time.
"""

from __future__ import annotations

import hashlib
import json
import struct
import zipfile
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path, PurePosixPath

from inferlab.review.attribution import leaf_changes
from inferlab.review.bundle import MANIFEST_NAME

CHECKPOINT_FILES = ("model.safetensors", "meta.json", "loss_curve.parquet")
METRICS = "metrics.parquet"
BUNDLE_CONFIG = "config.json"
# What the checkpoints are a function of: a config that changes any of these asks for other models.
TRAINING_KEYS = ("architecture", "models", "corpus", "training", "target_model", "noise_floor.extra_seeds")


class ReproduceError(ValueError):
    """A source that cannot be reproduced from; its message is all the user sees."""


def model_member(name: str, file: str) -> str:
    return f"models/{name}/{file}"


def noise_member(seed: int, file: str) -> str:
    return f"noise/seed{seed}/{file}"


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Source:
    """A published run's members, read from a bundle or a run directory; `digest` is what reproduce_sha256
    names: the bundle file's sha256 (None for a directory, which has no published digest)."""

    path: Path
    kind: str  # "bundle" or "run directory"
    digest: str | None

    def read(self, member: str) -> bytes:
        if self.kind == "bundle":
            with zipfile.ZipFile(self.path) as archive:
                return archive.read(member)
        return (self.path / "results" / member).read_bytes()

    @cached_property
    def manifest(self) -> dict[str, str]:
        """{member: sha256}: the bundle's MANIFEST.sha256, or the run directory's files hashed now."""
        if self.kind == "bundle":
            text = self.read(MANIFEST_NAME).decode("utf-8")
            return {name: digest for digest, name in (line.split("  ", 1) for line in text.splitlines() if line)}
        results = self.path / "results"
        files = [results / METRICS, *sorted((results / "models").glob("*/*")), *sorted((results / "noise").glob("*/*"))]
        return {path.relative_to(results).as_posix(): sha256_bytes(path.read_bytes())
                for path in files if path.is_file() and path.name in (*CHECKPOINT_FILES, METRICS)}

    @property
    def label(self) -> str:
        """How the report and the messages name it: the bundle with its sha256, or the directory."""
        return f"bundle {self.path.name} (sha256 {self.digest[:16]}…)" if self.digest else f"run directory {self.path}"

    def json(self, member: str) -> dict:
        return json.loads(self.read(member).decode("utf-8"))

    def config(self) -> dict:
        """The published run's config: the bundle's config.json, else the one its metrics table recorded."""
        if self.kind == "bundle":
            return self.json(BUNDLE_CONFIG)
        from inferlab.jobs.tables import read_provenance  # here: the rule files import this module at every parse

        causes = read_provenance(self.path / "results" / METRICS).get("causes") or {}
        if not isinstance(causes.get("config"), dict):
            raise ReproduceError(f"{self.path / 'results' / METRICS} records no config, so the training settings "
                                 "cannot be checked: give the run's bundle instead")
        return causes["config"]


def open_source(path: str | Path, expected_sha256: str | None = None, workdir: str | Path | None = None) -> Source:
    """The source at path, whole and (for a bundle) the one expected_sha256 names; ReproduceError otherwise.
    workdir: the run's own directory, which cannot be its own source (its imports would overwrite themselves)."""
    path = Path(path)
    if workdir is not None and path.is_dir() and path.resolve() == Path(workdir).resolve():
        raise ReproduceError(f"{path} is this run's own directory: reproduce a run into another directory")
    if path.is_dir():
        if expected_sha256:
            raise ReproduceError(f"reproduce_sha256 names a bundle's sha256, and {path} is a run directory: "
                                 "give the bundle it published, or leave reproduce_sha256 out")
        if not (path / "results" / METRICS).is_file():
            raise ReproduceError(f"{path} is not a finished run's directory: it has no results/{METRICS}")
        return Source(path, "run directory", None)
    if not path.is_file():
        raise ReproduceError(f"reproduce={path}: no such bundle or run directory")
    digest = sha256_bytes(path.read_bytes())
    if expected_sha256 and digest != expected_sha256.lower():
        raise ReproduceError(f"{path} has sha256 {digest}, not the reproduce_sha256 {expected_sha256} you gave: "
                             "it is not the published bundle (re-download it, or check the sha256 you copied)")
    try:
        with zipfile.ZipFile(path) as archive:
            names = set(archive.namelist())
            broken = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError) as err:
        raise ReproduceError(f"{path} is not a whole zip file ({err}): a bundle cut short, or not a bundle") from err
    if broken is not None:
        raise ReproduceError(f"{path}: the member {broken} is damaged (its CRC does not match): re-download it")
    if MANIFEST_NAME not in names:
        raise ReproduceError(f"{path} has no {MANIFEST_NAME}, so it is not a reviewer bundle")
    return Source(path, "bundle", digest)


def checkpoint_members(config: dict) -> list[str]:
    """Every checkpoint file a run of this config holds, as the bundle names it (under results/ in a run)."""
    return [*(model_member(name, file) for name in config["models"] for file in CHECKPOINT_FILES),
            *(noise_member(seed, file) for seed in config["noise_floor"]["extra_seeds"] for file in CHECKPOINT_FILES)]


def config_problems(config: dict) -> list[str]:
    """The cross-key rule of the two settings, checked with the others whether or not a run reproduces."""
    if config.get("reproduce_sha256") and not config.get("reproduce"):
        return ["reproduce_sha256: given without reproduce: name the bundle it is the sha256 of "
                "(--config reproduce=c13-bundle.zip reproduce_sha256=…)"]
    return []


def required_members(config: dict) -> list[str]:
    """Every member a reproduction of this config imports: the checkpoints and the published metrics."""
    return [*checkpoint_members(config), METRICS]


def _settings(config: dict) -> dict:
    picked = {}
    for key in TRAINING_KEYS:
        value = config
        for part in key.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        picked[key] = value
    return picked


def training_differences(config: dict, published: dict) -> dict[str, tuple]:
    """{dotted key: (published, current)} for each training setting that differs."""
    return leaf_changes(json.loads(json.dumps(_settings(published))), json.loads(json.dumps(_settings(config))))


def expected_shapes(model_config: dict) -> dict[str, tuple[int, ...]]:
    """The tensors a checkpoint of inferlab.core.model.GPT with this config holds, by name (test_reproduce checks
    it against the model itself)."""
    d, v = model_config["d_model"], model_config["vocab_size"]
    hidden = model_config["mlp_ratio"] * d
    per_block = {"attn_norm.weight": (d,), "attn.qkv.weight": (3 * d, d), "attn.proj.weight": (d, d),
                 "mlp_norm.weight": (d,), "mlp.up.weight": (hidden, d), "mlp.down.weight": (d, hidden)}
    shapes = {"tok_emb.weight": (v, d), "final_norm.weight": (d,)}
    shapes.update({f"blocks.{i}.{name}": shape for i in range(model_config["n_layer"])
                   for name, shape in per_block.items()})
    return shapes


def safetensors_shapes(data: bytes) -> dict[str, tuple[int, ...]]:
    """{tensor: shape} from a safetensors file's header (its first 8 bytes give the header's length)."""
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    return {name: tuple(entry["shape"]) for name, entry in header.items() if name != "__metadata__"}


def _shape_problem(name: str, data: bytes, model_config: dict) -> str | None:
    try:
        found = safetensors_shapes(data)
    except (struct.error, ValueError, KeyError, TypeError) as err:
        return f"{name} is not a safetensors file ({err})"
    expected = expected_shapes(model_config)
    if found == expected:
        return None
    wrong = sorted(key for key in expected.keys() | found.keys() if found.get(key) != expected.get(key))
    first = wrong[0]
    return (f"{name} does not hold the model the config describes ({len(wrong)} tensor(s) differ; "
            f"{first}: {found.get(first, 'absent')} in the checkpoint, {expected.get(first, 'absent')} expected)")


def check_source(source: Source, config: dict, model_configs: dict[str, dict], corpus_sha256: str | None) -> dict:
    """Every check of the module docstring on a source; returns {member: sha256} of what the import copies.

    model_configs: {member folder ("models/<name>", "noise/seed<N>"): its GPTConfig dict}; corpus_sha256: the
    current corpus file's sha256, None when it is not known yet."""
    manifest = source.manifest
    if not any(name.startswith("models/") for name in manifest):
        raise ReproduceError(f"{source.label} holds no checkpoint (a bundle made before bundles carried the "
                             "models): it can be verified (sha256sum -c MANIFEST.sha256), not reproduced")
    wanted = required_members(config)
    missing = [name for name in wanted if name not in manifest]
    if missing:
        raise ReproduceError(f"{source.label} lacks {len(missing)} file(s) the config needs, first {missing[0]}: "
                             "the config names models or noise seeds the published run did not train")
    contents = {name: source.read(name) for name in [*wanted, *([BUNDLE_CONFIG] if source.kind == "bundle" else [])]}
    for name, data in contents.items():
        if sha256_bytes(data) != manifest.get(name):
            raise ReproduceError(f"{source.label}: {name} has sha256 {sha256_bytes(data)[:16]}…, its manifest says "
                                 f"{str(manifest.get(name))[:16]}…: the file was changed after the run published it")
    _check_training(source, config)
    for name, data in contents.items():
        folder = str(PurePosixPath(name).parent)
        problem = _shape_problem(name, data, model_configs[folder]) if name.endswith(".safetensors") else None
        trained_on = json.loads(data).get("corpus_sha256") if name.endswith("meta.json") else None
        if not problem and corpus_sha256 and trained_on and trained_on != corpus_sha256:
            problem = (f"{name} was trained on a corpus with sha256 {trained_on[:16]}…, and the corpus here has "
                       f"{corpus_sha256[:16]}…: give corpus_path the published run's corpus")
        if problem:
            raise ReproduceError(f"{source.label}: {problem}")
    return {name: manifest[name] for name in wanted}


def _check_training(source: Source, config: dict) -> None:
    differences = training_differences(config, source.config())
    if not differences:
        return
    named = "; ".join(f"{key}: {old!r} there, {new!r} here" for key, (old, new) in differences.items())
    hint = (f"unzip -p {source.path} config.yaml > published.yaml && ./run.sh --configfile published.yaml "
            f"--config reproduce={source.path}" if source.kind == "bundle"
            else "run with the config the published run used")
    raise ReproduceError(f"the training settings differ from the published run's, so its checkpoints are not "
                         f"this config's models ({named}). To reproduce it as published: {hint}")


def training_code(source: Source, members: dict[str, str]) -> dict[str, str]:
    """{training rule: the code_sha256 its published checkpoints recorded}: the code an imported checkpoint
    is current against (it is fixed by its content, not by this checkout's training code)."""
    code = {}
    for name in members:
        if name.endswith("meta.json"):
            lineage = source.json(name).get("lineage") or {}
            if lineage.get("rule"):
                code[lineage["rule"]] = lineage.get("code_sha256")
    return code


def import_member(source: Source, member: str, destination: str | Path) -> None:
    """Copies one member out as a real file (the rule's ensure checks its sha256)."""
    destination = Path(destination)
    destination.parent.mkdir(parents=True, exist_ok=True)
    destination.write_bytes(source.read(member))


def describe(source: Source) -> dict:
    """The import as the report names it: which published run, and its sha256 where it has one."""
    return {"label": source.label, "kind": source.kind, "sha256": source.digest}
