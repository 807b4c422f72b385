"""End to end: the whole quick DAG on a synthetic corpus, in a temporary directory.

Checks that a complete run leaves nothing to do, that changing one setting reruns only the
jobs that depend on it, and that code is part of the DAG: a semantic edit to the package reruns
exactly the rules whose scripts import the edited module (the temp workflow has its own copy of
inferlab/ to edit), while comments, docstrings and `touch` rerun nothing.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pandas as pd
import pytest
import yaml

from inferlab.jobs.lineage import file_sha256
from inferlab.jobs.tables import read_json, read_provenance
from inferlab.jobs.template_lineage import rule_code_sha256
from inferlab.quant.schemes import SCHEMES
from inferlab.report.narrative import VERDICT_CHARS
from inferlab.review import reproduce
from inferlab.review.bundle import MANIFEST_NAME, build_bundle
from inferlab.review.ledger import list_runs
from inferlab.review.lineage_graph import CURRENT, STALE, lineage_table
from tests.conftest import link_workflow, synthetic_corpus

ROOT = Path(__file__).resolve().parent.parent
SNAKEMAKE = [sys.executable, "-m", "snakemake"]

TINY = {
    "corpus": {"val_fraction": 0.1, "vocab_size": 160},
    "architecture": {"n_layer": 2, "head_dim": 64, "max_seq_len": 128, "mlp_ratio": 4},
    "models": {"ref_baseline": {"d_model": 128}, "c1_dim128": {"d_model": 64}, "c1_dim64": {"d_model": 64}},
    "training": {"defaults": {"steps": 12, "batch_size": 4, "seq_len": 64, "warmup_steps": 2,
                              "eval_every": 6, "eval_windows": 2, "precision": "fp32"},
                 "overrides": {"c1_dim64": {"seed": 7}}},
    # compiling costs minutes on a busy 2-core machine; tests/test_engine.py covers the compiled engine
    "engine": ["eager"],
    # every job costs a process start and the imports: the smallest grids that still hold each kind
    # (a top-p and a min-p cell, two drafts, a k > 1, an RTN and a GPTQ scheme)
    "sampling": {"temperatures": [0.7], "top_ps": [0.9]},
    "speculative": {"ks": [2]},
    "quantization": {"schemes": ["int8_per_channel_sym", "int4_gptq"]},
}


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for key, value in over.items():
        out[key] = _merge(base[key], value) if isinstance(value, dict) and isinstance(base.get(key), dict) else value
    return out


CORPUS_PATH_FILE = "corpus-path.txt"  # where a test workdir says which corpus its run read


def _corpus_path(workdir: Path) -> str:
    recorded = workdir / CORPUS_PATH_FILE
    return recorded.read_text(encoding="utf-8").strip() if recorded.is_file() else "corpus.txt"


# Locally a timing or training job takes every core, so nothing runs beside a measurement. The
# tiny DAG's timings mean nothing (only that they are recorded), so its jobs take one thread
# each and run two at a time; thread counts are no rerun trigger, so an adopted run is unaffected.
ONE_THREAD = [f"{rule}=1" for rule in ("train_model", "train_noise_rerun", "kvcache_timing", "kvcache_steps",
                                       "roofline_probe", "quant_scheme", "speculative_group")]


def _snakemake(workdir: Path, *args: str, config: tuple[str, ...] = (),
               threads: list[str] = ONE_THREAD) -> subprocess.CompletedProcess:
    """config: more `key=value` settings after the corpus path; threads: --set-threads (none: as CI's run)."""
    cmd = [*SNAKEMAKE, "--cores", "2", *(["--set-threads", *threads] if threads else []), "--configfile",
           "config/quick.yaml", "tiny.yaml", "--config", f"corpus_path={_corpus_path(workdir)}", *config, *args]
    env = {**os.environ, "INFERLAB_QUIET": "1"}
    return subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, env=env, timeout=1500)


def _planned_jobs(output: str) -> dict[str, int]:
    """The 'Job stats' table of a dry run as {rule: count}."""
    counts = {}
    if "Job stats:" not in output:
        return counts
    table = output.split("Job stats:", 1)[1]
    for line in table.splitlines()[3:]:
        match = re.match(r"^(\w+)\s+(\d+)$", line.strip())
        if not match:
            break
        if match.group(1) != "total":
            counts[match.group(1)] = int(match.group(2))
    return counts


