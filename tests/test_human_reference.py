"""The human reference row of Experiment 2 (validation continuations, scored like the cells), the
NLL and Zipf metrics, and the human_match default rule on hand-made per-sample tables."""

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from inferlab.core.config import GPTConfig
from inferlab.core.model import GPT
from inferlab.corpus.text import UNK, Vocabulary
from inferlab.sampling import repetition
from inferlab.sampling.aggregate import summarise
from inferlab.sampling.human_match import DISTANCE_METRICS, cell_distances, choose_human_match
from inferlab.sampling.human_reference import AFTER_PROMPT, RANDOM_WINDOW, pick_continuations, score_human
from inferlab.sampling.repetition import (
    continuation_nll,
    corpus_ngram_index,
    generate_cell,
    sample_metrics,
    zipf_coefficient,
)
from inferlab.sampling.summary_table import METRICS, wide_summary

# ---------------------------------------------------------------------------------------------
# Metrics.
# ---------------------------------------------------------------------------------------------


def test_zipf_coefficient_is_the_negative_log_log_slope():
    # counts 12, 6, 4, 3 = 12 / rank: an exact power law with exponent 1
    ids = [7] * 12 + [3] * 6 + [9] * 4 + [1] * 3
    assert zipf_coefficient(ids) == pytest.approx(1.0)
    # counts 16 / rank^2 = 16, 4: exponent 2; order of the ids does not matter
    assert zipf_coefficient([5, 2] * 4 + [5] * 12) == pytest.approx(2.0)
    assert zipf_coefficient(list(range(30))) == pytest.approx(0.0)  # all distinct: flat
    assert np.isnan(zipf_coefficient([4] * 10))  # one distinct token: no slope


