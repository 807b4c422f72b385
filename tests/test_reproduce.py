"""Reproducing a published run: every refusal of inferlab.review.reproduce on small synthetic bundles and run
directories (the whole reproduction of a quick run is in tests/test_workflow_e2e.py)."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import pandas as pd
import pytest
import torch

from inferlab.core.checkpoint import save_checkpoint
from inferlab.core.config import GPTConfig
from inferlab.core.model import GPT
from inferlab.jobs.tables import write_table
from inferlab.review import reproduce
from inferlab.review.bundle import MANIFEST_NAME, build_bundle

MODELS = {"target": {"d_model": 64}, "draft": {"d_model": 32}}
CONFIG = {
    "corpus": {"val_fraction": 0.1, "vocab_size": 40},
    "architecture": {"n_layer": 1, "head_dim": 32, "max_seq_len": 16, "mlp_ratio": 2},
    "models": MODELS,
    "target_model": "target",
    "training": {"defaults": {"steps": 3, "seed": 1}, "overrides": {}},
    "noise_floor": {"extra_seeds": [5], "sigmas": 3},
    "sampling": {"temperatures": [0.7]},
}
CORPUS_SHA = "c" * 64


def model_config(name: str) -> dict:
    return {**CONFIG["architecture"], **MODELS[name], "vocab_size": CONFIG["corpus"]["vocab_size"]}


MEMBER_CONFIGS = {"models/target": model_config("target"), "models/draft": model_config("draft"),
                  "noise/seed5": model_config("target")}


def _checkpoint(directory: Path, name: str, seed: int) -> None:
    torch.manual_seed(seed)
    save_checkpoint(GPT(GPTConfig.from_dict(model_config(name))), {"name": name, "val_loss": 1.0,
                                                                   "corpus_sha256": CORPUS_SHA}, directory)
    write_table(pd.DataFrame({"step": [0], "val_loss": [1.0]}), directory / "loss_curve.parquet")


@pytest.fixture
def run_dir(tmp_path) -> Path:
    """A finished run's directory: checkpoints, the noise rerun and a metrics table recording the config."""
    run = tmp_path / "run"
    for name in MODELS:
        _checkpoint(run / "results/models" / name, name, seed=len(name))
    _checkpoint(run / "results/noise/seed5", "target", seed=5)
    write_table(pd.DataFrame({"metric": ["x"], "value": [1.0]}), run / "results/metrics.parquet",
                provenance={"causes": {"config": CONFIG}})
    return run


def _bundle(run: Path, path: Path, config: dict = CONFIG, checkpoints: bool = True) -> Path:
    files = {"metrics.parquet": run / "results/metrics.parquet"}
    if checkpoints:
        files |= {member: run / "results" / member for member in reproduce.checkpoint_members(config)}
    (run / "config.json").write_text(json.dumps(config))
    return build_bundle(path, {**files, "config.json": run / "config.json"})


@pytest.fixture
def bundle(run_dir, tmp_path) -> Path:
    return _bundle(run_dir, tmp_path / "c13-bundle.zip")


def _check(path: Path, config: dict = CONFIG, expected: str | None = None, corpus: str | None = CORPUS_SHA) -> dict:
    return reproduce.check_source(reproduce.open_source(path, expected), config, MEMBER_CONFIGS, corpus)


def test_expected_shapes_are_the_models_own():
    for name in MODELS:
        state = GPT(GPTConfig.from_dict(model_config(name))).state_dict()
        assert reproduce.expected_shapes(model_config(name)) == {k: tuple(v.shape) for k, v in state.items()}


def test_a_bundle_and_a_run_directory_pass_with_the_same_members(bundle, run_dir):
    from_bundle, from_directory = _check(bundle), _check(run_dir)
    assert from_bundle == from_directory
    assert set(from_bundle) == {*reproduce.checkpoint_members(CONFIG), reproduce.METRICS}
    assert reproduce.open_source(bundle).digest == reproduce.sha256_bytes(bundle.read_bytes())


def test_an_experiment_setting_may_differ(bundle):
    _check(bundle, {**CONFIG, "sampling": {"temperatures": [0.5, 0.7, 1.3]}})