# A completed quick run to adopt instead of building one: CI sets these after its own quick run
# on the real corpus, so the end-to-end tests and CI share one run (the corpus path must be the
# absolute path that run was given, so that nothing counts as changed).
SHARED_RUN, SHARED_RUN_CORPUS = "INFERLAB_TEST_RUN", "INFERLAB_TEST_RUN_CORPUS"


def _adopt_run(source: Path, workdir: Path) -> None:
    """A copy of a completed quick run: outputs, logs and Snakemake's metadata, file times kept."""
    corpus = os.environ.get(SHARED_RUN_CORPUS, "")
    if not Path(corpus).is_absolute() or not (source / "results/milestones.parquet").is_file():
        pytest.fail(f"{SHARED_RUN}={source} needs a finished quick run there and {SHARED_RUN_CORPUS} set to the "
                    f"absolute corpus path it was run with (got {corpus!r})")
    for name in ("results", "reports", "logs"):
        shutil.copytree(source / name, workdir / name, symlinks=True)
    shutil.copytree(source / ".snakemake/metadata", workdir / ".snakemake/metadata")
    # the run used config/quick.yaml alone; the same keys again as the test overlay change nothing
    shutil.copyfile(ROOT / "config/quick.yaml", workdir / "tiny.yaml")
    (workdir / CORPUS_PATH_FILE).write_text(corpus, encoding="utf-8")


def _write_tiny_run_inputs(workdir: Path) -> None:
    (workdir / "corpus.txt").write_text(synthetic_corpus(n_chapters=14, paragraphs=8), encoding="utf-8")
    quick = yaml.safe_load((ROOT / "config/quick.yaml").read_text(encoding="utf-8"))
    (workdir / "tiny.yaml").write_text(yaml.safe_dump(_merge(quick, TINY), allow_unicode=True), encoding="utf-8")


# The tiny DAG is built one stage at a time, each stage a test of its own (the first tests of
# this module, run in this order), so a failure names its stage and no single test waits for the
# whole DAG. A test that needs more, run alone or picked with -k, builds what is missing itself:
# Snakemake brings the upstream jobs along. Stage: (Snakemake targets, tables it must write).
STAGES = {
    "training": (["noise_floor"], ["results/noise_floor.parquet", "results/models/ref_baseline/loss_curve.parquet"]),
    "kvcache": (["kvcache_summary", "roofline"], ["results/kvcache/summary.parquet", "results/roofline.parquet"]),
    "sampling": (["sampling_default"], ["results/sampling/repetition.parquet", "results/sampling/default.parquet"]),
    "speculative": (["speculative_summary"], ["results/speculative/summary.parquet",
                                              "results/speculative/best.parquet"]),
    "quantization": (["quant_summary"], ["results/quant/summary.parquet", "results/quant/choice.parquet"]),
    "report": (["all"], ["results/milestones.parquet", "results/metrics.parquet"]),
}
ADOPTED = "adopted-run.txt"  # marks a workdir holding CI's finished run: there is nothing to build


