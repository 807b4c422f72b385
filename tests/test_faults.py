"""The fault suite: each fault gives a clear error naming the key or file, and loses no completed output.

One test (or a few) per row of issue 12's fault table, plus the faults that already held. Config faults
are checked by calling inferlab.jobs.configcheck directly and, for a few, by `snakemake -n` on a small
workflow whose corpus is prepared and one draft trained (the `trained` fixture), so the parse-time
error is shown to come before any job.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from inferlab.core.checkpoint import load_checkpoint, save_checkpoint
from inferlab.core.checkpoint_meta import CheckpointError, read_meta
from inferlab.core.config import GPTConfig
from inferlab.core.model import GPT
from inferlab.corpus import download
from inferlab.corpus.text import CorpusError, prepare, read_corpus, require_chars
from inferlab.jobs import configcheck
from inferlab.jobs.configcheck import ConfigError, check_config, config_problems
from inferlab.jobs.tables import read_json, read_table, write_json, write_table
from inferlab.kvcache.anchor import load_anchor
from inferlab.training.noise_floor import noise_floor_table
from tests.conftest import link_workflow, synthetic_corpus
from tests.test_workflow_e2e import SNAKEMAKE, TINY, _merge, _planned_jobs, _snakemake

ROOT = Path(__file__).resolve().parent.parent
ANCHOR = str(ROOT / "config/anchor-model.json")
DRAFT = "c1_dim64"
QUICK = yaml.safe_load((ROOT / "config/quick.yaml").read_text(encoding="utf-8"))


def _config(**over) -> dict:
    """config.yaml + quick.yaml + the tiny test shapes, with an absolute anchor path."""
    base = yaml.safe_load((ROOT / "config/config.yaml").read_text(encoding="utf-8"))
    quick = yaml.safe_load((ROOT / "config/quick.yaml").read_text(encoding="utf-8"))
    config = _merge(_merge(base, quick), TINY)
    config["roofline"]["anchor"] = ANCHOR
    return _merge(config, over)


def _one_problem(config: dict, *fragments: str, stats: dict | None = None) -> str:
    problems = config_problems(config, stats)
    assert len(problems) == 1, problems
    for fragment in fragments:
        assert fragment in problems[0], problems[0]
    return problems[0]


# ------------------------------------------------------------------ the shipped configs pass


@pytest.mark.parametrize("files", [["config.yaml"], ["config.yaml", "quick.yaml"]])
def test_shipped_configs_pass_every_check(files, monkeypatch):
    monkeypatch.chdir(ROOT)
    config = {}
    for name in files:
        config = _merge(config, yaml.safe_load((ROOT / "config" / name).read_text(encoding="utf-8")))
    assert config_problems(config) == []


def test_configcheck_does_not_import_torch():
    code = "import sys, inferlab.jobs.configcheck; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([SNAKEMAKE[0], "-c", code], check=True, cwd=ROOT)


# ------------------------------------------------------------------ row: d_model not a multiple of head_dim


def test_draft_width_not_a_multiple_of_head_dim_names_the_key():
    config = _config(models={**TINY["models"], DRAFT: {"d_model": 96}})
    _one_problem(config, f"models.{DRAFT}.d_model", "96", "architecture.head_dim (64)")


def test_seq_len_over_max_seq_len_names_the_override():
    config = _config(training={"overrides": {DRAFT: {"seq_len": 256}}})
    _one_problem(config, f"training.overrides.{DRAFT}.seq_len", "architecture.max_seq_len (128)")


# ------------------------------------------------------------------ every token budget against the context


@pytest.mark.parametrize(("over", "key"), [
    ({"sampling": {"repetition": {"new_tokens": 600}}}, "sampling.repetition.new_tokens"),
    ({"kvcache": {"lengths": [16, 200]}}, "kvcache.lengths"),
    ({"speculative": {"new_tokens": 124}}, "speculative.new_tokens"),  # 5-char prompt + 124 + k 3 = 132
    ({"quantization": {"speed": {"new_tokens": 200}}}, "quantization.speed.new_tokens"),
    ({"sampling": {"prompt": "字" * 129}}, "sampling.prompt"),
])
def test_every_key_that_feeds_a_model_tokens_is_checked_against_the_context(over, key):
    _one_problem(_config(**over), f"{key}:", "more than the context architecture.max_seq_len (128)")


def test_a_budget_exactly_at_the_context_passes():
    prompt = _config()["speculative"]["prompts"]
    longest = max(map(len, prompt))
    assert config_problems(_config(speculative={"new_tokens": 128 - longest - 3})) == []


# ------------------------------------------------------------------ row: draft larger than target / draft = target


def test_draft_larger_than_target_is_refused():
    config = _config(models={**TINY["models"], DRAFT: {"d_model": 256}})
    _one_problem(config, "speculative.drafts", DRAFT, "not smaller than the target")


def test_target_as_draft_is_refused():
    config = _config(target_model=DRAFT)
    problems = config_problems(config)
    assert any("speculative.drafts" in p and "is the target_model" in p for p in problems), problems


# ------------------------------------------------------------------ rows: noise seeds and run count


def test_noise_seed_equal_to_training_seed_is_refused():
    config = _config(noise_floor={"extra_seeds": [1337, 101]})
    _one_problem(config, "noise_floor.extra_seeds", "1337", "training.defaults.seed")


def test_duplicate_noise_seeds_are_refused():
    config = _config(noise_floor={"extra_seeds": [101, 101, 102], "min_runs": 2})
    _one_problem(config, "noise_floor.extra_seeds", "seed 101 is listed 2 times")


def test_two_run_floor_needs_an_explicit_opt_down():
    config = _config()
    del config["noise_floor"]["min_runs"]
    _one_problem(config, "noise_floor.extra_seeds", "2 run(s)", "at least 3", "noise_floor.min_runs")
    config["noise_floor"]["min_runs"] = 2
    assert config_problems(config) == []


def test_two_run_floor_is_marked_unreliable_and_three_runs_are_not():
    runs = [{"name": f"r{i}", "seed": i, "val_loss": 2.0 + 0.01 * i} for i in range(3)]
    two = noise_floor_table(runs[:2], 3, "measured", 0.02)
    three = noise_floor_table(runs, 3, "measured", 0.02)
    assert not two["floor_reliable"].any() and "unreliable" in two["floor_reliability_note"].iloc[0]
    assert three["floor_reliable"].all() and (three["floor_reliability_note"] == "").all()


# ------------------------------------------------------------------ row: validation split shorter than seq_len


def _stats(val_chars: int, train_chars: int = 10_000, distinct: int = 200) -> dict:
    return {"val_chars": val_chars, "train_chars": train_chars, "distinct_chars": distinct,
            "train_distinct_chars": distinct, "val_fraction_requested": TINY["corpus"]["val_fraction"]}


def test_short_validation_split_fails_at_parse_time_with_counts():
    config = _config()  # seq_len 64: needs 66 characters
    problems = config_problems(config, _stats(50))
    assert len(problems) == len(TINY["models"]), problems  # one per model, each naming it
    for name, problem in zip(TINY["models"], problems, strict=True):
        assert problem.startswith("training.defaults.seq_len: model " + name), problem
        assert "needs 66 characters in the val split, the corpus's has 50" in problem
    assert config_problems(config, _stats(66)) == []
    # Stats of another split say nothing about the next one: prepare_corpus will check it.
    assert config_problems(_config(corpus={"val_fraction": 0.2, "vocab_size": 160}), _stats(50)) == []


def test_short_split_fails_in_training_with_counts_before_any_step():
    with pytest.raises(CorpusError, match=r"val\.npy .*the split has 40 characters, 66 are needed"):
        require_chars(40, configcheck.validation_chars_needed(64), "results/corpus/val.npy (validation split)")


# ------------------------------------------------------------------ rows: roofline anchor


def test_missing_anchor_names_the_key_and_file(tmp_path):
    config = _config(roofline={"anchor": str(tmp_path / "nowhere.json")})
    _one_problem(config, "roofline.anchor", "nowhere.json", "does not exist")


def test_anchor_that_is_not_json_names_the_file():
    with pytest.raises(ValueError, match=r"anchor file /etc/passwd is not valid JSON"):
        load_anchor("/etc/passwd")


def test_anchor_missing_a_field_names_it(tmp_path):
    anchor = json.loads(Path(ANCHOR).read_text(encoding="utf-8"))
    del anchor["hardware"]["peak_flops_per_s"]
    (tmp_path / "a.json").write_text(json.dumps(anchor))
    config = _config(roofline={"anchor": str(tmp_path / "a.json")})
    _one_problem(config, "roofline.anchor", "a.json", "hardware", "peak_flops_per_s")


# ------------------------------------------------------------------ row: unknown quant scheme


def test_unknown_quant_scheme_is_refused_at_parse_time():
    config = _config(quantization={"schemes": ["int8_per_channel_sym", "int5_magic"]})
    _one_problem(config, "quantization.schemes", "'int5_magic'", "not a known scheme")


# ------------------------------------------------------------------ rows: meta.json deleted / truncated


def _tiny_checkpoint(directory: Path) -> dict:
    model = GPT(GPTConfig(vocab_size=32, n_layer=1, d_model=64, head_dim=64, max_seq_len=16, mlp_ratio=2))
    return save_checkpoint(model, {"name": "tiny", "val_loss": 3.0}, directory)


def test_absent_meta_is_incomplete_with_the_recovery_command(tmp_path):
    _tiny_checkpoint(tmp_path)
    (tmp_path / "meta.json").unlink()
    with pytest.raises(CheckpointError, match=r"meta\.json: no meta\.json.*--forcerun .*meta\.json"):
        read_meta(tmp_path)


@pytest.mark.parametrize("damage", ["truncated", "empty object"])
def test_unreadable_meta_names_the_path_and_the_recovery_command(tmp_path, damage):
    _tiny_checkpoint(tmp_path)
    meta = tmp_path / "meta.json"
    text = meta.read_text()
    meta.write_text(text[: len(text) // 2] if damage == "truncated" else "{}")
    with pytest.raises(CheckpointError, match=rf"{meta}: .*--forcerun {meta}"):
        load_checkpoint(tmp_path)


def test_truncated_json_read_by_any_job_names_the_path(tmp_path):
    path = tmp_path / "stats.json"
    write_json({"a": 1, "b": [1, 2, 3]}, path)
    path.write_text(path.read_text()[:7])
    with pytest.raises(ValueError, match=rf"{path}: not valid JSON .*--forcerun {path}"):
        read_json(path)


def test_truncated_table_names_the_path(tmp_path):
    path = tmp_path / "summary.parquet"
    write_table(pd.DataFrame({"x": [1.0, 2.0]}), path)
    path.write_bytes(path.read_bytes()[:40])
    with pytest.raises(ValueError, match=rf"{path}: exists but is not a readable table.*--forcerun {path}"):
        read_table(path)


# ------------------------------------------------------------------ rows: corpus path a directory, empty, short


def test_corpus_directory_is_refused_at_parse_time(tmp_path):
    config = _config(corpus_path=str(tmp_path))
    _one_problem(config, "corpus_path", str(tmp_path), "is a directory")
    with pytest.raises(CorpusError, match=rf"corpus {tmp_path} is a directory"):
        read_corpus(tmp_path)
    with pytest.raises(download.CorpusUnavailable, match="is a directory"):
        download.download_corpus("https://example.invalid/x.txt", tmp_path / "dl.txt", configured_path=tmp_path)


def test_empty_corpus_is_refused_naming_it(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    _one_problem(_config(corpus_path=str(empty)), "corpus_path", "empty.txt", "empty file")
    with pytest.raises(CorpusError, match=rf"corpus {empty} is empty"):
        read_corpus(empty)


def test_too_short_corpus_is_refused_naming_it(tmp_path):
    short = tmp_path / "short.txt"
    short.write_text("第一回\n\u3000\u3000只有一段。\n", encoding="utf-8")
    with pytest.raises(CorpusError, match=rf"{short} is too short to split .*chapter headings"):
        prepare(read_corpus(short), 0.1, 10, source=str(short))


# ------------------------------------------------------------------ row: download https only, pinned sha256


class _Response:
    def __init__(self, data: bytes):
        self.data = data

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def read(self) -> bytes:
        return self.data


@pytest.fixture
def served(monkeypatch):
    """What the (faked) server sends; no network in tests."""
    payload = {"data": synthetic_corpus(n_chapters=3).encode("utf-8")}
    monkeypatch.setattr(download.urllib.request, "urlopen", lambda url, timeout: _Response(payload["data"]))
    return payload


def test_download_refuses_non_https(tmp_path, served):
    for url in ("http://www.gutenberg.org/x.txt", "ftp://x/y.txt", "file:///etc/passwd"):
        with pytest.raises(download.CorpusUnavailable, match="https only"):
            download.download_corpus(url, tmp_path / "c.txt")
        assert "corpus_url" in "".join(config_problems(_config(corpus_url=url)))
    assert not (tmp_path / "c.txt").exists()


def test_download_with_matching_hash_is_kept(tmp_path, served):
    digest = download.hashlib.sha256(served["data"]).hexdigest()
    download.download_corpus("https://x/c.txt", tmp_path / "c.txt", expected_sha256=digest)
    assert (tmp_path / "c.txt").read_bytes() == served["data"]


def test_download_with_wrong_hash_is_kept_aside_and_not_used(tmp_path, served):
    with pytest.raises(download.CorpusUnavailable, match=r"kept aside as .*c\.txt\.rejected"):
        download.download_corpus("https://x/c.txt", tmp_path / "c.txt", expected_sha256="0" * 64)
    assert not (tmp_path / "c.txt").exists()
    assert (tmp_path / "c.txt.rejected").read_bytes() == served["data"]


def test_download_without_a_pinned_hash_logs_it(tmp_path, served, caplog):
    download.download_corpus("https://x/c.txt", tmp_path / "c.txt", expected_sha256=None)
    assert download.hashlib.sha256(served["data"]).hexdigest() in caplog.text


# ------------------------------------------------------------------ row: vocab_size too large


def test_vocab_size_over_the_prepared_corpus_fails_at_parse_time():
    config = _config(corpus={"val_fraction": 0.1, "vocab_size": 500})
    _one_problem(config, "corpus.vocab_size", "500", "199 distinct", stats=_stats(1000, distinct=199))
    _one_problem(_config(corpus={"val_fraction": 0.1, "vocab_size": 100_000}), "corpus.vocab_size", "uint16")


def test_every_problem_is_reported_at_once():
    config = _config(models={**TINY["models"], DRAFT: {"d_model": 96}},
                     quantization={"schemes": ["nope"]}, noise_floor={"extra_seeds": [1337]})
    with pytest.raises(ConfigError) as caught:
        check_config(config)
    assert len(caught.value.problems) == 3, caught.value.problems  # width, seed, scheme


# ------------------------------------------------------------------ faults that already held


@pytest.mark.parametrize("encoding", ["gbk", "big5", "utf-16"])
def test_non_utf8_corpus_is_refused_naming_it(encoding):
    raw = synthetic_corpus(n_chapters=3).encode(encoding, errors="replace")
    with pytest.raises(CorpusError, match="corpus.txt is not UTF-8"):
        prepare(raw, 0.1, 20, source="corpus.txt")


def test_random_bytes_are_refused():
    with pytest.raises(CorpusError, match="not UTF-8"):
        prepare(bytes(range(128, 256)) * 50, 0.1, 20, source="corpus.txt")


def test_corrupt_weights_are_caught_by_their_hash(tmp_path):
    _tiny_checkpoint(tmp_path)
    weights = tmp_path / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-5] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"model\.safetensors: sha256 .* does not match meta\.json"):
        load_checkpoint(tmp_path)


def _disk_full(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_disk_full_table_write_keeps_the_completed_table(tmp_path, monkeypatch):
    path = tmp_path / "t.parquet"
    write_table(pd.DataFrame({"x": [1, 2, 3]}), path)
    monkeypatch.setattr("inferlab.jobs.tables.pq.write_table", _disk_full)
    with pytest.raises(OSError, match="No space left"):
        write_table(pd.DataFrame({"x": [9]}), path)
    assert read_table(path)["x"].tolist() == [1, 2, 3]


def test_disk_full_json_write_keeps_the_completed_file(tmp_path, monkeypatch):
    path = tmp_path / "s.json"
    write_json({"ok": True}, path)
    monkeypatch.setattr(Path, "write_text", _disk_full)
    with pytest.raises(OSError, match="No space left"):
        write_json({"ok": False}, path)
    assert read_json(path) == {"ok": True}


@pytest.mark.parametrize("failing", ["weights", "meta"])
def test_disk_full_during_a_checkpoint_leaves_no_complete_looking_checkpoint(tmp_path, monkeypatch, failing):
    if failing == "weights":
        monkeypatch.setattr("inferlab.core.checkpoint.save_file", _disk_full)
    else:
        monkeypatch.setattr(Path, "write_text", _disk_full)  # weights written, the meta.json write fails
    with pytest.raises(OSError, match="No space left"):
        _tiny_checkpoint(tmp_path)
    assert not (tmp_path / "meta.json").exists()
    with pytest.raises(CheckpointError, match="incomplete"):
        load_checkpoint(tmp_path)


# ------------------------------------------------------------------ the workflow itself (snakemake)

LONG_TRAINING = {"training": {**TINY["training"], "overrides": {DRAFT: {"seed": 7, "steps": 100_000}}}}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A workflow directory with the corpus prepared and the small draft trained."""
    workdir = tmp_path_factory.mktemp("faults")
    link_workflow(workdir)
    (workdir / "corpus.txt").write_text(synthetic_corpus(n_chapters=14, paragraphs=8), encoding="utf-8")
    quick = yaml.safe_load((ROOT / "config/quick.yaml").read_text(encoding="utf-8"))
    (workdir / "tiny.yaml").write_text(yaml.safe_dump(_merge(quick, TINY), allow_unicode=True), encoding="utf-8")
    result = _snakemake(workdir, "--", f"results/models/{DRAFT}/meta.json")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return workdir


