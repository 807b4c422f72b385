"""Sampling: truncation edge cases, entropy/kept behaviour, the float64 reference against the
tensor version, the JSON round trip, and seeded draws against the truncated distribution."""

import json
import math

import numpy as np
import pytest
import torch

from inferlab.core.config import GPTConfig
from inferlab.core.generate import generate
from inferlab.core.model import GPT
from inferlab.core.sampler import (
    distribution_rows,
    distribution_stats,
    draw,
    logits_export,
    logits_to_probs,
    make_generators,
    make_sampler,
    sample_seed,
    truncated_distribution,
)


@pytest.fixture(scope="module")
def logits() -> list[float]:
    gen = torch.Generator().manual_seed(7)
    return (torch.randn(300, generator=gen) * 2.5).tolist()


def kept_set(probs: torch.Tensor) -> set[int]:
    return set(torch.nonzero(probs > 0).flatten().tolist())


def test_top_p_towards_zero_keeps_exactly_the_top_token(logits):
    order, q = truncated_distribution(logits, 1.0, top_p=1e-9)
    assert order == [int(np.argmax(logits))] and q == [1.0]
    probs = logits_to_probs(torch.tensor(logits, dtype=torch.float64), 1.0, top_p=1e-9)
    assert kept_set(probs) == {int(np.argmax(logits))}
    assert distribution_stats(logits, 1.0, top_p=1e-9).entropy_nats == 0.0
    # even top_p = 0 (no mass at all is "enough") keeps the top token rather than nothing
    assert truncated_distribution(logits, 1.0, top_p=0.0)[0] == [int(np.argmax(logits))]
    probs = logits_to_probs(torch.tensor(logits, dtype=torch.float64), 1.0, top_p=0.0)
    assert kept_set(probs) == {int(np.argmax(logits))}


def test_top_p_one_keeps_every_token(logits):
    assert distribution_stats(logits, 0.5, top_p=1.0).kept == len(logits)
    probs = logits_to_probs(torch.tensor(logits, dtype=torch.float64), 0.5, top_p=1.0)
    assert kept_set(probs) == set(range(len(logits)))


def test_ties_are_cut_by_token_id_in_both_implementations():
    # four tied tokens of exactly 1/4 each (the two -40s vanish in double): p = 0.5 needs two
    tied = [-40.0, 5.0, 5.0, 5.0, 5.0, -40.0]
    order, _ = truncated_distribution(tied, 1.0, top_p=0.5)
    assert order == [1, 2]  # lowest ids first among the tied tokens
    probs = logits_to_probs(torch.tensor(tied, dtype=torch.float64), 1.0, top_p=0.5)
    assert kept_set(probs) == {1, 2}
    # min-p keeps every tied maximum
    assert truncated_distribution(tied, 1.0, min_p=0.99)[0] == [1, 2, 3, 4]


@pytest.mark.parametrize("top_p", [0.1, 0.5, 0.8, 0.9, 0.95, 0.999])
def test_top_p_kept_set_is_the_minimal_top_prefix(logits, top_p):
    x = np.asarray(logits) - max(logits)
    p = np.exp(x) / np.exp(x).sum()
    order, _ = truncated_distribution(logits, 1.0, top_p=top_p)
    ranked = list(np.argsort(-p, kind="stable"))
    assert order == ranked[: len(order)]  # the most likely tokens, in order
    assert p[order].sum() >= top_p - 1e-12  # enough mass
    assert p[order[:-1]].sum() < top_p  # dropping the last kept token falls short: minimal


@pytest.mark.parametrize("temperature,top_p,min_p", [(0.5, 0.9, 0.0), (1.0, 0.8, 0.0), (1.3, 0.95, 0.0),
                                                     (1.0, 1.0, 0.05), (1.3, 1.0, 0.1), (0.7, 1.0, 0.0)])
def test_reference_matches_the_tensor_version(logits, temperature, top_p, min_p):
    order, q = truncated_distribution(logits, temperature, top_p, min_p)
    probs = logits_to_probs(torch.tensor(logits, dtype=torch.float64), temperature, top_p, min_p)
    assert kept_set(probs) == set(order)
    assert torch.allclose(probs[order], torch.tensor(q, dtype=torch.float64), rtol=1e-12, atol=0)


def test_entropy_is_bounded_by_log_kept(logits):
    for temperature in (0.5, 1.0, 1.3):
        for top_p in (0.5, 0.9, 1.0):
            stats = distribution_stats(logits, temperature, top_p)
            assert 0.0 <= stats.entropy_nats <= math.log(stats.kept) + 1e-12
            assert stats.entropy_bits == pytest.approx(stats.entropy_nats / math.log(2), rel=1e-15)