def _build_stage(workdir: Path, stage: str) -> None:
    if (workdir / ADOPTED).is_file():
        return
    result = _snakemake(workdir, "--", *STAGES[stage][0])
    assert result.returncode == 0, f"stage {stage}:\n" + result.stdout[-3000:] + result.stderr[-6000:]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A workdir for the quick DAG, not built yet: CI's own run when it hands one over
    (INFERLAB_TEST_RUN), else the tiny config on a synthetic corpus."""
    workdir = tmp_path_factory.mktemp("workflow")
    link_workflow(workdir)
    shutil.copytree(ROOT / "inferlab", workdir / "inferlab", ignore=shutil.ignore_patterns("__pycache__"))
    if os.environ.get(SHARED_RUN):
        _adopt_run(Path(os.environ[SHARED_RUN]), workdir)
        (workdir / ADOPTED).write_text(os.environ[SHARED_RUN], encoding="utf-8")
    else:
        _write_tiny_run_inputs(workdir)
    return workdir


@pytest.fixture(scope="module")
def completed_run(tiny_run):
    """The complete quick DAG (a no-op when the stage tests have built it already)."""
    _build_stage(tiny_run, "report")
    return tiny_run


@pytest.mark.slow
@pytest.mark.parametrize("stage", list(STAGES))
def test_each_stage_of_the_quick_dag_builds_and_writes_its_tables(tiny_run, stage):
    _build_stage(tiny_run, stage)
    for table in STAGES[stage][1]:
        assert len(pd.read_parquet(tiny_run / table)) > 0, table


@pytest.mark.slow
def test_quick_dag_produces_checkpoints_tables_and_report(completed_run):
    meta = completed_run / "results/models/ref_baseline/meta.json"
    assert meta.exists() and (completed_run / "results/noise_floor.parquet").exists()
    floor = pd.read_parquet(completed_run / "results/noise_floor.parquet")
    assert len(floor) == 2  # base run + one extra seed in the quick config
    for name in ("c13-report.html", "c13-report.md", "c13-inference.json", "precomputed.json",
                 "sampling-workbench.html"):
        assert (completed_run / "reports" / name).stat().st_size > 0, name
    milestones = pd.read_parquet(completed_run / "results/milestones.parquet")
    assert sorted(milestones["milestone"]) == ["M1", "M2", "M3", "M4"]
    assert set(milestones["status"]) <= {"pass", "fail", "missing"}
    assert "missing" not in set(milestones["status"])
    assert milestones["verdict"].str.len().max() <= VERDICT_CHARS, milestones["verdict"].tolist()
    # the review layer: metrics table, one ledger entry recording the report files, the bundle
    metrics = pd.read_parquet(completed_run / "results/metrics.parquet")
    assert {"kvcache", "quant", "milestones"} <= set(metrics["experiment"])
    entries = [d for d in (completed_run / "results/history").iterdir() if not d.name.startswith(".")]
    assert len(entries) == 1 and (entries[0] / "manifest.json").is_file()
    assert "reports/c13-bundle.zip" in read_json(entries[0] / "manifest.json")["report_files"]
    assert (completed_run / "reports/figures/changes_overlay.png").stat().st_size > 0


@pytest.mark.slow
def test_rerun_with_nothing_changed_does_nothing(completed_run):
    result = _snakemake(completed_run, "-n")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Nothing to be done" in result.stdout + result.stderr


@pytest.mark.slow
def test_changing_one_quant_scheme_reruns_only_that_job(completed_run):
    config = yaml.safe_load((completed_run / "tiny.yaml").read_text(encoding="utf-8"))
    schemes = config["quantization"]["schemes"]
    extra = next(s for s in ("int8_g64_sym", "int8_g128_sym", "int4_per_channel_sym") if s not in schemes)
    override = completed_run / "one-more-scheme.yaml"
    override.write_text(yaml.safe_dump({"quantization": {**config["quantization"], "schemes": [*schemes, extra]}}))
    result = _snakemake(completed_run, "-n", "--configfile", "config/quick.yaml", "tiny.yaml", override.name)
    jobs = _planned_jobs(result.stdout + result.stderr)
    assert jobs.pop("quant_scheme", 0) == 1, result.stdout[-3000:]
    assert set(jobs) <= {"quant_summary", "report", "all"}, jobs


@pytest.mark.slow
def test_changing_the_noise_floor_rejudges_the_schemes_without_rerunning_them(completed_run):
    config = yaml.safe_load((completed_run / "tiny.yaml").read_text(encoding="utf-8"))
    floor = config["noise_floor"]
    override = completed_run / "wider-floor.yaml"
    override.write_text(yaml.safe_dump({"noise_floor": {**floor, "sigmas": floor["sigmas"] + 1}}))
    result = _snakemake(completed_run, "-n", "--configfile", "config/quick.yaml", "tiny.yaml", override.name)
    jobs = _planned_jobs(result.stdout + result.stderr)
    assert jobs.pop("noise_floor", 0) == 1 and jobs.pop("quant_summary", 0) == 1, result.stdout[-3000:]
    assert set(jobs) <= {"report", "all"}, jobs


@pytest.mark.slow
def test_changing_one_models_training_reruns_only_that_model(completed_run):
    override = completed_run / "draft-lr.yaml"
    config = yaml.safe_load((completed_run / "tiny.yaml").read_text(encoding="utf-8"))
    overrides = {**config["training"].get("overrides", {}), "c1_dim64": {"seed": 7, "lr": 1.0e-3}}
    override.write_text(yaml.safe_dump({"training": {**config["training"], "overrides": overrides}}))
    result = _snakemake(completed_run, "-n", "--configfile", "config/quick.yaml", "tiny.yaml", override.name)
    jobs = _planned_jobs(result.stdout + result.stderr)
    assert jobs.get("train_model") == 1, result.stdout[-3000:]
    assert "train_noise_rerun" not in jobs and "quant_scheme" not in jobs, jobs
    assert "prepare_corpus" not in jobs, jobs


@pytest.mark.slow
def test_bad_config_key_fails_naming_it(completed_run):
    result = _snakemake(completed_run, "-n", "--config", "corpus_path=corpus.txt", "kvcache={'repz': 3}")
    assert result.returncode != 0
    assert "repz" in result.stdout + result.stderr


def test_missing_corpus_says_where_to_put_it(tmp_path):
    link_workflow(tmp_path, package=True)
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump({"corpus_url": ""}))
    result = _snakemake(tmp_path, "--config", "corpus_path=nowhere/corpus.txt", "--",
                        "results/corpus/stats.json")
    assert result.returncode != 0
    assert "nowhere/corpus.txt" in result.stdout + result.stderr


# ----------------------------------------------------------------------------- code is part of the DAG

@pytest.fixture
def edit_package(completed_run):
    """Edits files of the run's inferlab/ copy; restores their text afterwards."""
    originals = {}

    def edit(name: str, change) -> None:
        path = completed_run / "inferlab" / name
        originals.setdefault(path, path.read_text(encoding="utf-8"))
        path.write_text(change(path.read_text(encoding="utf-8")), encoding="utf-8")

    yield edit
    for path, text in originals.items():
        path.write_text(text, encoding="utf-8")