def _snapshot(workdir: Path) -> dict[str, tuple[int, int]]:
    """Size and mtime of every completed output, to show none was touched."""
    return {str(p.relative_to(workdir)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted((workdir / "results").rglob("*")) if p.is_file() and "benchmarks" not in p.parts}


def _with_override(workdir: Path, override: dict, *args: str) -> subprocess.CompletedProcess:
    (workdir / "override.yaml").write_text(yaml.safe_dump(override, allow_unicode=True), encoding="utf-8")
    return _snakemake(workdir, "--configfile", "config/quick.yaml", "tiny.yaml", "override.yaml", *args)


@pytest.mark.parametrize(("override", "expected"), [
    ({"models": {**TINY["models"], DRAFT: {"d_model": 96}}}, f"models.{DRAFT}.d_model"),
    ({"corpus": {"val_fraction": 0.1, "vocab_size": 5000}}, "corpus.vocab_size: 5000 exceeds"),
    ({"quantization": {**yaml.safe_load((ROOT / "config/quick.yaml").read_text(encoding="utf-8"))["quantization"],
                       "schemes": ["int5_magic"]}}, "quantization.schemes: 'int5_magic'"),
    ({"roofline": {**yaml.safe_load((ROOT / "config/quick.yaml").read_text(encoding="utf-8"))["roofline"],
                   "anchor": "missing-anchor.json"}}, "roofline.anchor: anchor file missing-anchor.json"),
    ({"training": {**TINY["training"], "defaults": {**TINY["training"]["defaults"], "seq_len": 2000}},
      "architecture": {**TINY["architecture"], "max_seq_len": 4096}}, "needs 2002 characters in the val split"),
    ({"sampling": {**QUICK["sampling"], "repetition": {**QUICK["sampling"]["repetition"], "new_tokens": 600}}},
     "sampling.repetition.new_tokens: the longest repetition prompt + new tokens"),
])
@pytest.mark.slow
def test_bad_config_fails_before_any_job_and_keeps_every_output(trained, override, expected):
    before = _snapshot(trained)
    result = _with_override(trained, override)  # a real run, not -n: nothing may start
    assert result.returncode != 0
    assert expected in result.stdout + result.stderr, result.stderr[-3000:]
    assert "rule " not in result.stdout + result.stderr, "a job started"
    assert _snapshot(trained) == before


@pytest.mark.slow
def test_anchor_is_an_input_of_the_roofline(trained):
    result = _snakemake(trained, "-n", "--", "results/roofline.parquet")
    output = result.stdout + result.stderr
    assert "rule roofline:" in output, output[-3000:]
    roofline_inputs = output.split("rule roofline:", 1)[1].split("output:", 1)[0]
    assert "config/anchor-model.json" in roofline_inputs, roofline_inputs


def _corpus_files(workdir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((workdir / "results/corpus").iterdir())}


def _dry_run(workdir: Path, corpus: str, *config: str) -> subprocess.CompletedProcess:
    """`snakemake -n` of the whole DAG on another corpus (and config values), as a user would type it."""
    cmd = [*SNAKEMAKE, "-n", "--cores", "2", "--configfile", "config/quick.yaml", "tiny.yaml",
           "--config", f"corpus_path={corpus}", *config]
    return subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, timeout=300)


