"""GPTQ: the per-layer algorithm against RTN, its invariants, and the sequential model pass."""

from __future__ import annotations

import pytest
import torch

from inferlab.core.config import GPTConfig
from inferlab.core.evaluation import evaluate_against_reference
from inferlab.core.model import GPT
from inferlab.quant import gptq
from inferlab.quant import methods as quant
from tests.test_quant import GPTQ_CONFIG, train_tiny_model

DAMP, BLOCK = GPTQ_CONFIG["damp"], GPTQ_CONFIG["block_size"]  # from config/config.yaml


def correlated_inputs(k: int, n: int, seed: int = 0) -> torch.Tensor:
    """(n, K) inputs with strongly correlated features, like a layer's real activations."""
    g = torch.Generator().manual_seed(seed)
    latent = torch.randn(n, k // 4, generator=g)
    mixing = torch.randn(k // 4, k, generator=g)
    return latent @ mixing + 0.1 * torch.randn(n, k, generator=g)


def hessian_of(x: torch.Tensor) -> torch.Tensor:
    acc = gptq.HessianAccumulator(x.size(1))
    for chunk in x.split(100):
        acc.add(chunk.unsqueeze(0))  # (1, T, K) like a Linear's input
    return acc.hessian()


@pytest.mark.parametrize("bits", [4, 3])
@pytest.mark.parametrize("group", [None, 32])
def test_gptq_output_error_below_rtn(bits, group):
    k, n_out = 128, 64
    w = torch.randn(n_out, k, generator=torch.Generator().manual_seed(1))
    x = correlated_inputs(k, 2048)
    H = hessian_of(x)
    q_gptq = gptq.gptq_quantize_weight(w, H, bits, symmetric=False, group_size=group, damp=DAMP, block_size=32)
    gran = "group" if group else "channel"
    q_rtn = quant.rtn_quantize(w, bits, gran, symmetric=False, group_size=group)
    err_gptq = torch.linalg.norm(x @ (w - q_gptq.dequantize()).T)
    err_rtn = torch.linalg.norm(x @ (w - q_rtn.dequantize()).T)
    print(f"\nint{bits} group={group}: ||WX - QX|| GPTQ {err_gptq:.2f} vs RTN {err_rtn:.2f}")
    assert err_gptq < err_rtn
    assert q_gptq.codes.min() >= 0 and q_gptq.codes.max() <= 2 ** bits - 1


def test_hessian_is_2xxt_over_n():
    x = torch.randn(300, 16)
    assert torch.allclose(hessian_of(x), 2 * x.T @ x / 300, atol=1e-4)


def test_with_uncorrelated_inputs_gptq_is_rtn():
    # H diagonal => no error is propagated, every column is just rounded
    w = torch.randn(16, 64)
    H = torch.diag(torch.rand(64) + 0.5)
    q = gptq.gptq_quantize_weight(w, H, 4, symmetric=False, damp=DAMP, block_size=16)
    r = quant.rtn_quantize(w, 4, "channel", symmetric=False)
    assert torch.equal(q.codes, r.codes) and torch.allclose(q.dequantize(), r.dequantize())


def test_lazy_block_updates_equal_the_unblocked_algorithm():
    w = torch.randn(32, 96)
    H = hessian_of(correlated_inputs(96, 1000, seed=3))
    small = gptq.gptq_quantize_weight(w, H, 3, damp=DAMP, block_size=16)
    whole = gptq.gptq_quantize_weight(w, H, 3, damp=DAMP, block_size=96)
    assert (small.codes != whole.codes).float().mean() < 0.01  # fp reordering may flip a rare tie
    assert torch.allclose(small.scale, whole.scale)


def test_dead_inputs_are_zeroed_and_nothing_is_nan():
    x = correlated_inputs(64, 500)
    x[:, [5, 17]] = 0.0
    w = torch.randn(8, 64)
    q = gptq.gptq_quantize_weight(w, hessian_of(x), 4, damp=DAMP, block_size=BLOCK)
    deq = q.dequantize()
    assert torch.isfinite(deq).all()
    assert torch.all(deq[:, [5, 17]] == 0)


def test_calibration_windows_come_from_the_given_split():
    train = torch.arange(1000)
    win = gptq.calibration_windows(train, 8, 32, seed=0)
    assert win.shape == (8, 32)
    assert all(torch.equal(row, torch.arange(int(row[0]), int(row[0]) + 32)) for row in win)
    assert torch.equal(win, gptq.calibration_windows(train, 8, 32, seed=0))
    assert not torch.equal(win, gptq.calibration_windows(train, 8, 32, seed=1))


@pytest.fixture(scope="module")
def trained():
    return train_tiny_model()


def test_model_level_gptq_beats_rtn_on_a_trained_model(trained):
    model, train, val = trained
    calibration = gptq.calibration_windows(train, 16, 32, seed=0)
    g_model, g_result = quant.quantize_model(model, "int3_gptq", calibration=calibration, damp=DAMP,
                                              block_size=BLOCK)
    r_model, _ = quant.quantize_model(model, "int3_per_channel_asym")
    g = evaluate_against_reference(model, g_model, val, 32)
    r = evaluate_against_reference(model, r_model, val, 32)
    print(f"\nint3 KL: GPTQ {g['kl_mean_nats']:.5f} vs RTN {r['kl_mean_nats']:.5f}")
    assert g["kl_mean_nats"] < r["kl_mean_nats"]
    for name, linear in quant.quantized_linears(g_model):
        assert torch.equal(linear.weight, g_result[name].dequantize())
    assert torch.equal(g_model.tok_emb.weight, model.tok_emb.weight)


def test_layers_are_calibrated_on_the_quantised_earlier_layers(monkeypatch):
    """The H given to each later layer must come from inputs through already-quantised layers."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=32, d_model=64, n_layer=2, head_dim=32, max_seq_len=32)).eval()
    calibration = torch.randint(0, 32, (4, 16))
    seen = []
    real = gptq.gptq_quantize_weight

    def spy(weight, hessian, *args, **kwargs):
        seen.append(hessian.clone())
        return real(weight, hessian, *args, **kwargs)

    monkeypatch.setattr(gptq, "gptq_quantize_weight", spy)
    quantised = GPT(model.config).eval()
    quantised.load_state_dict(model.state_dict())
    gptq.gptq_quantize_model(quantised, calibration, bits=3, damp=DAMP, block_size=BLOCK)
    assert len(seen) == 8

    # Expected: H of blocks.1.mlp.up recomputed by hand on the final quantised model
    # (everything before that layer is exactly what GPTQ had quantised when it got there).
    inputs = []
    handle = quantised.blocks[1].mlp.up.register_forward_hook(lambda m, a, o: inputs.append(a[0]))
    quantised(calibration)
    handle.remove()
    x = inputs[0].reshape(-1, 64)
    assert torch.allclose(seen[6], 2 * x.T @ x / x.size(0), rtol=1e-4, atol=1e-5)
    # ... and differs from the fp32 model's H, so the sequential pass did matter
    inputs.clear()
    handle = model.blocks[1].mlp.up.register_forward_hook(lambda m, a, o: inputs.append(a[0]))
    model(calibration)
    handle.remove()
    x32 = inputs[0].reshape(-1, 64)
    assert not torch.allclose(seen[6], 2 * x32.T @ x32 / x32.size(0), rtol=1e-4, atol=1e-5)