def _dry_run_jobs(workdir: Path, *args: str) -> dict[str, int]:
    result = _snakemake(workdir, "-n", *args)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return _planned_jobs(result.stdout + result.stderr)


def _add_constant(text: str) -> str:
    return text + "\n\nLINEAGE_PROBE = len(__name__)  # a semantic edit: new code that runs on import\n"


@pytest.mark.slow
def test_semantic_quant_edit_reruns_exactly_the_quant_jobs_and_report(completed_run, edit_package):
    """The scheme jobs, the summary and, on the compiled engine, the packages: fp32's and each kernel scheme's
    (compile_quant quantises too)."""
    config = yaml.safe_load((completed_run / "tiny.yaml").read_text(encoding="utf-8"))
    default = yaml.safe_load((ROOT / "config/config.yaml").read_text(encoding="utf-8"))
    engines = config.get("engine") or default["engine"]
    schemes = config["quantization"]["schemes"]
    kernels = [scheme for scheme in schemes if SCHEMES[scheme].kernel]
    packages = {"compile_quant": len(kernels) + 1} if "compiled" in engines and kernels else {}
    edit_package("quant/methods.py", _add_constant)
    assert _dry_run_jobs(completed_run) == {"quant_scheme": len(schemes), **packages, "quant_summary": 1,
                                            "report": 1, "all": 1}


@pytest.mark.slow
def test_semantic_model_edit_reruns_every_training_and_experiment(completed_run, edit_package):
    everything = _dry_run_jobs(completed_run, "--forceall")
    edit_package("core/model.py", _add_constant)
    jobs = _dry_run_jobs(completed_run)
    assert jobs == {rule: n for rule, n in everything.items() if rule not in ("prepare_corpus", "download_corpus")}
    assert jobs["train_model"] == 3 and jobs["train_noise_rerun"] >= 1


@pytest.mark.slow
def test_semantic_report_edit_reruns_only_the_report(completed_run, edit_package):
    edit_package("report/render.py", _add_constant)
    assert _dry_run_jobs(completed_run) == {"report": 1, "all": 1}


@pytest.mark.slow
def test_comment_and_docstring_edits_rerun_nothing(completed_run, edit_package):
    edit_package("quant/methods.py", lambda text: "# a comment on top\n" + text.replace('"""', '"""Reworded. ', 1))
    edit_package("quant/methods.py", lambda text: text.replace("\n\n\n", "\n\n\n# another comment\n", 1))
    assert _dry_run_jobs(completed_run) == {}


@pytest.mark.slow
def test_touching_the_package_reruns_nothing(completed_run):
    for path in (completed_run / "inferlab").rglob("*.py"):
        path.touch()
    assert _dry_run_jobs(completed_run) == {}


