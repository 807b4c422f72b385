import pytest
import torch

from inferlab.core.config import GPTConfig, kv_bytes_per_token
from inferlab.core.generate import generate
from inferlab.core.model import GPT

SPEC_PARAMS = {256: 3_688_704, 128: 1_057_920, 64: 332_352}


@pytest.mark.parametrize("d_model", sorted(SPEC_PARAMS))
def test_parameter_counts_match_spec(d_model):
    assert GPT(GPTConfig(d_model=d_model)).num_params() == SPEC_PARAMS[d_model]


def test_heads_of_64_and_one_head_at_d64():
    assert GPTConfig(d_model=256).n_head == 4
    assert GPTConfig(d_model=64).n_head == 1


def test_cached_step_by_step_logits_equal_full_forward():
    config = GPTConfig(vocab_size=97, d_model=128, max_seq_len=64)
    model = GPT(config).eval()
    idx = torch.randint(0, 97, (2, 40))
    with torch.no_grad():
        full = model(idx)
        model.setup_caches(2, 40)
        prefix = model(idx[:, :7], torch.arange(7))
        steps = [model(idx[:, t:t + 1], torch.tensor([t])) for t in range(7, 40)]
    stepped = torch.cat([prefix, *steps], dim=1)
    assert (stepped - full).abs().max().item() <= 1e-4


def test_chunked_prefill_after_cache_matches_full_forward():
    model = GPT(GPTConfig(vocab_size=50, d_model=64, max_seq_len=32)).eval()
    idx = torch.randint(0, 50, (1, 20))
    with torch.no_grad():
        full = model(idx)
        model.setup_caches(1, 20)
        model(idx[:, :8], torch.arange(8))
        chunk = model(idx[:, 8:13], torch.arange(8, 13))  # several new tokens at once
    assert torch.allclose(chunk, full[:, 8:13], atol=1e-4)


def test_cached_and_uncached_greedy_decode_agree():
    model = GPT(GPTConfig(vocab_size=61, d_model=64, max_seq_len=64)).eval()
    prompt = torch.randint(0, 61, (1, 6))
    cached = generate(model, prompt, 30, use_cache=True, keep_logits=True)
    uncached = generate(model, prompt, 30, use_cache=False, keep_logits=True)
    assert torch.equal(cached.tokens, uncached.tokens)
    for a, b in zip(cached.step_logits, uncached.step_logits, strict=True):
        assert (a - b).abs().max().item() <= 1e-4


def test_kv_bytes_formula():
    assert kv_bytes_per_token(GPTConfig(d_model=256)) == 2 * 4 * 256 * 4


def test_positions_past_context_are_rejected():
    model = GPT(GPTConfig(vocab_size=10, d_model=64, max_seq_len=8))
    with pytest.raises(ValueError, match="context"):
        model(torch.zeros(1, 9, dtype=torch.long))


def test_uncached_forward_must_start_at_zero():
    model = GPT(GPTConfig(vocab_size=10, d_model=64, max_seq_len=8))
    with pytest.raises(ValueError, match="setup_caches"):
        model(torch.zeros(1, 1, dtype=torch.long), torch.tensor([3]))