def _sha256(data: bytes) -> str:
    return download.hashlib.sha256(data).hexdigest()


# (what the copy is, its bytes from the good corpus's text, config values, what the refusal says)
BAD_CORPORA = [
    ("GBK", lambda text: text.encode("gbk", errors="replace"), [],
     "is not UTF-8 (byte 0xb5 at offset 29 is not valid there); it reads as GBK. Convert it once and point "
     "corpus_path at the copy: iconv -f GBK -t UTF-8"),
    ("Big5", lambda text: text.encode("big5", errors="replace"), [], "it reads as Big5. Convert it once"),
    ("UTF-16", lambda text: text.encode("utf-16"), [], "it reads as UTF-16. Convert it once"),
    # cut on a character boundary, the tiny config would take what is left: only the pin tells
    ("first 3,000 bytes, pinned", lambda text: text.encode("utf-8")[:3000],
     ["corpus_sha256={full_sha256}"], "(3,000 bytes, sha256 "),
    ("first 2,999 bytes", lambda text: text.encode("utf-8")[:2999], [],
     "it ends inside a character (byte 0xe3 at offset 2,997 of 2,999), so it looks truncated"),
    ("empty", lambda text: b"", [], "is an empty file"),
]


@pytest.mark.parametrize(("what", "make", "config", "expected"), BAD_CORPORA, ids=[c[0] for c in BAD_CORPORA])
@pytest.mark.slow
def test_a_corpus_prepare_corpus_would_refuse_is_refused_by_the_dry_run_and_costs_nothing(
        trained, what, make, config, expected):
    """Snakemake deletes a job's outputs before it runs the job: a corpus refused inside prepare_corpus
    would already have cost the prepared corpus, and with it every job below (the next run on the right
    corpus would plan them all). So `snakemake -n` refuses it, in one message, and nothing is touched."""
    good = (trained / "corpus.txt").read_text(encoding="utf-8")
    bad = trained / "bad-corpus.txt"
    bad.write_bytes(make(good))
    prepared = _corpus_files(trained)
    config = [c.format(full_sha256=_sha256(good.encode("utf-8"))) for c in config]
    result = _dry_run(trained, bad.name, *config)
    assert result.returncode != 0, result.stdout[-2000:]
    assert f"corpus_path: {bad.name} " in result.stderr and expected in result.stderr, result.stderr[-3000:]
    last_lines = (result.stdout + result.stderr).strip().splitlines()[-5:]
    assert not any('File "' in line for line in last_lines), last_lines
    assert _corpus_files(trained) == prepared
    again = _snakemake(trained, "-n", "--", f"results/models/{DRAFT}/meta.json")
    assert "Nothing to be done" in again.stdout + again.stderr, again.stdout[-2000:]


