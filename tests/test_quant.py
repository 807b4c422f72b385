"""Quantisation schemes: grids, storage arithmetic, the scheme table, quality on tiny models, kernels."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from inferlab.core.config import GPTConfig
from inferlab.core.engine import EagerEngine
from inferlab.core.evaluation import evaluate_against_reference
from inferlab.core.generate import generate
from inferlab.core.model import GPT
from inferlab.core.packages import UNAVAILABLE
from inferlab.quant import bench as quant_bench
from inferlab.quant import choice as quant_choice
from inferlab.quant import kernels as quant_kernels
from inferlab.quant import methods as quant
from inferlab.quant.schemes import get_scheme
from inferlab.training.loop import TrainConfig, train_model
from inferlab.training.noise_floor import within_noise

REPO = Path(__file__).resolve().parent.parent
# GPTQ's settings have one source, config/config.yaml; the code takes no defaults of its own.
GPTQ_CONFIG = yaml.safe_load((REPO / "config/config.yaml").read_text(encoding="utf-8"))["quantization"]["gptq"]


def markov_ids(n: int, vocab: int = 48, seed: int = 0) -> torch.Tensor:
    """A sparse first-order Markov chain: learnable in a few dozen steps, so quantisation has an effect."""
    g = torch.Generator().manual_seed(seed)
    successors = torch.randint(0, vocab, (vocab, 3), generator=g)
    picks = torch.multinomial(torch.tensor([0.6, 0.3, 0.1]), n, replacement=True, generator=g)
    ids = [0]
    for c in picks.tolist():
        ids.append(int(successors[ids[-1], c]))
    return torch.tensor(ids)


def train_tiny_model() -> tuple[GPT, torch.Tensor, torch.Tensor]:
    """(model, train ids, val ids): a 2-layer d=64 GPT trained for 60 steps on a Markov chain (~2 s)."""
    torch.manual_seed(0)
    torch.set_num_threads(1)
    ids = markov_ids(23_000)
    train, val = ids[:20_000], ids[20_000:]
    cfg = GPTConfig(vocab_size=48, d_model=64, n_layer=2, head_dim=32, max_seq_len=64)
    tc = TrainConfig(steps=60, batch_size=16, seq_len=32, lr=3e-3, warmup_steps=5, eval_every=1000,
                     eval_windows=2, precision="fp32", seed=0)
    model, _, summary = train_model(cfg, tc, train, val)
    assert summary["val_loss"] < 1.5  # it learned the chain (uniform would be ln 48 = 3.87)
    return model.eval(), train, val


@pytest.fixture(scope="module")
def trained():
    return train_tiny_model()


def tiny_random_model(n_layer: int = 2) -> GPT:
    return GPT(GPTConfig(vocab_size=32, d_model=64, n_layer=n_layer, head_dim=32, max_seq_len=64)).eval()


# ------------------------------------------------------------------------------ scheme table

def test_every_config_scheme_is_in_the_table():
    for path in ("config/config.yaml", "config/quick.yaml"):
        names = yaml.safe_load((REPO / path).read_text(encoding="utf-8"))["quantization"]["schemes"]
        missing = [n for n in names if n not in quant.SCHEMES]
        assert not missing, f"{path}: {missing}"
    full = yaml.safe_load((REPO / "config/config.yaml").read_text(encoding="utf-8"))["quantization"]["schemes"]
    assert len(full) == 22 and set(full) == set(quant.SCHEMES)


def test_unknown_scheme_names_the_known_ones():
    with pytest.raises(ValueError, match="int4_gptq"):
        quant.get_scheme("int5_magic")


def test_table_parameters_follow_the_names():
    s = quant.SCHEMES["int4_g32_sym"]
    assert (s.method, s.bits, s.granularity, s.group_size, s.symmetric) == ("rtn", 4, "group", 32, True)
    g = quant.SCHEMES["int3_gptq"]
    assert (g.method, g.bits, g.granularity, g.symmetric) == ("gptq", 3, "channel", False)
    assert quant.SCHEMES["bf16"].bits == 16
    # kernels: int8 needs one scale per row, int4 takes groups, int3 has none
    assert quant.SCHEMES["int8_per_channel_asym"].kernel == "int8_weight_only"
    assert quant.SCHEMES["int8_g64_sym"].kernel is None
    assert quant.SCHEMES["int4_g32_sym"].kernel == "int4_groupwise"
    assert quant.SCHEMES["int4_gptq"].kernel == "int4_groupwise"
    assert all(quant.SCHEMES[f"int3_{x}"].kernel is None for x in ("per_tensor_sym", "g32_sym", "gptq"))


def test_simplicity_order_for_ties():
    order = ["int4_per_tensor_sym", "int4_per_channel_sym", "int4_per_channel_asym", "int4_g128_sym", "int4_gptq"]
    ranks = [quant.SCHEMES[n].simplicity for n in order]
    assert ranks == sorted(ranks) and len(set(ranks)) == len(ranks)


# ------------------------------------------------------------------------------ grids

@pytest.mark.parametrize("bits", [8, 4, 3])
@pytest.mark.parametrize("granularity,group", [("tensor", None), ("channel", None), ("group", 32), ("group", 64)])
@pytest.mark.parametrize("symmetric", [True, False])
def test_round_trip_error_at_most_half_a_step(bits, granularity, group, symmetric):
    w = torch.randn(24, 128) * torch.linspace(0.1, 3.0, 24)[:, None]
    qw = quant.rtn_quantize(w, bits, granularity, symmetric, group)
    assert qw.codes.min() >= 0 and qw.codes.max() <= 2 ** bits - 1
    step = qw.scale.repeat_interleave(qw.group_size, dim=1)  # (N, K) the scale each element used
    err = (qw.dequantize() - w).abs()
    assert torch.all(err <= step / 2 + 1e-6 * w.abs()), (err / step).max()  # + float rounding
    # a finer grid or more bits must actually be used: no element is off by more than it should be,
    # and the error is not trivially zero either
    assert err.max() > 0


def test_per_tensor_uses_one_scale_and_groups_use_many():
    w = torch.randn(8, 64)
    assert quant.rtn_quantize(w, 4, "tensor", True).scale.unique().numel() == 1
    assert quant.rtn_quantize(w, 4, "channel", True).scale.shape == (8, 1)
    assert quant.rtn_quantize(w, 4, "group", True, 16).scale.shape == (8, 4)


@pytest.mark.parametrize("bits", [8, 4, 3])
def test_asymmetric_never_worse_than_symmetric_on_skewed_weights(bits):
    w = torch.rand(32, 128) ** 2 * 2.0 - 0.1  # mostly positive, long right tail
    sym = quant.rtn_quantize(w, bits, "channel", True)
    asym = quant.rtn_quantize(w, bits, "channel", False)
    mse_sym = (sym.dequantize() - w).pow(2).mean()
    mse_asym = (asym.dequantize() - w).pow(2).mean()
    assert mse_asym < mse_sym


def test_more_bits_and_finer_groups_reduce_error():
    w = torch.randn(64, 256)

    def mse(bits, gran, group=None):
        return (quant.rtn_quantize(w, bits, gran, True, group).dequantize() - w).pow(2).mean()

    assert mse(8, "channel") < mse(4, "channel") < mse(3, "channel")
    assert mse(4, "group", 32) < mse(4, "channel") < mse(4, "tensor")


def test_zero_row_stays_zero():
    w = torch.randn(4, 64)
    w[1] = 0
    for sym in (True, False):
        assert torch.all(quant.rtn_quantize(w, 3, "channel", sym).dequantize()[1] == 0)


# ------------------------------------------------------------------------------ effective bits

def test_effective_bits_arithmetic():
    s = quant.SCHEMES
    n, k = 256, 1024
    assert quant.effective_bits_per_weight(s["int4_g32_sym"], [(n, k)]) == pytest.approx(4 + 16 / 32)
    assert quant.effective_bits_per_weight(s["int4_g128_sym"], [(n, k)]) == pytest.approx(4 + 16 / 128)
    assert quant.effective_bits_per_weight(s["int8_per_channel_sym"], [(n, k)]) == pytest.approx(8 + 16 / k)
    # asymmetric: a 16-bit scale plus a b-bit zero point per row
    assert quant.effective_bits_per_weight(s["int3_per_channel_asym"], [(n, k)]) == pytest.approx(3 + 19 / k)
    assert quant.effective_bits_per_weight(s["int4_gptq"], [(n, k)]) == pytest.approx(4 + 20 / k)
    assert quant.effective_bits_per_weight(s["int8_per_tensor_sym"], [(n, k)]) == pytest.approx(8 + 16 / (n * k))
    assert quant.effective_bits_per_weight(s["bf16"], [(n, k)]) == 16
    # several layers: total bits over total weights, not a mean of per-layer figures
    layers = [(768, 256), (256, 1024)]
    expected = (768 * 256 * 4 + 768 * 16 + 256 * 1024 * 4 + 256 * 16) / (768 * 256 + 256 * 1024)
    assert quant.effective_bits_per_weight(s["int4_per_channel_sym"], layers) == pytest.approx(expected)


# ------------------------------------------------------------------------------ whole models

def test_scope_is_the_block_linears_and_embedding_stays_fp32():
    model = tiny_random_model()
    quantised, result = quant.quantize_model(model, "int3_per_tensor_sym")
    names = [n for n, _ in quant.quantized_linears(model)]
    assert names == [f"blocks.{i}.{x}" for i in range(2) for x in ("attn.qkv", "attn.proj", "mlp.up", "mlp.down")]
    assert set(result) == set(names)
    assert torch.equal(quantised.tok_emb.weight, model.tok_emb.weight)
    for name, linear in quant.quantized_linears(quantised):
        assert torch.equal(linear.weight, result[name].dequantize())
        assert not torch.equal(linear.weight, model.get_submodule(name).weight)


def test_quantize_model_does_not_modify_its_input():
    model = tiny_random_model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    quant.quantize_model(model, "int3_per_channel_asym")
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_bf16_scheme_changes_loss_by_less_than_1e_3(trained):
    model, _, val = trained
    quantised, _ = quant.quantize_model(model, "bf16")
    r = evaluate_against_reference(model, quantised, val, 32)
    assert abs(r["delta_loss"]) < 1e-3
    assert r["top1_agreement"] > 0.99
    # and it really did round: weights are bf16-representable and differ from fp32
    w = quantised.blocks[0].mlp.up.weight
    assert torch.equal(w, w.bfloat16().float()) and not torch.equal(w, model.blocks[0].mlp.up.weight)


@pytest.mark.parametrize("layout", ["per_channel_sym", "per_tensor_sym"])
def test_loss_orders_int8_int4_int3_on_a_trained_model(trained, layout):
    model, _, val = trained
    loss = {b: evaluate_against_reference(model, quant.quantize_model(model, f"int{b}_{layout}")[0],
                                                val, 32)["loss"] for b in (8, 4, 3)}
    assert loss[8] <= loss[4] <= loss[3], loss


def test_reference_against_itself_is_exact(trained):
    model, _, val = trained
    r = evaluate_against_reference(model, model, val, 32, batch_size=7)
    assert r["delta_loss"] == 0 and r["kl_mean_nats"] == pytest.approx(0, abs=1e-7)
    assert r["top1_agreement"] == 1.0 and r["eval_tokens"] == len(val) - 1


def test_kl_grows_as_bits_shrink(trained):
    model, _, val = trained
    kl = [evaluate_against_reference(model, quant.quantize_model(model, f"int{b}_per_tensor_sym")[0],
                                           val, 32)["kl_mean_nats"] for b in (8, 4, 3)]
    assert 0 < kl[0] < kl[1] < kl[2]


def test_choice_key_prefers_fewer_bits_then_simpler_method():
    rows = [
        {"scheme": "int4_gptq", "bits": 4, "effective_bits_per_weight": 4.02},
        {"scheme": "int4_g32_sym", "bits": 4, "effective_bits_per_weight": 4.5},
        {"scheme": "int4_per_channel_sym", "bits": 4, "effective_bits_per_weight": 4.01},
        {"scheme": "int8_per_tensor_sym", "bits": 8, "effective_bits_per_weight": 8.0},
        {"scheme": "int4_g128_sym", "bits": 4, "effective_bits_per_weight": 4.125},
    ]
    ordered = [r["scheme"] for r in sorted(rows, key=quant_choice.choice_key)]
    assert ordered == ["int4_per_channel_sym", "int4_g128_sym", "int4_g32_sym", "int4_gptq", "int8_per_tensor_sym"]


# ------------------------------------------------------------------------------ kernels

KERNEL_SCHEMES = [n for n, s in quant.SCHEMES.items() if s.kernel is not None]


@pytest.mark.parametrize("name", KERNEL_SCHEMES)
def test_kernel_wrappers_match_the_dequantised_matmul(name):
    scheme = quant.SCHEMES[name]
    if not quant_kernels.KERNELS[scheme.kernel].available("cpu"):
        pytest.skip(f"{scheme.kernel} not available in this torch build")
    torch.manual_seed(1)
    # d=128: K = 128 and 512, so the int4 kernel sees both its group sizes and its per-channel path
    model = GPT(GPTConfig(vocab_size=32, d_model=128, n_layer=1, head_dim=64, max_seq_len=32)).eval()
    options = ({"calibration": torch.randint(0, 32, (4, 16)), "damp": GPTQ_CONFIG["damp"],
                "block_size": GPTQ_CONFIG["block_size"]} if scheme.method == "gptq" else {})
    quantised, result = quant.quantize_model(model, name, **options)
    # fp32 activations: the kernel must reproduce (q - z) * s exactly up to fp32 rounding
    exact = quant_kernels.kernel_model(quantised, result, name, compute_dtype=torch.float32)
    assert quant_kernels.kernel_max_rel_error(quantised, exact) < 1e-5
    # bf16 activations (the fast path): bf16 rounding only
    fast = quant_kernels.kernel_model(quantised, result, name)
    assert quant_kernels.kernel_max_rel_error(quantised, fast) < 2e-2
    ids = torch.randint(0, 32, (2, 12))
    ref_logits, fast_logits = quantised(ids), fast(ids)
    assert (fast_logits - ref_logits).abs().max() < 0.05 * ref_logits.abs().max()


def test_kernel_model_keeps_the_input_model_and_rejects_kernelless_schemes():
    model = tiny_random_model()
    quantised, result = quant.quantize_model(model, "int8_per_channel_sym")
    fast = quant_kernels.kernel_model(quantised, result, "int8_per_channel_sym")
    assert isinstance(fast.blocks[0].attn.qkv, quant_kernels.Int8WeightOnlyLinear)
    assert isinstance(quantised.blocks[0].attn.qkv, torch.nn.Linear)
    q3, r3 = quant.quantize_model(model, "int3_g32_sym")
    with pytest.raises(ValueError, match="no low-bit kernel"):
        quant_kernels.kernel_model(q3, r3, "int3_g32_sym")


def test_decode_speed_measurement_reports_medians_and_agreement():
    model = tiny_random_model()
    quantised, result = quant.quantize_model(model, "int8_per_channel_sym")
    fast = quant_kernels.kernel_model(quantised, result, "int8_per_channel_sym")
    out = quant_bench.measure_decode_speed(model, fast, torch.tensor([[1, 2, 3]]), new_tokens=5, reps=3)
    assert len(out["ms_per_token_reps"]) == 3 and out["ms_per_token"] > 0 and out["fp32_ms_per_token"] > 0
    assert out["speedup_vs_fp32"] == pytest.approx(out["fp32_ms_per_token"] / out["ms_per_token"])
    assert 0.0 <= out["greedy_agreement_vs_fp32"] <= 1.0
    print(f"\ntiny int8 decode: {out['ms_per_token']:.2f} ms/token vs fp32 {out['fp32_ms_per_token']:.2f}")


def test_decode_speed_counts_the_eager_calls_of_its_timed_decodes():
    """eager_calls: the forwards of the timed decodes (fp32's and the kernel model's, every rep) that ran
    eagerly; on the eager engine each decode's fill of its prompt and its steps, never the warm-ups."""
    model = tiny_random_model()
    fast = quant_kernels.kernel_model(*quant.quantize_model(model, "int8_per_channel_sym"), "int8_per_channel_sym")
    engine = EagerEngine()
    out = quant_bench.measure_decode_speed(model, fast, torch.tensor([[1, 2, 3]]), new_tokens=5, reps=3, engine=engine)
    assert out["eager_calls"] == 3 * 2 * 6  # each decode: its prompt but the last token (one forward), 5 steps
    assert engine.eager_calls == out["eager_calls"] + 2 * 6  # the warm-up decodes ran too, uncounted