def _tiny_model(vocab_size: int = 17, seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    return GPT(GPTConfig(vocab_size=vocab_size, d_model=32, n_layer=2, head_dim=16, max_seq_len=64)).eval()


def test_nll_per_token_equals_cross_entropy_of_a_full_forward():
    model = _tiny_model()
    text = torch.randint(0, 17, (3, 20), generator=torch.Generator().manual_seed(1))
    # the whole text after its first token: the plain next-token cross-entropy of one forward
    with torch.no_grad():
        logits = model(text)
    direct = torch.stack([F.cross_entropy(logits[b, :-1], text[b, 1:]) for b in range(3)])
    assert torch.allclose(continuation_nll(model, text[:, :1], text[:, 1:]), direct, atol=1e-5)
    # a longer context is conditioned on but never scored: -log p of the last 12 tokens only
    log_p = torch.log_softmax(logits, dim=-1)
    manual = -log_p[:, 7:-1].gather(-1, text[:, 8:, None]).squeeze(-1).mean(dim=1)
    assert torch.allclose(continuation_nll(model, text[:, :8], text[:, 8:]), manual, atol=1e-5)
    assert not torch.allclose(manual, direct, atol=1e-3)
    with pytest.raises(ValueError, match="exceeds the context"):
        continuation_nll(model, text[:, :8], torch.zeros(3, 60, dtype=torch.long))


# ---------------------------------------------------------------------------------------------
# The human continuations and the one scorer.
# ---------------------------------------------------------------------------------------------

VOCAB = Vocabulary([UNK, *"孔明曰：「」，。話說曹操玄德關公大怒之"])


def _val_ids(repeats: int = 6) -> np.ndarray:
    text = "".join("話說之玄德大怒，孔明曰：「關公」。" + "玄德之" * k for k in range(repeats))
    return np.asarray(VOCAB.encode(text), dtype=np.int64)


def test_continuations_follow_the_prompt_where_it_occurs_else_random_windows():
    val = _val_ids()
    picked = pick_continuations(val, VOCAB, ["孔明曰：「", "曹操"], samples=4, new_tokens=5, seed=3)
    assert [c.prompt for c in picked] == ["孔明曰：「"] * 4 + ["曹操"] * 4
    prompt_ids = VOCAB.encode("孔明曰：「")
    for c in picked[:4]:
        assert c.source == AFTER_PROMPT and list(val[c.offset - 5: c.offset]) == prompt_ids
    offsets = [c.offset for c in picked[:4]]
    assert offsets == sorted(offsets) and len(set(offsets)) == 4  # 6 occurrences, 4 drawn, in text order
    windows = picked[4:]  # 曹操 never occurs in this text
    assert all(c.source == RANDOM_WINDOW for c in windows)
    assert all(2 <= c.offset <= len(val) - 5 for c in windows) and len({c.offset for c in windows}) == 4
    assert pick_continuations(val, VOCAB, ["孔明曰：「", "曹操"], 4, 5, seed=3) == picked
    assert pick_continuations(val, VOCAB, ["孔明曰：「", "曹操"], 4, 5, seed=4) != picked
    with pytest.raises(ValueError, match="too short"):
        pick_continuations(val[:8], VOCAB, ["曹操"], 4, 5, seed=0)


def test_human_rows_and_cell_rows_go_through_the_same_scorer(monkeypatch):
    model = _tiny_model(len(VOCAB))
    val = _val_ids()
    index = corpus_ngram_index(val, len(VOCAB))
    calls = []
    original = repetition.score_continuations

    def spy(model, context, continuations, corpus_index, base):
        calls.append(tuple(continuations.shape))
        return original(model, context, continuations, corpus_index, base)

    monkeypatch.setattr(repetition, "score_continuations", spy)
    cell = {"cell": "T1.0_p0.9", "truncation": "top_p", "temperature": 1.0, "top_p": 0.9, "min_p": 0.0}
    cells = generate_cell(model, VOCAB, cell, ["孔明曰：「", "曹操"], 3, 6, 7, index)
    assert calls == [(3, 6), (3, 6)]
    human = score_human(model, VOCAB, val, ["孔明曰：「", "曹操"], 3, 6, 7, index)
    assert calls == [(3, 6)] * 4  # one call per prompt for the human row as well
    assert set(METRICS) <= set(cells.columns) and set(METRICS) <= set(human.columns)
    assert list(human.columns[: len(cells.columns)]) == list(cells.columns)  # same row shape
    assert (human["cell"] == "human").all() and (human["truncation"] == "reference").all()
    # by construction too: every human metric is the scorer's value on that very text and context
    for row in human.itertuples():
        ids, ctx = VOCAB.encode(row.text), VOCAB.encode(row.context)
        expected = sample_metrics(ids, index, len(VOCAB))
        for metric, value in expected.items():
            assert getattr(row, metric) == pytest.approx(value, nan_ok=True)
        nll = continuation_nll(model, torch.tensor([ctx]), torch.tensor([ids]))
        assert row.nll_per_token == pytest.approx(float(nll[0]), abs=1e-5)


def test_greedy_and_sampled_cells_carry_nll_and_zipf():
    model = _tiny_model(len(VOCAB))
    index = corpus_ngram_index(_val_ids(), len(VOCAB))
    greedy = {"cell": "greedy", "truncation": "none", "temperature": 0.0, "top_p": 1.0, "min_p": 0.0}
    rows = generate_cell(model, VOCAB, greedy, ["孔明曰：「"], 2, 10, 0, index)
    prompt = torch.tensor([VOCAB.encode("孔明曰：「")])
    own = continuation_nll(model, prompt, torch.tensor([VOCAB.encode(rows["text"].iloc[0])]))
    assert rows["nll_per_token"].iloc[0] == pytest.approx(float(own[0]), abs=1e-5)
    own_zipf = zipf_coefficient(VOCAB.encode(rows["text"].iloc[0]))
    assert rows["zipf_coefficient"].iloc[0] == pytest.approx(own_zipf, nan_ok=True)


# ---------------------------------------------------------------------------------------------
# The human_match rule on hand-made per-sample metrics.
# ---------------------------------------------------------------------------------------------

HUMAN_VALUES = {"seq_rep_4": 0.02, "distinct_1": 0.6, "distinct_2": 0.9, "in_corpus_4gram_share": 0.30,
                "nll_per_token": 3.0, "zipf_coefficient": 0.40}


def _cell_rows(cell, truncation, temperature, shift, noise=0.0, n=8):
    """n samples whose metrics are the human values + shift (per metric scale) +- noise."""
    top_p, min_p = (0.9, 0.0) if truncation == "top_p" else ((1.0, 0.05) if truncation == "min_p" else (1.0, 0.0))
    if cell == "human":
        top_p = min_p = temperature = float("nan")
    rows = []
    for sample in range(n):
        wiggle = noise * (1 if sample % 2 else -1)
        rows.append({"cell": cell, "truncation": truncation, "temperature": temperature, "top_p": top_p,
                     "min_p": min_p, "prompt": f"p{sample % 2}", "sample": sample // 2,
                     **{m: v * (1 + shift + wiggle) for m, v in HUMAN_VALUES.items()}, "text": "x"})
    return rows


def _rule(cells, human_noise=0.0):
    human = _cell_rows("human", "reference", 0.0, 0.0, human_noise)
    samples = pd.DataFrame(sum((_cell_rows(*c) for c in cells), human))
    distances = cell_distances(samples, 300, 0)
    dist = pd.DataFrame([{"cell": c[0], "kept": 10 + i, "entropy_nats": 1.0, "entropy_bits": 1.44}
                         for i, c in enumerate(cells) if c[0] != "greedy"])
    return choose_human_match(distances, wide_summary(summarise(samples, 300, 0)), dist), distances


def test_the_cell_equal_to_the_human_row_is_chosen():
    cells = [("greedy", "none", 0.0, 0.0),             # equal to human as well, but never eligible
             ("T0.7_p0.9", "top_p", 0.7, 0.5),
             ("T1.0_p0.9", "top_p", 1.0, 0.0),           # equal to human: distance 0
             ("T1.3_p0.9", "top_p", 1.3, -0.6),
             ("T1.0_minp0.05", "min_p", 1.0, 0.3)]
    record, distances = _rule([cells[0], cells[1], cells[3], cells[2], cells[4]])
    assert record["kind"] == "human_match" and record["cell"] == "T1.0_p0.9"
    assert record["distance"] == pytest.approx(0.0) and record["rule_satisfied"]
    assert record["greedy_cell"] == "greedy" and record["greedy_distance"] == pytest.approx(0.0)
    assert record["runner_up_cell"] == "T1.0_minp0.05"
    assert record["min_p_decision"] == "keep top-p" and record["best_min_p_cell"] == "T1.0_minp0.05"
    assert record["kept"] == 13  # from the distribution table, the chosen cell's row
    assert record["human_nll_per_token"] == pytest.approx(3.0)
    assert set(distances["cell"]) == {c[0] for c in cells} and not distances.set_index("cell").loc["greedy", "eligible"]


def test_distance_is_the_spread_scaled_sum_of_metric_gaps():
    _, distances = _rule([("a", "top_p", 1.0, 0.1), ("b", "top_p", 0.7, 0.3)])
    table = distances.set_index("cell")
    # each metric's cell means are h(1.1) and h(1.3): std = 0.1 h; gaps 0.1 h and 0.3 h -> 1 and 3 per metric
    assert table.loc["a", "distance"] == pytest.approx(len(DISTANCE_METRICS))
    assert table.loc["b", "distance"] == pytest.approx(3 * len(DISTANCE_METRICS))
    assert table.loc["a", "term_nll_per_token"] == pytest.approx(1.0)
    assert table.loc["a", "spread_nll_per_token"] == pytest.approx(0.1 * 3.0)
    # no sample noise: the bootstrap cannot move the distance
    assert np.allclose(table["distance_ci_low"], table["distance"])
    assert np.allclose(table["distance_ci_high"], table["distance"])


def test_ties_go_to_top_p_over_min_p_and_then_to_t_near_one():
    # min-p is a little closer, but within noise of the top-p cell: top-p wins the tie
    record, _ = _rule([("T1.0_minp0.05", "min_p", 1.0, 0.10, 0.3), ("T1.0_p0.9", "top_p", 1.0, 0.12, 0.3),
                       ("T0.7_p0.9", "top_p", 0.7, 0.9)], human_noise=0.05)
    assert record["closest_cell"] == "T1.0_minp0.05" and record["cell"] == "T1.0_p0.9"
    assert record["min_p_decision"] == "keep top-p" and record["n_tied"] >= 2
    # two tied top-p cells: the one with T closer to 1 wins although the other is closer
    record, _ = _rule([("T0.7_p0.9", "top_p", 0.7, 0.10, 0.3), ("T1.3_p0.9", "top_p", 1.3, 0.13, 0.3),
                       ("T0.5_p0.9", "top_p", 0.5, 0.9)], human_noise=0.05)
    assert record["closest_cell"] == "T0.7_p0.9" and record["cell"] == "T0.7_p0.9"  # |0.7-1| < |1.3-1|
    record, _ = _rule([("T0.5_p0.9", "top_p", 0.5, 0.10, 0.3), ("T1.3_p0.9", "top_p", 1.3, 0.13, 0.3),
                       ("T0.7_p0.9", "top_p", 0.7, 0.9)], human_noise=0.05)
    assert record["closest_cell"] == "T0.5_p0.9" and record["cell"] == "T1.3_p0.9"
    # T 0.9 and 1.1 are equally far from 1 (not in floats: 0.0999.. vs 0.1000..1): the smaller distance decides
    for near, far in (("T1.1_p0.9", "T0.9_p0.9"), ("T0.9_p0.9", "T1.1_p0.9")):
        record, _ = _rule([(near, "top_p", float(near[1:4]), 0.10, 0.3), (far, "top_p", float(far[1:4]), 0.13, 0.3),
                           ("T0.5_p0.9", "top_p", 0.5, 0.9)], human_noise=0.05)
        assert record["n_tied"] >= 2 and record["cell"] == near


def test_min_p_replaces_top_p_only_when_closer_beyond_noise():
    record, _ = _rule([("T1.0_minp0.05", "min_p", 1.0, 0.0), ("T1.0_p0.9", "top_p", 1.0, 0.5),
                       ("T0.7_p0.9", "top_p", 0.7, 0.9)])
    assert record["cell"] == "T1.0_minp0.05" and record["min_p_decision"] == "switch to min-p"
    assert record["best_top_p_cell"] == "T1.0_p0.9" and record["runner_up_cell"] == "T1.0_p0.9"
    assert record["distance_ci_high"] < record["best_top_p_distance_ci_low"]
    assert "T1.0_minp0.05" in record["min_p_reason"] and "T1.0_p0.9" in record["min_p_reason"]


def test_a_missing_human_row_is_a_clear_error():
    samples = pd.DataFrame(_cell_rows("T1.0_p0.9", "top_p", 1.0, 0.0))
    with pytest.raises(ValueError, match="human"):
        cell_distances(samples, 10, 0)