def test_the_pin_refuses_a_copy_of_another_length_and_accepts_its_own_file():
    stats = {"raw_sha256": "a" * 64, "raw_bytes": 3000, "val_chars": 10_000, "train_chars": 10_000,
             "distinct_chars": 200, "train_distinct_chars": 200, "val_fraction_requested": 0.1}
    _one_problem(_config(corpus_sha256="b" * 64), "corpus_path:", "3,000 bytes", "corpus_sha256 pins (bbbbbbbbbbbb",
                 stats=stats)
    assert config_problems(_config(corpus_sha256="a" * 64), stats) == []


def test_the_corpus_check_is_kept_by_size_and_mtime(tmp_path):
    """A dry run checks an unchanged corpus from its kept result; an edit (even of one byte) is checked anew."""
    from inferlab.corpus.check import corpus_check

    corpus, cache = tmp_path / "corpus.txt", tmp_path / "cache.json"
    corpus.write_text(synthetic_corpus(n_chapters=3), encoding="utf-8")
    first = corpus_check(corpus, 0.1, 20, cache)
    assert "problem" not in first and json.loads(cache.read_text())
    corpus.write_bytes(corpus.read_bytes() + "中".encode()[:2])  # ends inside a character
    second = corpus_check(corpus, 0.1, 20, cache)
    assert "ends inside a character" in second["problem"] and second["raw_sha256"] != first["raw_sha256"]
    assert corpus_check(corpus, 0.1, 20, cache) == second


