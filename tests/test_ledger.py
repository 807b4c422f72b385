"""The append-only run ledger and the reviewer bundle."""

from __future__ import annotations

import shutil
import subprocess
import zipfile
from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest

from inferlab.jobs.lineage import file_sha256
from inferlab.review import bundle, ledger

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def metrics(value: float) -> pd.DataFrame:
    return pd.DataFrame([{"experiment": "quant", "metric": "delta_loss", "key": "int4", "value": value}])


def report_files(tmp_path):
    html, md = tmp_path / "report.html", tmp_path / "report.md"
    html.write_text("<html>report</html>")
    md.write_text("# report\n")
    return [html, md]


def test_entries_hold_metrics_and_a_manifest_with_file_hashes(tmp_path):
    files = report_files(tmp_path)
    entry = ledger.append_run(tmp_path / "history", metrics(0.1), {"config_hash": "abc", "machine": {"cpu": "x"}},
                              files, now=T0)
    manifest = ledger.read_manifest(entry)
    assert manifest["run_id"] == entry.name and manifest["time"].startswith("2026-01-01T12:00")
    assert manifest["config_hash"] == "abc" and manifest["machine"] == {"cpu": "x"}
    assert {"git_commit", "git_dirty", "metrics_hash"} <= set(manifest)
    assert manifest["report_files"] == {str(f): file_sha256(f) for f in files}
    pd.testing.assert_frame_equal(pd.read_parquet(entry / ledger.METRICS_FILE), metrics(0.1))


def test_previous_run_is_the_entry_before(tmp_path):
    history = tmp_path / "history"
    first = ledger.append_run(history, metrics(0.1), {}, [], now=T0)
    second = ledger.append_run(history, metrics(0.2), {"run_id": "b"}, [], now=T0 + timedelta(hours=1))
    assert ledger.list_runs(history) == [first, second]
    assert ledger.previous_run(history, before=second.name) == first
    assert ledger.previous_run(history, before=first.name) is None
    assert ledger.previous_run(history) == second
    with pytest.raises(KeyError, match="not in the ledger"):
        ledger.previous_run(history, before="nope")


def test_an_entry_is_never_rewritten(tmp_path):
    history = tmp_path / "history"
    entry = ledger.append_run(history, metrics(0.1), {}, [], now=T0)
    before = (entry / ledger.MANIFEST_FILE).read_bytes()
    with pytest.raises(FileExistsError, match="never rewrites"):
        ledger.append_run(history, metrics(0.9), {}, [], now=T0)  # same second, same commit: same id
    assert (entry / ledger.MANIFEST_FILE).read_bytes() == before


def test_an_interrupted_write_leaves_no_half_entry_and_loses_none(tmp_path, monkeypatch):
    history = tmp_path / "history"
    kept = ledger.append_run(history, metrics(0.1), {}, [], now=T0)
    kept_files = {p.name: p.read_bytes() for p in kept.iterdir()}
    real_write = ledger.write_table

    def write_then_die(df, path, provenance=None):
        real_write(df, path, provenance)  # the table lands, then the run is interrupted
        raise KeyboardInterrupt

    monkeypatch.setattr(ledger, "write_table", write_then_die)
    with pytest.raises(KeyboardInterrupt):
        ledger.append_run(history, metrics(0.2), {}, [], now=T0 + timedelta(hours=1))
    assert sorted(p.name for p in history.iterdir()) == [kept.name]  # no half entry, no temp dir left
    assert {p.name: p.read_bytes() for p in kept.iterdir()} == kept_files
    monkeypatch.undo()
    # a temp dir left by a killed process (no cleanup ran) is invisible to readers
    shutil.copytree(kept, history / ".tmp-killed-123")
    (history / ".tmp-killed-123" / ledger.MANIFEST_FILE).unlink()
    assert ledger.list_runs(history) == [kept]


def test_missing_report_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="gone.html"):
        ledger.append_run(tmp_path / "history", metrics(0.1), {}, [tmp_path / "gone.html"])
    assert not (tmp_path / "history").exists() or not any((tmp_path / "history").iterdir())


# ------------------------------------------------------------------------------------------ bundle


def unzip(zip_path, into):
    with zipfile.ZipFile(zip_path) as archive:
        archive.extractall(into)
    return into


def sha256sum_check(root) -> subprocess.CompletedProcess:
    return subprocess.run(["sha256sum", "-c", bundle.MANIFEST_NAME], cwd=root, capture_output=True, text=True)


@pytest.fixture
def built(tmp_path):
    html, md = report_files(tmp_path)
    table = tmp_path / "metrics.parquet"
    metrics(0.1).to_parquet(table)
    files = {"report.html": html, "report.md": md, "results/metrics.parquet": table}
    return bundle.build_bundle(tmp_path / "reports" / "c13-bundle.zip", files), files


@pytest.mark.skipif(shutil.which("sha256sum") is None, reason="needs coreutils sha256sum")
def test_bundle_manifest_verifies_with_sha256sum(built, tmp_path):
    zip_path, files = built
    root = unzip(zip_path, tmp_path / "unzipped")
    result = sha256sum_check(root)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count(": OK") == len(files)


@pytest.mark.skipif(shutil.which("sha256sum") is None, reason="needs coreutils sha256sum")
def test_a_tampered_bundle_fails_the_check(built, tmp_path):
    zip_path, _ = built
    root = unzip(zip_path, tmp_path / "unzipped")
    (root / "results" / "metrics.parquet").write_bytes(b"tampered")
    result = sha256sum_check(root)
    assert result.returncode != 0 and "results/metrics.parquet: FAILED" in result.stdout


def test_bundle_rejects_paths_outside_the_root_and_leaves_no_partial_zip(tmp_path):
    html, _ = report_files(tmp_path)
    with pytest.raises(ValueError, match="relative path"):
        bundle.build_bundle(tmp_path / "b.zip", {"../escape.html": html})
    with pytest.raises(FileNotFoundError, match="missing.md"):
        bundle.build_bundle(tmp_path / "b.zip", {"report.md": tmp_path / "missing.md"})
    assert not list(tmp_path.glob("b.zip*"))