@pytest.mark.slow
def test_a_re_dated_corpus_reruns_nothing_and_a_changed_one_reruns_the_corpus_job(tmp_path):
    """Above Snakemake's own 1 MB limit for comparing inputs by content, as the real corpus is."""
    link_workflow(tmp_path, package=True)
    _write_tiny_run_inputs(tmp_path)
    corpus = tmp_path / "corpus.txt"
    chapters = synthetic_corpus(n_chapters=14, paragraphs=8)
    text = "".join(synthetic_corpus(n_chapters=14, paragraphs=8, seed=seed) for seed in range(60))
    corpus.write_text(text, encoding="utf-8")
    assert corpus.stat().st_size > 1_000_000
    target = "results/corpus/stats.json"
    built = _snakemake(tmp_path, "--", target)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    later = corpus.stat().st_mtime + 3600
    os.utime(corpus, (later, later))  # what a copy, a remount or a checkout does to a file it leaves alone
    assert _dry_run_jobs(tmp_path, "--", target) == {}
    corpus.write_text(text + chapters, encoding="utf-8")
    assert _dry_run_jobs(tmp_path, "--", target) == {"prepare_corpus": 1}


def _current_code_hashes(workdir: Path) -> dict[str, str]:
    """{rule: code_sha256} as common.smk computes it, read from the rule files' code_hash(...) params."""
    common = (ROOT / "workflow/rules/common.smk").read_text(encoding="utf-8")
    compute = ast.literal_eval(re.search(r"COMPUTE_SCRIPTS = (\{.*?\})", common, re.S).group(1))
    hashes = {}
    for rules in (ROOT / "workflow/rules").glob("*.smk"):
        text = rules.read_text(encoding="utf-8")
        for rule, script in re.findall(r"^rule (\w+):.*?code_hash\(\"(\w+)\"\)", text, re.S | re.M):
            hashes[rule] = rule_code_sha256(workdir / f"scripts/{script}.py", workdir, compute=script in compute)
    return hashes


@pytest.mark.slow
def test_every_output_records_a_current_lineage_and_a_code_edit_makes_it_stale(completed_run, edit_package):
    tables = sorted((completed_run / "results").rglob("*.parquet"))
    provenance = {str(path.relative_to(completed_run)): read_provenance(path) for path in tables
                  if "benchmarks" not in path.parts}
    meta = "results/models/ref_baseline/meta.json"
    provenance[meta] = read_json(completed_run / meta)
    provenance["results/milestones.parquet"] = read_provenance(completed_run / "results/milestones.parquet")
    lineage = provenance["results/quant/summary.parquet"]["lineage"]
    assert set(lineage) == {"rule", "code_sha256", "config_sha256", "settings", "inputs_sha256"}
    assert any(path.startswith("results/quant/") for path in lineage["inputs_sha256"])
    assert lineage["settings"]["gptq"]["damp"] == yaml.safe_load(
        (completed_run / "tiny.yaml").read_text(encoding="utf-8"))["quantization"]["gptq"]["damp"]
    table = lineage_table(provenance, _current_code_hashes(completed_run), workdir=completed_run)
    assert set(table["status"]) == {CURRENT}, table[table["status"] != CURRENT].to_string()
    edit_package("quant/methods.py", _add_constant)
    table = lineage_table(provenance, _current_code_hashes(completed_run), workdir=completed_run).set_index("path")
    assert table.loc["results/quant/summary.parquet", "status"] == STALE
    assert table.loc["results/kvcache/summary.parquet", "status"] == CURRENT