def test_a_timed_decode_is_its_steps_and_gives_generates_tokens():
    """The decode Experiment 4 times caches the prompt but its last token untimed, then makes each new token
    in one step: the same greedy tokens as generate, whose prompt is one forward."""
    model = tiny_random_model()
    prompt = torch.tensor([[1, 2, 3, 4]])
    _, tokens = quant_bench.time_decode(model, prompt, 6)
    assert torch.equal(tokens, generate(model, prompt, 6).tokens)


def _timed_row(eager_calls_compiled: int) -> dict:
    """A scheme's row timed on eager and on compiled."""
    return {**_row("int8_per_channel_sym", 0.001), "speed_status": "measured: int8 kernel", "speed_reps": 3,
            "ms_per_token": 2.0, "fp32_ms_per_token": 3.0, "speedup_vs_fp32": 1.5, "eager_calls": 30,
            "ms_per_token_compiled": 1.0, "fp32_ms_per_token_compiled": 2.0, "speedup_vs_fp32_compiled": 2.0,
            "eager_calls_compiled": eager_calls_compiled}


def test_the_measured_sentence_says_a_compiled_engines_eager_calls():
    timed = _timed_row(eager_calls_compiled=2)
    measured = quant_choice.choose_scheme(_summary([timed])).iloc[0]["measured"]
    assert "1.00 vs fp32 2.00 ms/token on compiled (2.00x); 2 eager calls in the decodes on compiled)" in measured
    assert "3.00 ms/token (1.50x)" in measured and measured.count("eager calls") == 1  # eager's are all eager
    clean = quant_choice.choose_scheme(_summary([{**timed, "eager_calls_compiled": 0}])).iloc[0]["measured"]
    assert "; 0 eager calls in the decodes on compiled)" in clean  # counted, and none
    old = {key: value for key, value in timed.items() if not key.startswith("eager_calls")}
    assert "eager calls" not in quant_choice.choose_scheme(_summary([old])).iloc[0]["measured"]


