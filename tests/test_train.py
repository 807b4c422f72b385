import json

import pytest
import torch

from inferlab.core.checkpoint import load_checkpoint, save_checkpoint
from inferlab.core.checkpoint_meta import CheckpointError
from inferlab.core.config import GPTConfig
from inferlab.core.evaluation import evaluate_loss, windows
from inferlab.corpus.text import prepare
from inferlab.training.loop import TrainConfig, choose_precision, cpu_flags, lr_at, train_model
from inferlab.training.noise_floor import floor_value, noise_floor_table
from tests.conftest import synthetic_corpus

TINY_MODEL = GPTConfig(vocab_size=80, d_model=64, n_layer=2, max_seq_len=64)
TINY_TRAIN = TrainConfig(steps=30, batch_size=8, seq_len=32, lr=3e-3, warmup_steps=3, eval_every=10,
                         eval_windows=4, precision="fp32")


@pytest.fixture(scope="module")
def token_ids():
    prepared = prepare(synthetic_corpus(n_chapters=10).encode(), 0.1, 80)
    encode = prepared.vocab.encode
    return torch.tensor(encode(prepared.split.train)), torch.tensor(encode(prepared.split.val))


def test_training_lowers_validation_loss(token_ids):
    train_ids, val_ids = token_ids
    model, curve, summary = train_model(TINY_MODEL, TINY_TRAIN, train_ids, val_ids)
    assert summary["val_loss"] < curve["train_loss"].iloc[0] - 0.5
    assert summary["tokens_seen"] == 30 * 8 * 32
    assert list(curve["step"]) == list(range(1, 31))
    assert curve["val_loss_sample"].notna().sum() == 3


def test_same_seed_is_bit_identical_and_other_seed_differs(token_ids):
    train_ids, val_ids = token_ids
    short = TrainConfig(**{**TINY_TRAIN.to_dict(), "steps": 5})
    _, _, a = train_model(TINY_MODEL, short, train_ids, val_ids)
    _, _, b = train_model(TINY_MODEL, short, train_ids, val_ids)
    _, _, c = train_model(TINY_MODEL, TrainConfig(**{**short.to_dict(), "seed": 7}), train_ids, val_ids)
    assert a["val_loss"] == b["val_loss"]
    assert a["val_loss"] != c["val_loss"]


def test_learning_rate_schedule_warms_up_then_decays_to_floor():
    cfg = TrainConfig(steps=100, warmup_steps=10, lr=1.0, min_lr_ratio=0.1)
    assert lr_at(0, cfg) == pytest.approx(0.1)
    assert lr_at(9, cfg) == pytest.approx(1.0)
    assert lr_at(99, cfg) == pytest.approx(0.1, abs=1e-3)
    assert all(lr_at(s, cfg) >= lr_at(s + 1, cfg) for s in range(10, 99))


def test_validation_windows_cover_every_target_once():
    ids = torch.arange(103)
    targets = torch.cat([y.flatten() for _, y in windows(ids, 10, 4)])
    assert torch.equal(targets, ids[1:])


def test_full_split_loss_is_uniform_for_a_zero_model():
    model = torch.nn.Module()
    model.dummy = torch.nn.Parameter(torch.zeros(1))
    model.forward = lambda x: torch.zeros(*x.shape, 11)
    assert evaluate_loss(model, torch.randint(0, 11, (57,)), 8) == pytest.approx(torch.log(torch.tensor(11.0)).item())


def _saved(tmp_path, token_ids):
    from inferlab.core.model import GPT

    model = GPT(TINY_MODEL)
    meta = save_checkpoint(model, {"name": "tiny", "val_loss": 1.0}, tmp_path / "ckpt")
    return model, meta


def test_checkpoint_round_trip(tmp_path, token_ids):
    model, meta = _saved(tmp_path, token_ids)
    loaded, loaded_meta = load_checkpoint(tmp_path / "ckpt")
    assert loaded_meta["weights_sha256"] == meta["weights_sha256"] and meta["params"] == model.num_params()
    x = torch.randint(0, 80, (1, 12))
    assert torch.equal(loaded(x), model.eval()(x))


def test_corrupt_weights_are_refused_with_the_file_named(tmp_path, token_ids):
    _saved(tmp_path, token_ids)
    weights = tmp_path / "ckpt" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="model.safetensors.*sha256"):
        load_checkpoint(tmp_path / "ckpt")


def test_shape_mismatch_is_refused_with_the_file_named(tmp_path, token_ids):
    _saved(tmp_path, token_ids)
    meta_path = tmp_path / "ckpt" / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["model_config"]["d_model"] = 128
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="do not fit"):
        load_checkpoint(tmp_path / "ckpt")


def test_checkpoint_without_meta_counts_as_incomplete(tmp_path, token_ids):
    _saved(tmp_path, token_ids)
    (tmp_path / "ckpt" / "meta.json").unlink()
    with pytest.raises(CheckpointError, match="incomplete"):
        load_checkpoint(tmp_path / "ckpt")


def test_noise_floor_is_three_sigma_and_config_chooses_the_floor():
    runs = [{"name": f"r{i}", "seed": i, "val_loss": v} for i, v in enumerate([4.60, 4.62, 4.61, 4.63, 4.64])]
    measured = noise_floor_table(runs, 3, "measured", 0.02)
    std = torch.tensor([r["val_loss"] for r in runs], dtype=torch.float64).std().item()
    assert floor_value(measured) == pytest.approx(3 * std)
    assert measured["range"].iloc[0] == pytest.approx(0.04)
    assert floor_value(noise_floor_table(runs, 3, "fixed", 0.02)) == 0.02
    with pytest.raises(ValueError):
        noise_floor_table(runs[:1], 3, "measured", 0.02)


@pytest.mark.parametrize("flags, expected", [
    ({"avx2", "avx512f", "avx512_bf16"}, "bf16"),          # AMD Zen 4 / Cooper Lake
    ({"avx2", "avx512f", "amx_tile", "amx_bf16"}, "bf16"),  # Sapphire Rapids
    ({"avx2", "avx512f", "avx512bw"}, "fp32"),              # AVX-512 without native bf16: emulated
    (set(), "fp32"),
])
def test_auto_precision_follows_native_bf16_flags(flags, expected):
    precision, reason = choose_precision("auto", flags)
    assert precision == expected
    assert reason.startswith("auto:")


def test_auto_precision_reads_the_cpu_probe(tmp_path, monkeypatch):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu avx512f avx512_bf16\n\nprocessor\t: 1\n")
    assert cpu_flags(str(cpuinfo)) == {"fpu", "avx512f", "avx512_bf16"}
    monkeypatch.setattr("inferlab.training.loop.cpu_flags", lambda: {"avx512f"})
    assert choose_precision("auto") == ("fp32", choose_precision("auto", {"avx512f"})[1])
    assert choose_precision("bf16", {"avx512f"})[0] == "bf16"  # an explicit request is obeyed
    assert cpu_flags(str(tmp_path / "missing")) is None
    with pytest.raises(ValueError, match="precision must be"):
        choose_precision("fp16", set())