@pytest.mark.slow
def test_a_failure_inside_prepare_corpus_costs_the_prepared_corpus_and_the_dag_below(tmp_path):
    """What a job-time failure costs, recorded (the README's faults table says the same). Snakemake deletes
    a job's outputs before it runs the job, and records a failed job's settings as the outputs' own, so
    the next run, even with the settings put back, plans prepare_corpus and every job below it. That is
    why every check that can run at parse time does (the test above)."""
    link_workflow(tmp_path)
    (tmp_path / "corpus.txt").write_text(synthetic_corpus(n_chapters=14, paragraphs=8), encoding="utf-8")
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(_merge(QUICK, TINY), allow_unicode=True), encoding="utf-8")
    target = f"results/models/{DRAFT}/meta.json"
    built = _snakemake(tmp_path, "--", target)
    assert built.returncode == 0, built.stderr[-3000:]
    # the job fails inside, after the parse-time checks passed: a site hook ends the script's process
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(
        'import sys\nif any("corpus_prepare" in arg for arg in sys.argv):\n'
        '    raise SystemExit("injected: prepare_corpus fails inside the job")\n', encoding="utf-8")
    (tmp_path / "split.yaml").write_text(yaml.safe_dump({"corpus": {**TINY["corpus"], "val_fraction": 0.15}}),
                                         encoding="utf-8")
    cmd = [*SNAKEMAKE, "--cores", "2", "--configfile", "config/quick.yaml", "tiny.yaml", "split.yaml",
           "--config", "corpus_path=corpus.txt", "--", target]
    failed = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600,
                            env={**os.environ, "PYTHONPATH": str(inject), "INFERLAB_QUIET": "1"})
    assert failed.returncode != 0 and "injected" in failed.stdout + failed.stderr, failed.stderr[-3000:]
    assert not (tmp_path / "results/corpus/stats.json").exists()  # deleted before the job ran
    assert (tmp_path / target).exists()  # the checkpoint itself survives ...
    replanned = _snakemake(tmp_path, "-n", "--", target)
    # ... but the next run, with the settings it was built with, plans it again with the corpus
    assert _planned_jobs(replanned.stdout + replanned.stderr) == {"prepare_corpus": 1, "train_model": 1}, \
        replanned.stdout[-3000:]