@pytest.mark.parametrize(("untimed", "ending"), [(0, "compiled)"), (1, "the other one is quality only"),
                                                  (2, "the other 2 are quality only")])
def test_the_measured_sentence_names_the_untimed_schemes_in_good_grammar(untimed, ending):
    timed = _timed_row(eager_calls_compiled=0)
    others = [_row(name, 0.01) for name in ("int3_gptq", "int4_per_channel_sym")[:untimed]]
    measured = quant_choice.choose_scheme(_summary([timed, *others])).iloc[0]["measured"]
    assert measured.endswith(ending), measured


@pytest.mark.parametrize("scheme", ["int8_per_channel_sym", "int4_g32_sym"])
def test_a_scheme_job_times_the_packages_its_compile_jobs_built(scheme, tmp_path):
    """As the workflow runs Experiment 4 on the compiled engine: its compile jobs build fp32's and the
    kernel model's packages (build_speed_graphs), and the scheme job only loads them (its engine has no
    build directory, so a missing package would be refused). The kernels' packages decode the same
    greedy tokens as eager."""
    from inferlab.core.engine import CompiledEngine, make_engine
    from inferlab.core.packages import PackageError

    if not quant_kernels.KERNELS[get_scheme(scheme).kernel].available("cpu"):
        pytest.skip(f"no {scheme} kernel on this CPU")
    model = tiny_random_model(n_layer=1)  # each layer's kernels compile for seconds; a second adds nothing
    prompt, ids = torch.tensor([[1, 2, 3]]), torch.randint(0, 32, (200,))
    dirs = (tmp_path / "fp32", tmp_path / scheme)
    for name, directory in zip((None, scheme), dirs, strict=True):
        builder = CompiledEngine(build_dir=directory, inductor_options=quant_bench.KERNEL_INDUCTOR_OPTIONS)
        quant_bench.build_speed_graphs(model, name, ids, 16, prompt, 4, None, builder)
        assert builder.built
    row = quant_bench.run_scheme(model, scheme, ids, ids, 16, prompt, new_tokens=4, reps=1,
                                 engines=("eager", "compiled"), graph_dirs=dirs)
    assert row["engine_used_compiled"] == "compiled" and row["ms_per_token_compiled"] > 0
    assert row["engine_fallback_reason_compiled"] == ""
    # every forward of the compiled decodes ran from those packages; on eager, each decode's fill and 4 steps
    assert (row["eager_calls_compiled"], row["eager_calls"]) == (0, 2 * 5)
    packages = [path.name for directory in dirs for path in directory.glob("*.pt2")]
    assert packages and all("_T1_" in name for name in packages), f"more than the step's packages: {packages}"
    # a compile rule that could not compile: the row ran eager and says why, as every timing table does
    unavailable = tmp_path / "unavailable"
    unavailable.mkdir()
    (unavailable / UNAVAILABLE).write_text("no working C++ toolchain: InductorError: InvalidCxxCompiler\n")
    eager = quant_bench.run_scheme(model, scheme, ids, ids, 16, prompt, new_tokens=4, reps=1, engines=("compiled",),
                                   graph_dirs=(unavailable,))
    assert eager["engine_used_compiled"] == "eager"
    assert eager["engine_fallback_reason_compiled"].startswith("no working C++ toolchain")
    # without the kernel model's packages: fp32's, under the same labels, are refused, naming the weights
    with pytest.raises(PackageError, match=r"refused: .*weights [0-9a-f]{12} there, [0-9a-f]{12} here"):
        quant_bench.run_scheme(model, scheme, ids, ids, 16, prompt, new_tokens=4, reps=1, engines=("compiled",),
                               graph_dirs=dirs[:1])
    fast = quant_kernels.kernel_model(*quant.quantize_model(model, scheme), scheme)
    loader = make_engine("compiled", inductor_options=quant_bench.KERNEL_INDUCTOR_OPTIONS, graph_dirs=dirs)
    assert torch.equal(generate(fast, prompt, 4, engine=loader).tokens, generate(fast, prompt, 4).tokens)


