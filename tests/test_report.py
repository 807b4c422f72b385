"""The report: milestone logic on hand-made tables (pass / fail / missing), rendering, offline HTML."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from inferlab.noise import noise_floor_table
from inferlab.report.build import ReportPaths, write_report
from inferlab.report.inputs import ReportInputs
from inferlab.report.milestones import FAIL, MISSING, PASS, check_m1, check_m2, check_m3, check_m4
from inferlab.report.runinfo import benchmark_table, classify_outputs, config_hash
from inferlab.sampling import distribution_rows

SEED_REF = Path(__file__).resolve().parent.parent / "config" / "seed-reference.json"
MACHINE = {
    "cpu_model": "Test CPU",
    "cpu_cores": 2,
    "torch_threads": 1,
    "device": "cpu",
    "device_name": "Test CPU",
    "torch_version": "2.x",
    "os": "Linux",
    "git_commit": "abc123",
    "git_dirty": False,
}
MODEL = {"model": "ref_baseline", "params": 3688704, "checkpoint_sha256": "f" * 64, "val_loss": 4.7}
PROV = {"machine": MACHINE, "model": MODEL}
SETTINGS = {
    "kvcache": {"reps": 3, "lengths": [32, 256]},
    "sampling": {
        "temperatures": [0.7, 1.3],
        "top_ps": [0.9, 1.0],
        "min_p": {"temperatures": [1.0], "values": [0.05]},
        "repetition": {"prompts": ["a", "b"], "samples": 2, "new_tokens": 24, "bootstrap_resamples": 100},
    },
    "speculative": {"prompts": ["a", "b"], "seeds": [0], "new_tokens": 16},
}
CELLS = [
    {"cell": "T0.7_p0.9", "truncation": "top_p", "temperature": 0.7, "top_p": 0.9, "min_p": 0.0},
    {"cell": "T0.7_p1.0", "truncation": "top_p", "temperature": 0.7, "top_p": 1.0, "min_p": 0.0},
    {"cell": "T1.3_p0.9", "truncation": "top_p", "temperature": 1.3, "top_p": 0.9, "min_p": 0.0},
    {"cell": "T1.3_p1.0", "truncation": "top_p", "temperature": 1.3, "top_p": 1.0, "min_p": 0.0},
    {"cell": "T1.0_minp0.05", "truncation": "min_p", "temperature": 1.0, "top_p": 1.0, "min_p": 0.05},
]
LOGITS = [3.0, 2.5, 2.0, 1.0, 0.5, 0.0, -1.0, -2.0]


def kv_tables(same_output: bool = True) -> dict[str, pd.DataFrame]:
    rows = []
    for length, (c, n) in {32: (40.0, 60.0), 256: (300.0, 900.0)}.items():
        for rep in range(3):
            for mode, ms in (("cache", c + rep), ("no_cache", n + rep)):
                rows.append(
                    {
                        "device": "cpu",
                        "threads": 2,
                        "length": length,
                        "mode": mode,
                        "rep": rep,
                        "total_ms": ms,
                        "ms_per_token": ms / length,
                        "same_output": same_output or not (length == 256 and rep == 1),
                        "kv_bytes_per_token": 8192.0,
                        "prompt_tokens": 5,
                    }
                )
    timings = pd.DataFrame(rows)
    summary = pd.DataFrame(
        [
            {
                "length": 32,
                "mode": m,
                "reps": 3,
                "ms_per_token_median": 1.0,
                "speed_ratio": 1.5,
                "speed_ratio_min": 1.45,
                "speed_ratio_max": 1.55,
                "same_output_all": True,
                "kv_bytes_per_token": 8192.0,
            }
            for m in ("cache", "no_cache")
        ]
        + [
            {
                "length": 256,
                "mode": m,
                "reps": 3,
                "ms_per_token": 1.0,
                "speed_ratio": 3.0,
                "speed_ratio_min": 2.9,
                "speed_ratio_max": 3.1,
                "same_output_all": same_output,
                "kv_bytes_per_token": 8192.0,
            }
            for m in ("cache", "no_cache")
        ]
    )
    fit = pd.DataFrame(
        [
            {
                "length": L,
                "a_ms": 1.1,
                "b_ms_per_position": 0.004,
                "r2": 0.98,
                "predicted_ratio": r,
                "measured_ratio": r,
                "flop_estimate_ratio": f,
                "fixed_share_no_cache": 0.5,
            }
            for L, r, f in ((32, 1.5, 9.0), (256, 3.2, 60.0))
        ]
    )
    profile = pd.DataFrame(
        [{"rank": 1, "op": "aten::linear", "op_ms_per_step": 0.3, "wall_ms": 1.0, "op_ms": 0.4, "op_share": 0.4}]
    )
    roofline = pd.DataFrame(
        [
            {
                "subject": "anchor",
                "model": "anchor-27B",
                "lower_bound_ms_per_token": 16.6,
                "measured_ms_per_token": float("nan"),
            },
            {
                "subject": "ours",
                "model": "ref_baseline",
                "lower_bound_ms_per_token": 0.01,
                "measured_ms_per_token": 1.2,
            },
        ]
    )
    return {"kv_timings": timings, "kv_summary": summary, "kv_fit": fit, "kv_profile": profile, "roofline": roofline}


def sampling_tables(full: bool = True) -> dict[str, pd.DataFrame]:
    dist = pd.DataFrame(distribution_rows(LOGITS, CELLS))
    cells = [{"cell": "greedy", "truncation": "none", "temperature": 0.0, "top_p": 1.0, "min_p": 0.0}] + CELLS
    if not full:
        cells = cells[:-2]
    rows = []
    for i, c in enumerate(cells):
        for metric, base in (
            ("seq_rep_4", 0.5 - 0.05 * i),
            ("distinct_1", 0.3),
            ("distinct_2", 0.6),
            ("in_corpus_4gram_share", 0.8 - 0.02 * i),
        ):
            rows.append(
                {
                    **c,
                    "metric": metric,
                    "mean": base,
                    "ci_low": base - 0.02,
                    "ci_high": base + 0.02,
                    "n_samples": 4,
                    "n_prompts": 2,
                    "resamples": 100,
                }
            )
    default = pd.DataFrame(
        [
            {
                "cell": "T1.3_p0.9",
                "truncation": "top_p",
                "temperature": 1.3,
                "top_p": 0.9,
                "min_p": 0.0,
                "rule": "lowest seq-rep-4 with in-corpus share >= greedy - 0.1",
                "rule_satisfied": True,
                "seq_rep_4": 0.35,
                "kept": int(dist.loc[dist.cell == "T1.3_p0.9", "kept"].iloc[0]),
                "min_p_decision": "keep top-p",
                "min_p_reason": "min-p gap within the CIs",
            }
        ]
    )
    samples = pd.DataFrame(
        [
            {
                "cell": "T0.7_p0.9",
                "prompt": "a",
                "sample": 0,
                "seq_rep_4": 0.1,
                "in_corpus_4gram_share": 0.7,
                "text": "generated text",
            }
        ]
    )
    return {"sp_distribution": dist, "sp_repetition": pd.DataFrame(rows), "sp_default": default, "sp_samples": samples}


def spec_tables(all_identical: bool = True) -> dict[str, pd.DataFrame]:
    rows = []
    for draft, c in (("c1_dim64", 0.09), ("c1_dim128", 0.29)):
        for k in (1, 3):
            alpha = 0.6 if draft == "c1_dim64" else 0.7
            e = (1 - alpha ** (k + 1)) / (1 - alpha)
            rows.append(
                {
                    "draft": draft,
                    "k": k,
                    "alpha": alpha,
                    "tokens_per_target_forward": e * 1.005,
                    "formula_tokens_per_target_forward": e,
                    "formula_rel_error": -0.005,
                    "c_params": c,
                    "c_time": c * 2,
                    "speedup_theory_params": e / (k * c + 1),
                    "speedup_theory_time": e / (k * 2 * c + 1),
                    "wall_speedup": 0.9,
                    "wall_speedup_min": 0.8,
                    "wall_speedup_max": 1.0,
                }
            )
    ident = pd.DataFrame(
        [
            {"draft": d, "k": k, "prompt_index": p, "identical": all_identical or not (k == 3 and p == 1)}
            for d in ("c1_dim64", "c1_dim128")
            for k in (1, 3)
            for p in (0, 1)
        ]
    )
    return {"spec_summary": pd.DataFrame(rows), "spec_identity": ident}


def quant_tables(best_delta: float = 0.004) -> dict[str, pd.DataFrame]:
    rows = [
        {
            "scheme": s,
            "bits": b,
            "method": m,
            "loss": 4.7 + d,
            "fp32_loss": 4.7,
            "delta_loss": d,
            "kl_mean_nats": d / 2,
            "top1_agreement": 0.99,
            "effective_bits": eb,
            "speed": sp,
        }
        for s, b, m, d, eb, sp in (
            ("int8_per_channel_sym", 8, "rtn", best_delta / 4, 8.1, "measured"),
            ("int4_gptq", 4, "gptq", best_delta, 4.2, "quality only"),
            ("int3_per_tensor_sym", 3, "rtn", 0.5, 3.0, "quality only"),
            ("bf16", 16, "bf16", 0.0001, 16.0, "measured"),
        )
    ]
    runs = [{"name": "ref_baseline", "seed": 1, "val_loss": 4.700},
            {"name": "ref_baseline_seed101", "seed": 101, "val_loss": 4.707}]
    nf = noise_floor_table(runs, sigmas=3, use="fixed", fixed_value=0.015)
    return {"quant_summary": pd.DataFrame(rows), "noise_floor": nf}


def make_data(**tables) -> ReportInputs:
    data = ReportInputs(
        config=SETTINGS, target="ref_baseline", seed_reference=json.loads(SEED_REF.read_text(encoding="utf-8"))
    )
    for key, df in tables.items():
        data.tables[key] = df
        data.provenance[key] = PROV
    data.metas = {
        "ref_baseline": {"params": 3688704, "val_loss": 4.7, "weights_sha256": "f" * 64, "tokens_per_s": 9e3},
        "c1_dim128": {"params": 1057920, "val_loss": 5.0, "weights_sha256": "e" * 64},
    }
    data.json["sp_logits"] = {
        "prompt": "p",
        "model": "ref_baseline",
        "checkpoint_sha256": "f" * 64,
        "vocab": [f"t{i}" for i in range(len(LOGITS))],
        "logits": LOGITS,
    }
    data.json["corpus_stats"] = {"train_chars": 1000, "val_chars": 100, "unk_rate": 0.014, "raw_sha256": "a" * 64}
    return data


def full_data(**overrides) -> ReportInputs:
    tables = {**kv_tables(), **sampling_tables(), **spec_tables(), **quant_tables()}
    tables.update(overrides)
    return make_data(**tables)


# ---------------------------------------------------------------------------------- milestones


def test_all_milestones_pass_on_good_tables():
    data = full_data()
    for check in (check_m1, check_m2, check_m3, check_m4):
        m = check(data, MACHINE)
        assert m.status == PASS, (m.id, m.verdict)
        assert m.stamps["model"]["checkpoint_sha256"] == "f" * 64
        assert m.stamps["machine"]["cpu_model"] == "Test CPU"
        assert m.stamps["repeats"] and m.stamps["baseline"]


def test_m1_sentence_is_built_from_measured_numbers():
    m = check_m1(full_data(), MACHINE)
    assert m.evidence["length"] == 256 and m.evidence["ratio"] == pytest.approx(3.0)
    for number in ("3.00x", "60.0x", "1.100 ms", "0.0040 ms", "40%", "0.0100 ms/token", "1.200 ms"):
        assert number in m.verdict, number


def test_m1_fails_when_an_output_differs_and_is_missing_without_fit():
    m = check_m1(full_data(**kv_tables(same_output=False)), MACHINE)
    assert m.status == FAIL and "same_output is false in 2 of 12 rows" in m.verdict
    data = full_data()
    data.tables["kv_fit"] = None
    m = check_m1(data, MACHINE)
    assert m.status == MISSING and "results/kvcache/fit.parquet" in m.missing_inputs


def test_m2_fails_on_an_incomplete_grid_and_on_a_fallback_default():
    m = check_m2(full_data(**{"sp_repetition": sampling_tables(full=False)["sp_repetition"]}), MACHINE)
    assert m.status == FAIL and "2 grid cells absent" in m.verdict
    default = sampling_tables()["sp_default"].assign(rule_satisfied=False)
    assert check_m2(full_data(sp_default=default), MACHINE).status == FAIL
    data = full_data()
    data.tables["sp_default"] = None
    assert check_m2(data, MACHINE).status == MISSING


def test_m2_cites_rule_kept_count_and_min_p_decision():
    m = check_m2(full_data(), MACHINE)
    kept = int(sampling_tables()["sp_distribution"].set_index("cell").loc["T1.3_p0.9", "kept"])
    assert f"Kept tokens at the prompt: {kept}" in m.verdict
    assert "keep top-p" in m.verdict and "min-p gap within the CIs" in m.verdict


def test_m3_choice_and_identity():
    m = check_m3(full_data(), MACHINE)
    assert m.status == PASS and m.evidence["greedy_identical"] == m.evidence["greedy_cases"] == 8
    best = spec_tables()["spec_summary"].sort_values("speedup_theory_time").iloc[-1]
    assert (m.evidence["draft"], m.evidence["k"]) == (best["draft"], best["k"])
    m = check_m3(full_data(**spec_tables(all_identical=False)), MACHINE)
    assert m.status == FAIL and "2 of 8" in m.verdict


def test_m4_pass_fail_missing():
    m = check_m4(full_data(), MACHINE)
    assert m.status == PASS and m.evidence["scheme"] == "int4_gptq"  # fewest effective bits below the floor
    assert "decode speed for bf16, int8_per_channel_sym" in m.verdict
    m = check_m4(
        full_data(
            **{
                "quant_summary": quant_tables(best_delta=0.2)["quant_summary"].assign(
                    delta_loss=lambda d: d["delta_loss"].clip(lower=0.03)
                )
            }
        ),
        MACHINE,
    )
    assert m.status == FAIL and "no scheme's loss increase is below the noise floor 0.0150" in m.verdict
    data = full_data()
    data.tables["quant_summary"] = None
    assert check_m4(data, MACHINE).status == MISSING


def test_everything_missing_gives_missing_not_a_crash(tmp_path):
    data = make_data()
    data.json.clear()
    paths = _paths(tmp_path)
    milestones = write_report(data, paths, {"config_sha256": "0" * 64}, MACHINE)
    assert [m.status for m in milestones] == [MISSING] * 4
    assert "MISSING" in Path(paths.html).read_text(encoding="utf-8")
    assert "MISSING" in Path(paths.workbench).read_text(encoding="utf-8")


# ---------------------------------------------------------------------------------- rendering


def _paths(tmp: Path) -> ReportPaths:
    from inferlab.report.figures import FIGURES

    return ReportPaths(
        milestones=str(tmp / "results/milestones.parquet"),
        html=str(tmp / "reports/c13-report.html"),
        markdown=str(tmp / "reports/c13-report.md"),
        inference_json=str(tmp / "reports/c13-inference.json"),
        precomputed_json=str(tmp / "reports/precomputed.json"),
        workbench=str(tmp / "reports/sampling-workbench.html"),
        figures={s: str(tmp / f"reports/figures/{s}.png") for s in FIGURES},
    )


EXTERNAL = re.compile(r"https?://|(?:src|href)\s*=\s*[\"']?//|url\(\s*[\"']?(?:https?:)?//", re.I)


def test_render_on_hand_made_tables(tmp_path):
    paths = _paths(tmp_path)
    run = {
        "config_sha256": config_hash({"a": 1}),
        "git_commit": "abc123",
        "git_dirty": False,
        "benchmarks": pd.DataFrame([{"job": "train/ref_baseline", "seconds": 5.0, "max_rss_mb": 500.0}]),
        "outputs": pd.DataFrame([{"path": "results/x.parquet", "status": "reused"}]),
    }
    milestones = write_report(full_data(), paths, run, MACHINE)
    assert [m.status for m in milestones] == [PASS] * 4

    table = pd.read_parquet(paths.milestones)
    assert list(table["milestone"]) == ["M1", "M2", "M3", "M4"]
    for col in (
        "status",
        "evidence_json",
        "model",
        "model_params",
        "model_checkpoint_sha256",
        "model_val_loss",
        "machine_cpu_model",
        "machine_cpu_cores",
        "machine_device",
        "machine_torch_version",
        "machine_os",
        "machine_git_commit",
        "machine_git_dirty",
        "repeats",
        "baseline",
    ):
        assert table[col].notna().all(), col
    assert json.loads(table.loc[0, "evidence_json"])["length"] == 256

    page = Path(paths.html).read_text(encoding="utf-8")
    assert page.count("data:image/png;base64,") == len(paths.figures)
    assert not EXTERNAL.search(page), EXTERNAL.search(page)
    assert "seed page (theirs)" in page and "1,057,920" in page and "difference of 8,192" in page
    assert "abc123" in page and "train/ref_baseline" in page

    md = Path(paths.markdown).read_text(encoding="utf-8")
    for stem, fig in paths.figures.items():
        assert f"(figures/{stem}.png)" in md
        assert Path(fig).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "M1 KV cache" in md and "PASS" in md

    inference = json.loads(Path(paths.inference_json).read_text(encoding="utf-8"))
    assert inference["schema"] == "inferlab/c13-inference@1"
    assert len(inference["kvcache"]["timings"]) == 12 and inference["sampling"]["logits"]["logits"] == LOGITS
    pre = json.loads(Path(paths.precomputed_json).read_text(encoding="utf-8"))
    assert pre["schema"] == "inferlab/precomputed@1" and len(pre["quantization"]["summary"]) == 4
    assert pre["speculative"]["best"] is None and pre["stamps"]["M4"]["model"]["model"] == "ref_baseline"

    wb = Path(paths.workbench).read_text(encoding="utf-8")
    assert not EXTERNAL.search(wb) and '"logits": [3.0, 2.5' in wb


def test_failed_milestone_shows_as_failed_in_the_report(tmp_path):
    paths = _paths(tmp_path)
    write_report(full_data(**spec_tables(all_identical=False)), paths, {}, MACHINE)
    table = pd.read_parquet(paths.milestones).set_index("milestone")
    assert table.loc["M3", "status"] == FAIL
    assert "FAIL" in Path(paths.html).read_text(encoding="utf-8")


def test_external_url_pattern_catches_urls():
    assert EXTERNAL.search('<img src="https://x/y.png">') and EXTERNAL.search("<script src=//cdn/x.js>")
    assert not EXTERNAL.search('<img src="data:image/png;base64,AAAA">')


# ---------------------------------------------------------------------------------- provenance


def test_benchmarks_and_rebuilt_vs_reused(tmp_path):
    bench = tmp_path / "benchmarks/train/m.tsv"
    bench.parent.mkdir(parents=True)
    bench.write_text(
        "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"
        "5.97\t0:00:05\t554.58\t2245.02\t502.09\t527.84\t0.21\t4.06\t139.47\t8.91\n"
    )
    table = benchmark_table(tmp_path / "benchmarks")
    assert table.loc[0, "job"] == "train/m" and table.loc[0, "max_rss_mb"] == pytest.approx(554.58)
    old, new = tmp_path / "old", tmp_path / "new"
    old.write_text("x")
    new.write_text("y")
    import os

    os.utime(old, (1000.0, 1000.0))
    status = classify_outputs([str(old), str(new), str(tmp_path / "gone")], start=2000.0).set_index("path")["status"]
    assert status[str(old)] == "reused" and status[str(new)] == "rebuilt" and status[str(tmp_path / "gone")] == "absent"
    assert config_hash({"a": 1, "b": 2}) == config_hash({"b": 2, "a": 1}) != config_hash({"a": 2, "b": 2})


def test_seed_reference_numbers_sit_only_on_their_own_cell(tmp_path):
    their_cell = {"cell": "T1_p0.9", "truncation": "top_p", "temperature": 1.0, "top_p": 0.9, "min_p": 0.0}
    data = full_data()
    data.tables["sp_distribution"] = pd.DataFrame(distribution_rows(LOGITS, [*CELLS, their_cell]))
    paths = _paths(tmp_path)
    write_report(data, paths, {"config_sha256": "x", "git_commit": "abc", "git_dirty": False}, MACHINE)
    rows = [line for line in Path(paths.markdown).read_text(encoding="utf-8").splitlines()
            if line.startswith("| T") and "| top_p |" in line]
    with_seed_kept = [line for line in rows if "| 352 |" in line]
    assert [line.split("|")[1].strip() for line in with_seed_kept] == ["T1_p0.9"], rows