@pytest.mark.parametrize(("make", "message"), [
    (lambda b: b.with_name("absent.zip"), "no such bundle or run directory"),
    (lambda b: (b.with_name("notes.zip").write_text("not a zip"), b.with_name("notes.zip"))[1], "not a whole zip"),
    (lambda b: (b.with_name("cut.zip").write_bytes(b.read_bytes()[: b.stat().st_size // 2]),
                b.with_name("cut.zip"))[1], "not a whole zip"),
])
def test_a_missing_foreign_or_truncated_bundle_is_refused(bundle, make, message):
    with pytest.raises(reproduce.ReproduceError, match=message):
        _check(make(bundle))


def test_a_bundle_other_than_the_published_one_is_refused(bundle):
    with pytest.raises(reproduce.ReproduceError, match="not the reproduce_sha256"):
        _check(bundle, expected="0" * 64)
    _check(bundle, expected=reproduce.sha256_bytes(bundle.read_bytes()))


def _rewrite(bundle: Path, member: str, change) -> Path:
    """The bundle with one member's bytes changed and its manifest kept as it was."""
    edited = bundle.with_name("edited.zip")
    with zipfile.ZipFile(bundle) as source, zipfile.ZipFile(edited, "w") as target:
        for info in source.infolist():
            data = source.read(info)
            target.writestr(info, change(data) if info.filename == member else data)
    return edited


def test_a_checkpoint_edited_by_one_byte_is_refused_by_name(bundle):
    member = "models/draft/model.safetensors"
    edited = _rewrite(bundle, member, lambda data: data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(reproduce.ReproduceError, match=f"{member} has sha256 .* its manifest says"):
        _check(edited)


def test_a_bundle_without_checkpoints_can_be_verified_not_reproduced(run_dir, tmp_path):
    old = _bundle(run_dir, tmp_path / "old.zip", checkpoints=False)
    with pytest.raises(reproduce.ReproduceError, match="holds no checkpoint.*verified.*not reproduced"):
        _check(old)


def test_a_changed_training_setting_is_refused_naming_the_key(bundle):
    config = json.loads(json.dumps(CONFIG))
    config["training"]["defaults"]["steps"] = 4
    with pytest.raises(reproduce.ReproduceError, match=r"training\.defaults\.steps: 3 there, 4 here.*--configfile"):
        _check(bundle, config)


def test_a_model_the_published_run_did_not_train_is_refused(bundle):
    config = {**CONFIG, "models": {**MODELS, "other": {"d_model": 32}}}
    with pytest.raises(reproduce.ReproduceError, match="lacks 3 file.*models/other/model.safetensors"):
        _check(bundle, config)


def test_checkpoints_whose_shapes_do_not_fit_the_config_are_refused(run_dir, tmp_path):
    """A consistent bundle (its manifest agrees) whose draft holds the target's tensors."""
    for file in reproduce.CHECKPOINT_FILES:
        shutil.copyfile(run_dir / "results/models/target" / file, run_dir / "results/models/draft" / file)
    swapped = _bundle(run_dir, tmp_path / "swapped.zip")
    with pytest.raises(reproduce.ReproduceError, match="models/draft/model.safetensors does not hold the model"):
        _check(swapped)


def test_checkpoints_trained_on_another_corpus_are_refused(bundle):
    with pytest.raises(reproduce.ReproduceError, match="trained on a corpus with sha256 cccc"):
        _check(bundle, corpus="d" * 64)


def test_a_run_cannot_reproduce_itself(run_dir):
    with pytest.raises(reproduce.ReproduceError, match="this run's own directory"):
        reproduce.open_source(run_dir, workdir=run_dir)


def test_a_run_directory_takes_no_bundle_sha256_and_needs_its_metrics(run_dir):
    with pytest.raises(reproduce.ReproduceError, match="run directory"):
        _check(run_dir, expected="0" * 64)
    (run_dir / "results/metrics.parquet").unlink()
    with pytest.raises(reproduce.ReproduceError, match="not a finished run's directory"):
        _check(run_dir)


def test_the_import_copies_a_member_byte_for_byte(bundle, run_dir, tmp_path):
    member = "noise/seed5/model.safetensors"
    reproduce.import_member(reproduce.open_source(bundle), member, tmp_path / "out" / "model.safetensors")
    assert (tmp_path / "out/model.safetensors").read_bytes() == (run_dir / "results" / member).read_bytes()
    assert MANIFEST_NAME in zipfile.ZipFile(bundle).namelist()


def test_metrics_upstream_of_a_rule_with_newer_code_are_counted():
    from inferlab.review.diff import newer_code_line

    files = {"results/kv/summary.parquet": {"rule": "kvcache_summary", "inputs_sha256": {"results/kv/t.parquet": "x"}},
             "results/kv/t.parquet": {"rule": "kvcache_timing", "inputs_sha256": {}},
             "results/quant/summary.parquet": {"rule": "quant_summary", "inputs_sha256": {}}}
    sources = {"kv_summary": "results/kv/summary.parquet", "quant_summary": "results/quant/summary.parquet"}
    rules = {"kvcache_summary": {"code_sha256": "s"}, "kvcache_timing": {"code_sha256": "t"},
             "quant_summary": {"code_sha256": "q"}}
    old = {"sources": sources, "files": files, "rules": rules}
    table = pd.DataFrame({"source": ["kv_summary", "kv_summary", "quant_summary", None]})
    assert newer_code_line(table, old, old, "the reference") is None
    new = {**old, "rules": {**rules, "kvcache_timing": {"code_sha256": "t2"}}}
    line = newer_code_line(table, old, new, "the reference")
    assert line.startswith("2 metrics come from code newer than the reference: kvcache_timing changed"), line


def test_a_bundle_sha256_without_a_bundle_is_refused_naming_the_key():
    problems = reproduce.config_problems
    assert problems({"reproduce": None, "reproduce_sha256": "0" * 64})[0].startswith("reproduce_sha256: ")
    assert problems({"reproduce": "c13-bundle.zip", "reproduce_sha256": "0" * 64}) == []
    assert problems({"reproduce": None, "reproduce_sha256": None}) == []