# ------------------------------------------------------------------------------ jobs and the choice

def test_run_scheme_row_has_quality_storage_and_speed_columns(trained):
    model, train, val = trained
    prompt = torch.tensor([[1, 2, 3]])
    rtn = quant_bench.run_scheme(model, "int4_per_channel_sym", val, train, 32, prompt=prompt,
                                 new_tokens=4, reps=2)
    assert rtn["quantized_layers"] == 8 and rtn["quantized_params"] == 2 * 12 * 64 * 64
    assert rtn["fp32_params"] == model.num_params() - rtn["quantized_params"]
    assert rtn["delta_loss"] == pytest.approx(rtn["loss"] - rtn["fp32_loss"])
    rows_per_block = 3 * 64 + 64 + 4 * 64 + 64  # one fp16 scale per output row: qkv, proj, up, down
    assert rtn["effective_bits_per_weight"] == pytest.approx(4 + 16 * rows_per_block / (12 * 64 * 64))
    if quant_kernels.KERNELS["int4_groupwise"].available("cpu"):
        assert rtn["speed_status"].startswith("measured") and rtn["ms_per_token"] > 0
        assert rtn["kernel_max_rel_err"] < 2e-2
    gptq_row = quant_bench.run_scheme(model, "int3_gptq", val, train, 32, prompt=prompt, new_tokens=4,
                                      reps=1, gptq={**GPTQ_CONFIG, "calibration_windows": 4},
                                      engines=("eager", "compiled"))
    assert gptq_row["calibration_windows"] == 4
    assert gptq_row["speed_status"].startswith("quality only") and gptq_row["speed_reps"] == 0
    assert gptq_row["ms_per_token"] != gptq_row["ms_per_token"]  # NaN: nothing was timed
    assert gptq_row["ms_per_token_compiled"] != gptq_row["ms_per_token_compiled"]  # on no engine