@pytest.mark.slow
def test_deleted_meta_reruns_the_training(trained, tmp_path):
    meta = trained / f"results/models/{DRAFT}/meta.json"
    kept = tmp_path / "meta.json"
    meta.replace(kept)
    try:
        result = _snakemake(trained, "-n")
        assert _planned_jobs(result.stdout + result.stderr).get("train_model", 0) >= 1, result.stdout[-2000:]
        assert f"Missing output files: results/models/{DRAFT}/meta.json" in result.stdout + result.stderr
    finally:
        kept.replace(meta)


def _default_signal_dispositions() -> None:
    for sig in (signal.SIGINT, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_DFL)


def _interrupt_training(workdir: Path, sig: int) -> None:
    """Starts a long training of the draft, waits for its first progress line, sends sig to snakemake."""
    (workdir / "override.yaml").write_text(yaml.safe_dump(LONG_TRAINING), encoding="utf-8")
    cmd = [*SNAKEMAKE, "--cores", "1", "--configfile", "config/quick.yaml", "tiny.yaml", "override.yaml",
           "--config", "corpus_path=corpus.txt", "--", f"results/models/{DRAFT}/meta.json"]
    log = workdir / f"logs/train/{DRAFT}.log"
    started = log.stat().st_mtime_ns if log.exists() else 0
    # A terminal gives its foreground job the default SIGINT disposition; a suite started as a
    # background job of a non-interactive shell inherits SIGINT *ignored*, and so would every
    # child. Restore the default, so the test measures the workflow, not how pytest was started.
    proc = subprocess.Popen(cmd, cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, env={**os.environ, "INFERLAB_QUIET": "1"},
                            preexec_fn=_default_signal_dispositions)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if log.exists() and log.stat().st_mtime_ns != started and "threads" in log.read_text():
                break
            time.sleep(0.5)
        else:
            pytest.fail("training never started")
        time.sleep(1.0)
        os.killpg(proc.pid, sig)  # the whole group, as a terminal's Ctrl-C or an OOM killer would
        try:
            proc.wait(timeout=45)
        except subprocess.TimeoutExpired:
            # Snakemake occasionally waits on its job thread after the first Ctrl-C (seen once in
            # CI, 60 s); a second one, as a user at a terminal would press, ends it.
            os.killpg(proc.pid, sig)
            proc.wait(timeout=60)
    finally:
        try:  # never leave a training job behind
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["kill-9", "SIGINT"])
@pytest.mark.slow
def test_interrupted_training_leaves_no_complete_looking_checkpoint(trained, sig):
    corpus_before = {k: v for k, v in _snapshot(trained).items() if k.startswith("results/corpus")}
    _interrupt_training(trained, sig)
    draft = trained / "results/models" / DRAFT
    assert not (draft / "meta.json").exists()
    with pytest.raises(CheckpointError, match="incomplete"):
        read_meta(draft)
    assert {k: v for k, v in _snapshot(trained).items() if k.startswith("results/corpus")} == corpus_before
    # The way back (README, "When something goes wrong"): unlock after kill -9, then the next run
    # retrains the draft.
    assert _snakemake(trained, "--unlock").returncode == 0
    result = _snakemake(trained, "-n", "--rerun-incomplete", "--", f"results/models/{DRAFT}/meta.json")
    assert result.returncode == 0, result.stderr[-3000:]
    assert _planned_jobs(result.stdout + result.stderr) == {"train_model": 1}, result.stdout[-2000:]