def test_entropy_and_kept_grow_with_temperature_and_top_p(logits):
    temps, ps = [0.5, 0.7, 1.0, 1.3, 2.0], [0.3, 0.5, 0.8, 0.9, 0.95, 1.0]
    grid = {(t, p): distribution_stats(logits, t, p) for t in temps for p in ps}
    for p in ps:
        kept = [grid[t, p].kept for t in temps]
        entropy = [grid[t, p].entropy_nats for t in temps]
        assert kept == sorted(kept) and entropy == sorted(entropy) and entropy[0] < entropy[-1]
    for t in temps:
        kept = [grid[t, p].kept for p in ps]
        entropy = [grid[t, p].entropy_nats for p in ps]
        assert kept == sorted(kept) and entropy == sorted(entropy) and kept[0] < kept[-1]
    # min-p: a larger ratio keeps fewer tokens, a higher temperature more
    assert distribution_stats(logits, 1.0, min_p=0.02).kept > distribution_stats(logits, 1.0, min_p=0.1).kept
    assert distribution_stats(logits, 1.3, min_p=0.05).kept > distribution_stats(logits, 1.0, min_p=0.05).kept


def test_top_k_then_top_p_uses_the_renormalised_top_k_distribution():
    # top-k=2 leaves 0.5/0.5 (renormalised); top-p 0.5 then keeps only the first of the pair
    logits = torch.log(torch.tensor([0.2, 0.2, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1], dtype=torch.float64))
    probs = logits_to_probs(logits, 1.0, top_p=0.5, top_k=2)
    assert kept_set(probs) == {0}


def test_export_round_trips_through_json_exactly():
    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(50, generator=gen, dtype=torch.float32) * 3
    vocab = ["<unk>", *[chr(0x4E00 + i) for i in range(49)]]
    text = json.dumps(logits_export("孔明曰：「", "m", "abc", vocab, logits, 0), ensure_ascii=False)
    parsed = json.loads(text)["logits"]
    assert parsed == [float(v) for v in logits.double()]  # float32 values, exactly, as doubles
    cells = [{"cell": "T1.0_p0.9", "truncation": "top_p", "temperature": 1.0, "top_p": 0.9, "min_p": 0.0}]
    assert distribution_rows(parsed, cells) == distribution_rows(logits.double().tolist(), cells)
    with pytest.raises(ValueError):
        logits_export("x", "m", "abc", vocab[:-1], logits, 0)


def test_seeded_draws_match_the_truncated_distribution():
    logits = [2.0, 1.7, 1.5, 1.0, 0.8, 0.5, 0.0, -0.5, -1.0, -3.0, -4.0, -6.0]
    temperature, top_p = 1.2, 0.9
    order, q = truncated_distribution(logits, temperature, top_p)
    rows, steps = 200, 100
    sampler = make_sampler(temperature, top_p, 0.0, make_generators(11, "prompt", rows))
    batch = torch.tensor([logits], dtype=torch.float32).expand(rows, -1)
    counts = np.bincount(torch.cat([sampler(batch) for _ in range(steps)]).numpy(), minlength=len(logits))
    n = rows * steps
    assert counts[[i for i in range(len(logits)) if i not in order]].sum() == 0  # truncated: never drawn
    expected = n * np.asarray(q)
    chi2 = float(((counts[order] - expected) ** 2 / expected).sum())
    df = len(order) - 1
    # Wilson-Hilferty approximation of the chi-square quantile at z = 3.29 (p ~ 0.0005)
    critical = df * (1 - 2 / (9 * df) + 3.29 * math.sqrt(2 / (9 * df))) ** 3
    assert chi2 < critical, (chi2, critical, counts[order], expected)


def test_draw_is_deterministic_and_rows_are_independent_streams():
    probs = torch.softmax(torch.randn(4, 30, generator=torch.Generator().manual_seed(0)), -1)
    first = [draw(probs, make_generators(5, "p", 4)) for _ in range(1)][0]
    again = draw(probs, make_generators(5, "p", 4))
    assert torch.equal(first, again)
    # row 2 drawn alone with its own generator gives the same token as inside the batch
    alone = draw(probs[2:3], make_generators(5, "p", 4)[2:3])
    assert alone.item() == first[2].item()
    assert len({sample_seed(5, "p", s) for s in range(8)}) == 8
    assert sample_seed(5, "p", 0) != sample_seed(5, "q", 0) != sample_seed(6, "p", 0)
    with pytest.raises(ValueError):
        draw(probs, make_generators(5, "p", 3))


def test_seeded_generation_repeats_and_differs_by_seed():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=40, d_model=32, n_layer=1, head_dim=16, max_seq_len=64)).eval()
    prompt = torch.tensor([[1, 2, 3]]).expand(3, -1)

    def run(seed):
        sampler = make_sampler(1.0, 0.95, 0.0, make_generators(seed, "abc", 3))
        return generate(model, prompt, 20, sampler=sampler).tokens

    assert torch.equal(run(1), run(1))
    assert not torch.equal(run(1), run(2))
    assert not torch.equal(run(1)[0], run(1)[1])  # the samples of one prompt differ