def _row(scheme, delta):
    s = quant.SCHEMES[scheme]
    return {"scheme": scheme, "method": s.method, "bits": s.bits,
            "effective_bits_per_weight": quant.effective_bits_per_weight(s, [(256, 256)]),
            "delta_loss": delta, "loss": 5.0 + delta, "fp32_loss": 5.0, "kl_mean_nats": abs(delta) / 2,
            "top1_agreement": 0.99,
            "eval_tokens": 1000, "speed_reps": 0,
            "speed_status": "quality only: test", "ms_per_token": float("nan"),
            "fp32_ms_per_token": float("nan"), "speedup_vs_fp32": float("nan")}


def _summary(rows: list[dict], floor: float = 0.02):
    """The scheme jobs' rows through quant_summary's table, which judges each against the floor."""
    import pandas as pd

    return quant_choice.summary_table([pd.DataFrame([row]) for row in rows], [row["scheme"] for row in rows], floor)


def test_summary_judges_every_scheme_against_the_floor_it_is_given():
    rows = [_row("int8_per_channel_sym", -0.001), _row("int4_per_channel_sym", 0.012), _row("int3_gptq", 0.02)]
    assert _summary(rows, 0.02)["within_noise"].tolist() == [True, True, False]  # at the floor is not below it
    wider = _summary(rows, 0.025)
    assert wider["within_noise"].tolist() == [True, True, True] and set(wider["noise_floor"]) == {0.025}
    assert wider["within_noise"].tolist() == [within_noise(r["delta_loss"], 0.025) for r in rows]