@pytest.mark.slow
def test_outputs_touched_after_a_code_edit_make_their_milestone_stale(completed_run, tmp_path):
    """Issue 11: a quant.py edit, `--touch`, then the report: M4 is stale, the others are not.

    Runs in a copy of the completed run, so the shared run stays current for the other tests.
    """
    workdir = tmp_path / "copy"
    shutil.copytree(completed_run, workdir, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    quant = workdir / "inferlab/quant/methods.py"
    quant.write_text(_add_constant(quant.read_text(encoding="utf-8")), encoding="utf-8")
    touched = _snakemake(workdir, "--touch")
    assert touched.returncode == 0, touched.stdout[-3000:] + touched.stderr[-3000:]
    # --touch hid the edit from Snakemake's file times; only the report runs again ...
    report = _snakemake(workdir, "--forcerun", "report", "--rerun-triggers", "mtime")
    assert report.returncode == 0, report.stdout[-3000:] + report.stderr[-3000:]
    # ... but not from the report's chain check
    status = pd.read_parquet(workdir / "results/milestones.parquet").set_index("milestone")["status"]
    assert status["M4"] == "stale" and "stale" not in set(status.drop("M4"))
    markdown = (workdir / "reports/c13-report.md").read_text(encoding="utf-8")
    assert "**M4 STALE**" in markdown
    assert "is stale: code of rule quant_scheme changed" in markdown  # the verdict says why, in the body
    # the summary reads no quantisation code; the scheme tables it was made from are what went stale
    reasons = pd.read_csv(workdir / "reports/appendix/provenance-recorded-vs-current.csv")
    assert reasons["reason"].fillna("").str.contains("code of rule quant_scheme changed").any()
    entries = [d for d in (workdir / "results/history").iterdir() if not d.name.startswith(".")]
    assert len(entries) == 2  # the ledger kept the first run's entry


@pytest.mark.slow
def test_a_config_edit_and_a_code_edit_between_two_runs_are_each_named_in_the_diff(completed_run, tmp_path):
    """Issue 23 on the quick DAG: the noise floor's sigmas edited in the config and the roofline's
    bound edited in the code, one rerun (torch-free jobs only: the floor re-judges the schemes in
    quant_summary, it re-times none), and the diff of the two ledger entries names each cause on
    exactly the metrics it moved; nothing is unexplained."""
    workdir = tmp_path / "copy"
    shutil.copytree(completed_run, workdir, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    overlay = yaml.safe_load((workdir / "tiny.yaml").read_text(encoding="utf-8"))
    old_sigmas = overlay["noise_floor"]["sigmas"]
    overlay["noise_floor"]["sigmas"] = old_sigmas + 2
    (workdir / "tiny.yaml").write_text(yaml.safe_dump(overlay, allow_unicode=True), encoding="utf-8")
    # the jobs must run the edited copy: Snakemake resolves a rule's script through symlinks, and
    # scripts/_checkout.py puts the checkout its own file resolves to first on sys.path
    for name in ("workflow", "scripts"):
        (workdir / name).unlink()
        shutil.copytree(ROOT / name, workdir / name, ignore=shutil.ignore_patterns("__pycache__"))
    roofline = workdir / "inferlab/kvcache/roofline.py"
    text = roofline.read_text(encoding="utf-8")
    term = "bound_ms = max(memory_ms, compute_ms)"
    assert term in text
    roofline.write_text(text.replace(term, "bound_ms = 2 * max(memory_ms, compute_ms)"), encoding="utf-8")
    result = _snakemake(workdir)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    ran = set(re.findall(r"^(?:local)?rule (\w+):", result.stdout + result.stderr, re.M))
    # roofline.py is in speculative_summary's code too (each step against its bound), not the machine
    # probe's: a new bound measures nothing again; no quant_scheme job: the floor is quant_summary's input only
    assert ran == {"noise_floor", "quant_summary", "roofline", "speculative_summary", "report", "all"}, ran
    old, new = list_runs(workdir / "results/history")[-2:]
    table = tmp_path / "diff.csv"
    shown = subprocess.run([sys.executable, "-m", "inferlab.report.changes", str(old), str(new), "--table", str(table)],
                           cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert shown.returncode == 0, shown.stderr
    d = pd.read_csv(table)
    assert not (d["cause_kind"] == "unexplained").any(), d[d["cause_kind"] == "unexplained"].to_string()
    sigmas = f"noise_floor.sigmas {old_sigmas:g} → {old_sigmas + 2:g}"
    floor = d[(d["experiment"] == "models") & (d["metric"] == "noise_floor")]
    assert len(floor) == 1 and floor["deterministic_differs"].all(), floor.to_string()
    assert sigmas in floor["cause"].iloc[0], floor["cause"].tolist()
    anchor = d[(d["experiment"] == "roofline") & ~d["timing"] & d["cause"].notna()]
    assert len(anchor) and anchor["cause"].str.contains("code: roofline: inferlab/kvcache/roofline.py",
                                                        regex=False).all(), anchor["cause"].tolist()
    moved = d[d["deterministic_differs"]]
    assert set(moved["cause_kind"]) <= {"config", "code", "input"}, moved[["metric", "key", "cause"]].to_string()
    assert "<summary>config: noise_floor.sigmas" in shown.stdout and "<summary>code: roofline:" in shown.stdout


# ----------------------------------------------------------------------- reproducing a published run

def _outputs(workdir: Path) -> dict[str, str]:
    """{path: sha256} of every file under results/ and reports/: what a refused reproduction must leave alone."""
    return {str(p.relative_to(workdir)): file_sha256(p) for name in ("results", "reports")
            for p in sorted((workdir / name).rglob("*")) if p.is_file()}


def _fresh_workdir(completed_run: Path, workdir: Path) -> Path:
    """Only the code, the config and the corpus of the completed run: no result, no Snakemake metadata."""
    link_workflow(workdir, package=True)
    shutil.copyfile(completed_run / "tiny.yaml", workdir / "tiny.yaml")
    if (completed_run / CORPUS_PATH_FILE).is_file():
        shutil.copyfile(completed_run / CORPUS_PATH_FILE, workdir / CORPUS_PATH_FILE)
    else:
        shutil.copyfile(completed_run / "corpus.txt", workdir / "corpus.txt")
    return workdir


def _threads_of(completed_run: Path) -> list[str]:
    """The thread counts the completed run used (CI's own run: all cores), so that nothing but the import
    differs."""
    return [] if (completed_run / ADOPTED).is_file() else ONE_THREAD


def _ran(result: subprocess.CompletedProcess) -> dict[str, int]:
    rules = re.findall(r"^(?:local)?rule (\w+):", result.stdout + result.stderr, re.M)
    return {rule: rules.count(rule) for rule in set(rules)}


@pytest.fixture(scope="module")
def reproduction(completed_run, tmp_path_factory):
    """A fresh directory with the code, the completed run's bundle and its corpus, reproduced from the bundle."""
    workdir = _fresh_workdir(completed_run, tmp_path_factory.mktemp("reproduction"))
    shutil.copyfile(completed_run / "reports/c13-bundle.zip", workdir / "published.zip")
    result = _snakemake(workdir, config=("reproduce=published.zip",), threads=_threads_of(completed_run))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    return workdir, _ran(result)


@pytest.mark.slow
def test_a_bundle_reproduces_every_deterministic_metric_without_training(completed_run, reproduction):
    workdir, ran = reproduction
    assert not {"train_model", "train_noise_rerun"} & set(ran), ran
    seeds = yaml.safe_load((workdir / "tiny.yaml").read_text(encoding="utf-8"))["noise_floor"]["extra_seeds"]
    assert ran["import_checkpoint"] == 3 + len(seeds) and ran["report"] == 1, ran
    everything = _dry_run_jobs(completed_run, "--forceall")
    assert set(ran) == {*everything} - {"train_model", "train_noise_rerun"} | {
        "import_checkpoint", "import_published_metrics"}, ran
    for member in zipfile.ZipFile(workdir / "published.zip").namelist():
        if member.startswith(("models/", "noise/")):
            imported, original = workdir / "results" / member, completed_run / "results" / member
            assert not imported.is_symlink() and imported.read_bytes() == original.read_bytes()
    report = (workdir / "reports/c13-report.md").read_text(encoding="utf-8")
    line = re.search(r"Reproduction of bundle published.zip \(sha256 [0-9a-f]{16}…\).*?(\d+) of (\d+) deterministic "
                     r"metrics are identical to the published run's; (\d+) agree within .*?; (\d+) differ", report)
    assert line, report[:3000]
    identical, total, within, differ = map(int, line.groups())
    assert identical == total > 50 and within == differ == 0, line.group(0)
    assert "imported from bundle published.zip" in report


@pytest.mark.slow
def test_a_run_directory_imports_the_same_files_and_plans_no_training(completed_run, tmp_path):
    workdir = _fresh_workdir(completed_run, tmp_path)
    source = ("reproduce=" + str(completed_run),)
    planned = _planned_jobs(_snakemake(workdir, "-n", config=source).stdout)
    assert planned["import_checkpoint"] >= 4 and not {"train_model", "train_noise_rerun"} & set(planned), planned
    imports = ["import_checkpoint", "import_published_metrics"]
    result = _snakemake(workdir, "--until", *imports, config=source)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert set(_ran(result)) == set(imports), _ran(result)
    for path in (workdir / "results").rglob("*"):
        if path.is_file() and "reproduce" not in path.parts and path.parent.name != "corpus":
            assert path.read_bytes() == (completed_run / path.relative_to(workdir)).read_bytes(), path


def _bundle_variant(published: Path, out: Path, keep=lambda name: True, swap: dict | None = None) -> Path:
    """The bundle rebuilt from its own members: some left out (keep), some replaced by others (swap), with a
    manifest that agrees with what it holds."""
    unpacked = out.with_suffix("")
    with zipfile.ZipFile(published) as archive:
        archive.extractall(unpacked)
    files = {name: unpacked / name for name in zipfile.ZipFile(published).namelist()
             if name != MANIFEST_NAME and keep(name)}
    files |= {name: unpacked / other for name, other in (swap or {}).items()}
    return build_bundle(out, files)


def _edited_member(published: Path, out: Path, member: str) -> Path:
    """The bundle with one byte of member flipped and the manifest left as it was."""
    with zipfile.ZipFile(published) as source, zipfile.ZipFile(out, "w") as target:
        for info in source.infolist():
            data = source.read(info)
            target.writestr(info, data[:-1] + bytes([data[-1] ^ 1]) if info.filename == member else data)
    return out


@pytest.mark.slow
def test_bad_sources_are_refused_by_the_dry_run_leaving_every_output_alone(completed_run, tmp_path):
    workdir = completed_run
    published = workdir / "reports/c13-bundle.zip"
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "notes.zip").write_text("not a zip at all")
    (bad / "cut.zip").write_bytes(published.read_bytes()[: published.stat().st_size * 2 // 3])
    weights = "models/c1_dim64/model.safetensors"
    cases = {
        "absent.zip": "no such bundle or run directory",
        "notes.zip": "is not a whole zip file",
        "cut.zip": "is not a whole zip file",
        str(_edited_member(published, bad / "edited.zip", weights)): f"{weights} has sha256",
        str(_bundle_variant(published, bad / "old.zip", keep=lambda n: not n.startswith(("models/", "noise/")))):
            "holds no checkpoint",
        str(_bundle_variant(published, bad / "swapped.zip", swap={
            f"models/c1_dim64/{file}": f"models/ref_baseline/{file}" for file in reproduce.CHECKPOINT_FILES})):
            f"{weights} does not hold the model the config describes",
    }
    before = _outputs(workdir)
    for source, message in cases.items():
        result = _snakemake(workdir, "-n", config=(f"reproduce={bad / source if '/' not in source else source}",))
        _assert_refused(result, message)
    # hex with letters: Snakemake reads --config values as YAML, and 000… would be the number 0
    result = _snakemake(workdir, "-n", config=(f"reproduce={published}", "reproduce_sha256=" + "ab" * 32))
    _assert_refused(result, "not the reproduce_sha256")
    steps = workdir / "more-steps.yaml"
    config = yaml.safe_load((workdir / "tiny.yaml").read_text(encoding="utf-8"))
    defaults = config["training"]["defaults"]
    steps.write_text(yaml.safe_dump({"training": {**config["training"],
                                                  "defaults": {**defaults, "steps": defaults["steps"] + 1}}}))
    result = _snakemake(workdir, "-n", "--configfile", "config/quick.yaml", "tiny.yaml", steps.name,
                        config=(f"reproduce={published}",))
    _assert_refused(result, "training.defaults.steps")
    assert _outputs(workdir) == before


def _assert_refused(result: subprocess.CompletedProcess, message: str) -> None:
    tail = (result.stdout + result.stderr).strip().splitlines()[-5:]
    assert result.returncode != 0 and message in "\n".join(tail), tail
    assert not any('File "' in line for line in tail), tail


@pytest.mark.slow
def test_a_reproduction_may_change_an_experiment_setting_and_the_report_names_it(completed_run, reproduction):
    workdir, _ = reproduction
    config = yaml.safe_load((workdir / "tiny.yaml").read_text(encoding="utf-8"))
    sampling = config["sampling"]
    wider = workdir / "more-resamples.yaml"
    resamples = sampling["repetition"]["bootstrap_resamples"]
    wider.write_text(yaml.safe_dump({"sampling": {**sampling, "repetition": {
        **sampling["repetition"], "bootstrap_resamples": resamples + 100}}}))
    result = _snakemake(workdir, "--configfile", "config/quick.yaml", "tiny.yaml", wider.name,
                        config=("reproduce=published.zip",), threads=_threads_of(completed_run))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert not {"train_model", "import_checkpoint"} & set(_ran(result)), _ran(result)
    report = (workdir / "reports/c13-report.md").read_text(encoding="utf-8")
    assert f"sampling.repetition.bootstrap_resamples {resamples} → {resamples + 100}" in report, report[:4000]
