"""Roofline arithmetic on a hand-made anchor, the shipped anchor file, and the probes."""

import json
from pathlib import Path

import pytest

from inferlab.core.config import GPTConfig
from inferlab.kvcache import probes, roofline
from inferlab.kvcache.flops import generation_flops

HAND = {
    "name": "hand", "architecture": {"n_layer": 2, "d_model": 8, "n_head": 4, "n_kv_head": 2, "head_dim": 2,
                                     "ffn_hidden": 16, "ffn_kind": "swiglu", "vocab_size": 10,
                                     "tied_embeddings": False},
    "weights": {"bytes_per_param": 2}, "kv_cache": {"bytes_per_element": 2},
    "hardware": {"name": "toy", "memory_bandwidth_bytes_per_s": 1000.0, "peak_flops_per_s": 1e6},
}


def test_hand_made_anchor_arithmetic():
    # per layer: Wq 8·8 + Wk,Wv 2·8·4 + Wo 8·8 = 192; SwiGLU 3·8·16 = 384 -> 576 × 2 layers = 1152;
    # head 10·8 = 80 -> matmul 1232; + embedding 80 + norms (2·2·8 + 8 = 40) -> 1352
    assert roofline.anchor_param_counts(HAND["architecture"]) == {"matmul": 1232, "total": 1352}
    assert roofline.anchor_kv_bytes_per_token(HAND) == 2 * 2 * 2 * 2 * 2  # K,V × layers × kv heads × hd × bytes
    table = roofline.anchor_roofline(HAND, [0, 10])
    row0, row10 = table.iloc[0], table.iloc[1]
    assert row0["weight_bytes"] == 2704
    assert row0["bytes_per_token"] == 2704 + 32 * 1
    assert row10["bytes_per_token"] == 2704 + 32 * 11
    # FLOPs: 2 per matmul weight + 4·layers·heads·hd per visible key
    assert row10["flops_per_token"] == 2 * 1232 + 4 * 2 * 4 * 2 * 11
    assert row0["memory_bound_ms_per_token"] == pytest.approx(2736 / 1000 * 1e3)
    assert row0["lower_bound_ms_per_token"] == row0["memory_bound_ms_per_token"]
    assert row0["upper_bound_tokens_per_s"] == pytest.approx(1000 / 2736)
    assert row0["limited_by"] == "memory"


def test_bound_picks_the_slower_roof():
    compute_bound = roofline.bound_columns(bytes_per_token=10, flops_per_token=1e6, bandwidth_bytes_per_s=1e3,
                                           flops_per_s=1e6)
    assert compute_bound["limited_by"] == "compute"
    assert compute_bound["lower_bound_ms_per_token"] == pytest.approx(1000.0)


def test_anchor_validation_names_the_missing_field():
    broken = {**HAND, "architecture": {k: v for k, v in HAND["architecture"].items() if k != "n_kv_head"}}
    with pytest.raises(ValueError, match="n_kv_head"):
        roofline.anchor_roofline(broken, [0])
    with pytest.raises(ValueError, match="stated"):
        roofline.anchor_roofline({**HAND, "weights": {"bytes_per_param": 2, "stated_weight_bytes": 5000}}, [0])


def test_shipped_anchor_matches_the_seed():
    anchor = json.loads((Path(__file__).parent.parent / "config" / "anchor-model.json").read_text())
    row = roofline.anchor_roofline(anchor, [0]).iloc[0]
    assert row["weight_bytes"] == pytest.approx(55.6e9, rel=0.01)
    assert row["kv_bytes_per_token"] == 262_144  # 2 × 64 layers × 8 kv heads × 128 × 2 bytes
    assert row["upper_bound_tokens_per_s"] == pytest.approx(3.35e12 / 55.6e9, rel=0.01)
    assert row["limited_by"] == "memory"


def test_our_roofline_arithmetic():
    config = GPTConfig()
    table = roofline.our_roofline(config, 3_688_704, 4, prompt_len=5, length=256, bandwidth_bytes_per_s=10e9,
                                  flops_per_s=100e9, measured_ms_per_token=5.0, model_name="ref",
                                  machine="m", device="cpu")
    row = table.iloc[0]
    mean_context = sum(5 + j for j in range(1, 256)) / 256
    assert row["bytes_per_token"] == pytest.approx(3_688_704 * 4 + 8192 * mean_context)
    assert row["flops_per_token"] == pytest.approx(generation_flops(config, 5, 256, True) / 256)
    assert row["memory_bound_ms_per_token"] == pytest.approx(row["bytes_per_token"] / 10e9 * 1e3)
    assert row["measured_over_bound"] == pytest.approx(5.0 / row["lower_bound_ms_per_token"])


def test_probes_report_positive_rates():
    table = probes.run_probes("cpu", [1 << 20], matmul_size=64, repeats=2)
    assert set(table["probe"]) == {"bandwidth_read_sum", "bandwidth_copy", "matmul_fp32"}
    assert (table["value"] > 0).all()
    bandwidth, flops = roofline.best_rates(table)
    assert bandwidth == pytest.approx(table.loc[table["unit"] == "GB/s", "value"].max() * 1e9)
    assert flops > 0