def test_choice_takes_fewest_bits_below_floor_and_explains_it():
    summary = _summary([_row("int8_per_channel_sym", 0.001), _row("int4_per_tensor_sym", 0.031),
                        _row("int4_per_channel_sym", 0.012), _row("int4_gptq", 0.008),
                        _row("int3_gptq", 0.025), _row("int3_g32_sym", 0.040), _row("bf16", 0.0)])
    choice = quant_choice.choose_scheme(summary).iloc[0]
    assert choice["scheme"] == "int4_per_channel_sym"  # int4_gptq is better but less simple: tie at 4 bits
    assert choice["n_below_floor"] == 4
    assert "+0.0120" in choice["reason"] and "0.0200" in choice["reason"]
    assert "int3_gptq +0.0250" in choice["reason"] and "int4_gptq" in choice["reason"]
    assert "quality only" in choice["measured"]


def test_choice_when_nothing_is_below_the_floor():
    summary = _summary([_row("int4_per_tensor_sym", 0.05), _row("int3_gptq", 0.03)])
    choice = quant_choice.choose_scheme(summary).iloc[0]
    assert choice["scheme"] == "none" and choice["n_below_floor"] == 0
    assert "int3_gptq at +0.0300" in choice["reason"]


def test_gptq_settings_come_only_from_config(trained):
    model, train, val = trained
    with pytest.raises(ValueError, match=r"int3_gptq: GPTQ settings \['damp'\] missing"):
        quant_bench.run_scheme(model, "int3_gptq", val, train, 32, prompt=torch.tensor([[1]]),
                               new_tokens=1, reps=1, gptq={k: v for k, v in GPTQ_CONFIG.items() if k != "damp"})


def test_scheme_table_is_torch_free_and_quant_gptq_import_one_way():
    import subprocess
    import sys

    code = ("import sys, inferlab.quant.schemes as s; assert 'torch' not in sys.modules; "
            "print(sorted({x.method for x in s.SCHEMES.values()}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "['bf16', 'gptq', 'rtn']"
    gptq_src = (REPO / "inferlab/quant/gptq.py").read_text(encoding="utf-8")
    assert "inferlab.quant.methods" not in gptq_src and "import methods" not in gptq_src
