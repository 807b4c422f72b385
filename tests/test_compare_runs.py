"""tools/compare_runs.py: equal deterministic tables pass, any result difference fails, timings don't count."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("compare_runs", ROOT / "tools/compare_runs.py")
compare_runs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(compare_runs)


def _run(path: Path, delta_loss: float = 0.01, ms_per_token: float = 1.5, params: int = 1000) -> Path:
    (path / "results/corpus").mkdir(parents=True)
    (path / "results/corpus/stats.json").write_text(json.dumps({"chapters": 120, "unk_rate": 0.015}))
    (path / "results/models/m").mkdir(parents=True)
    (path / "results/models/m/meta.json").write_text(json.dumps(
        {"params": params, "model_config": {"d_model": 64}, "wall_time_s": ms_per_token}))
    tables = {
        "results/sampling/distribution.parquet": pd.DataFrame({"temperature": [0.8, 1.0], "kept": [3, 5],
                                                                "entropy": [1.2, float("nan")]}),
        "results/speculative/greedy_identity.parquet": pd.DataFrame({"k": [3], "identical": [True]}),
        "results/quant/summary.parquet": pd.DataFrame({"scheme": ["int8"], "delta_loss": [delta_loss],
                                                        "ms_per_token": [ms_per_token], "quantize_s": [0.3]}),
    }
    for rel, frame in tables.items():
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        frame.to_parquet(path / rel)
    return path


def test_identical_results_pass_even_when_timings_differ(tmp_path):
    a = _run(tmp_path / "a")
    b = _run(tmp_path / "b", ms_per_token=9.0)
    assert compare_runs.compare_runs(a, b) == []
    assert compare_runs.main([str(a), str(b)]) == 0


def test_a_different_delta_loss_or_param_count_fails_naming_it(tmp_path):
    a = _run(tmp_path / "a")
    b = _run(tmp_path / "b", delta_loss=0.0100001, params=1001)
    problems = compare_runs.compare_runs(a, b)
    assert any("delta_loss" in p and "quant/summary" in p for p in problems), problems
    assert any("params" in p for p in problems), problems
    assert compare_runs.main([str(a), str(b)]) == 1
    assert compare_runs.compare_runs(a, _run(tmp_path / "c", delta_loss=0.0100001), rtol=1e-4) == []


def test_a_missing_table_fails(tmp_path):
    a = _run(tmp_path / "a")
    b = _run(tmp_path / "b")
    (b / "results/speculative/greedy_identity.parquet").unlink()
    assert any("greedy_identity" in p for p in compare_runs.compare_runs(a, b))
