"""Repetition metrics on hand-made sequences, the bootstrap, one cell end to end on a tiny random
model, and the default-choice rule on hand-made tables."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from inferlab.core.config import GPTConfig
from inferlab.core.model import GPT
from inferlab.corpus.text import UNK, Vocabulary
from inferlab.sampling.aggregate import bootstrap_ci, example_texts, summarise
from inferlab.sampling.repetition import (
    corpus_ngram_index,
    distinct_n,
    generate_cell,
    in_corpus_share,
    ngram_keys,
    sample_metrics,
    seq_rep_n,
)
from inferlab.sampling.summary_table import METRICS
from inferlab.sampling.threshold_rule import choose_default


def test_metrics_on_a_periodic_sequence():
    ids = [1, 2, 3, 4, 1, 2, 3, 4]
    # 4-grams 1234 2341 3412 4123 1234: 5 in all, 4 unique
    assert seq_rep_n(ids, 4) == pytest.approx(1 - 4 / 5)
    assert distinct_n(ids, 1) == pytest.approx(4 / 8)
    assert distinct_n(ids, 2) == pytest.approx(4 / 7)  # 12 23 34 41 12 23 34


def test_metrics_on_constant_and_all_distinct_sequences():
    assert seq_rep_n([5] * 10, 4) == pytest.approx(1 - 1 / 7)
    assert distinct_n([5] * 10, 1) == pytest.approx(1 / 10)
    assert seq_rep_n(list(range(20)), 4) == 0.0
    assert distinct_n(list(range(20)), 2) == 1.0
    assert np.isnan(seq_rep_n([1, 2, 3], 4))


def test_ngram_keys_are_injective_and_guarded():
    keys = ngram_keys([0, 2111, 5, 2111, 0], 4, base=2112)
    assert list(keys) == [((0 * 2112 + 2111) * 2112 + 5) * 2112 + 2111, ((2111 * 2112 + 5) * 2112 + 2111) * 2112]
    with pytest.raises(ValueError):
        ngram_keys([1, 2, 3, 4], 4, base=2 ** 16)


def test_in_corpus_share_counts_generated_4grams_found_in_training():
    train = np.array([1, 2, 3, 4, 5, 6, 7], dtype=np.uint16)
    index = corpus_ngram_index(train, base=10)
    assert len(index) == 4
    # 1234 yes, 2349 3493 4934 9345 no, 3456 yes -> 2 of 6
    assert in_corpus_share([1, 2, 3, 4, 9, 3, 4, 5, 6], index, base=10) == pytest.approx(2 / 6)
    # multiplicity counts: a repeated corpus 4-gram counts every time
    assert in_corpus_share([1, 2, 3, 4, 1, 2, 3, 4], index, base=10) == pytest.approx(2 / 5)
    assert in_corpus_share([4, 5, 6, 7], index, base=10) == 1.0
    assert in_corpus_share([9, 9, 9, 9], index, base=10) == 0.0
    metrics = sample_metrics([1, 2, 3, 4, 5], index, base=10)
    # the NLL needs the model: score_continuations adds it
    assert set(metrics) == set(METRICS) - {"nll_per_token"} and metrics["in_corpus_4gram_share"] == 1.0


def test_bootstrap_ci_contains_the_mean_and_is_seeded():
    values = np.random.default_rng(0).exponential(size=32)
    mean, low, high = bootstrap_ci(values, 2000, seed=1)
    assert mean == pytest.approx(values.mean())
    assert low < mean < high
    assert bootstrap_ci(values, 2000, seed=1) == (mean, low, high)
    assert bootstrap_ci(values, 2000, seed=2) != (mean, low, high)
    assert bootstrap_ci([0.3] * 8, 100, seed=0) == pytest.approx((0.3, 0.3, 0.3))


def _tiny_vocab_and_model():
    vocab = Vocabulary([UNK, *"孔明曰：「」，。話說曹操玄德關公大怒之"])
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=len(vocab), d_model=32, n_layer=1, head_dim=16, max_seq_len=64)).eval()
    return vocab, model


def test_generate_cell_rows_determinism_and_unk_count():
    vocab, model = _tiny_vocab_and_model()
    train = np.array(vocab.encode("孔明曰：「話說曹操，玄德關公大怒之。"), dtype=np.int64)
    index = corpus_ngram_index(train, len(vocab))
    cell = {"cell": "T1.0_p0.9", "truncation": "top_p", "temperature": 1.0, "top_p": 0.9, "min_p": 0.0}
    prompts = ["孔明曰：「", "劉備曰"]  # 劉 and 備 are outside the vocabulary
    steps = []
    rows = generate_cell(model, vocab, cell, prompts, 3, 12, 7, index, on_step=lambda: steps.append(1))
    assert len(rows) == 6 and len(steps) == 2 * 12
    assert list(rows["prompt_unk_chars"]) == [0, 0, 0, 2, 2, 2]
    assert (rows["new_tokens"] == 12).all() and rows["text"].str.len().eq(12).all()
    again = generate_cell(model, vocab, cell, prompts, 3, 12, 7, index)
    assert list(rows["text"]) == list(again["text"])
    other = generate_cell(model, vocab, cell, prompts, 3, 12, 8, index)
    assert list(rows["text"]) != list(other["text"])
    greedy = generate_cell(model, vocab, {**cell, "cell": "greedy", "truncation": "none", "temperature": 0.0},
                           prompts, 3, 12, 7, index)
    assert greedy.groupby("prompt")["text"].nunique().eq(1).all()
    assert (greedy["seed"] == -1).all()


def _samples(cells: dict[str, tuple[str, list[float], list[float]]]) -> pd.DataFrame:
    """cells: id -> (truncation, seq_rep_4 per sample, in-corpus share per sample)."""
    rows = []
    for cell, (truncation, reps, shares) in cells.items():
        for sample, (rep, share) in enumerate(zip(reps, shares, strict=True)):
            rows.append({"cell": cell, "truncation": truncation, "temperature": 0.0 if cell == "greedy" else 1.0,
                         "top_p": 1.0, "min_p": 0.05 if truncation == "min_p" else 0.0, "prompt": f"p{sample % 2}",
                         "sample": sample // 2, "seq_rep_4": rep, "distinct_1": 0.5, "distinct_2": 0.7,
                         "in_corpus_4gram_share": share, "nll_per_token": 2.0, "zipf_coefficient": 0.5,
                         "text": f"{cell}-{sample}"})
    return pd.DataFrame(rows)


def _distribution(cells) -> pd.DataFrame:
    return pd.DataFrame([{"cell": c, "kept": 100 + i, "entropy_nats": 3.0 + i, "entropy_bits": (3.0 + i) / np.log(2)}
                         for i, c in enumerate(cells) if c != "greedy"])


def _choose(cells, drop=0.10):
    samples = _samples(cells)
    return choose_default(summarise(samples, 200, 0), _distribution(cells), drop)


def test_default_is_lowest_repetition_within_the_share_floor():
    cells = {
        "greedy": ("none", [0.5] * 4, [0.60] * 4),
        "hot": ("top_p", [0.00] * 4, [0.10] * 4),      # lowest repetition, but nonsense: excluded
        "warm": ("top_p", [0.05] * 4, [0.52] * 4),     # within 0.10 of greedy: chosen
        "cool": ("top_p", [0.20] * 4, [0.58] * 4),
        "minp": ("min_p", [0.10] * 4, [0.55] * 4),     # worse repetition than warm: keep top-p
    }
    record = _choose(cells)
    assert record["cell"] == "warm" and record["rule_satisfied"]
    assert record["seq_rep_4"] == pytest.approx(0.05) and record["in_corpus_4gram_share"] == pytest.approx(0.52)
    assert record["greedy_in_corpus_4gram_share"] == pytest.approx(0.60)
    assert record["in_corpus_floor"] == pytest.approx(0.50)
    assert record["kept"] == 102 and record["entropy_nats"] == pytest.approx(5.0)  # from the distribution table
    assert record["eligible_cells"] == 3 and record["sampling_cells"] == 4
    assert record["best_min_p_cell"] == "minp" and record["min_p_decision"] == "keep top-p"
    assert "0.1" in record["rule"]


def test_repetition_within_the_lowest_cells_ci_is_a_tie_won_by_the_higher_share():
    cells = {
        "greedy": ("none", [0.5] * 4, [0.60] * 4),
        "noisy_low": ("top_p", [0.0, 0.04, 0.0, 0.04], [0.52] * 4),  # lowest mean, CI reaches 0.04
        "close": ("top_p", [0.03] * 4, [0.57] * 4),                  # inside that CI, higher share: wins
        "clearly_worse": ("top_p", [0.20] * 4, [0.59] * 4),          # outside the CI: not tied
    }
    assert _choose(cells)["cell"] == "close"
    cells["close"] = ("top_p", [0.05] * 4, [0.57] * 4)               # now outside the CI
    assert _choose(cells)["cell"] == "noisy_low"


def test_min_p_switch_needs_lower_repetition_equal_share_and_a_gap_beyond_noise():
    base = {"greedy": ("none", [0.5] * 4, [0.60] * 4), "warm": ("top_p", [0.20, 0.22, 0.18, 0.20], [0.55] * 4)}
    dominates = _choose({**base, "minp": ("min_p", [0.05, 0.06, 0.04, 0.05], [0.56] * 4)})
    assert dominates["cell"] == "minp" and dominates["min_p_decision"] == "switch to min-p"
    assert dominates["best_top_p_cell"] == "warm" and dominates["best_top_p_seq_rep_4"] == pytest.approx(0.20)
    lower_share = _choose({**base, "minp": ("min_p", [0.05, 0.06, 0.04, 0.05], [0.54] * 4)})
    assert lower_share["cell"] == "warm" and lower_share["min_p_decision"] == "keep top-p"
    within_noise = _choose({**base, "minp": ("min_p", [0.0, 0.38, 0.0, 0.38], [0.56] * 4)})
    assert within_noise["best_min_p_seq_rep_4"] < within_noise["best_top_p_seq_rep_4"]
    assert within_noise["cell"] == "warm"


def test_greedy_is_never_chosen_and_an_unmet_floor_is_flagged():
    cells = {"greedy": ("none", [0.0] * 4, [0.90] * 4),
             "a": ("top_p", [0.1] * 4, [0.30] * 4), "b": ("top_p", [0.3] * 4, [0.40] * 4)}
    record = _choose(cells)
    assert record["cell"] == "b" and not record["rule_satisfied"]  # highest share when none qualifies
    assert record["best_min_p_cell"] is None and record["min_p_decision"] == "keep top-p"
    with pytest.raises(ValueError):
        _choose({"a": ("top_p", [0.1] * 4, [0.3] * 4)})


def test_summary_and_examples_shapes():
    samples = _samples({"greedy": ("none", [0.5] * 4, [0.6] * 4), "warm": ("top_p", [0.1, 0.2, 0.3, 0.4], [0.5] * 4)})
    summary = summarise(samples, 100, 0)
    assert len(summary) == 2 * len(METRICS)
    row = summary[(summary.cell == "warm") & (summary.metric == "seq_rep_4")].iloc[0]
    assert row["mean"] == pytest.approx(0.25) and row["ci_low"] <= 0.25 <= row["ci_high"] and row["n_samples"] == 4
    examples = example_texts(samples, 3)
    assert list(examples.groupby("cell", sort=False).size()) == [3, 3]
    assert list(examples[examples.cell == "warm"]["text"]) == ["warm-0", "warm-1", "warm-2"]


def test_old_rule_ignores_the_human_reference_row():
    cells = {
        "greedy": ("none", [0.5] * 4, [0.60] * 4),
        "warm": ("top_p", [0.05] * 4, [0.52] * 4),
        "human": ("reference", [0.0] * 4, [0.95] * 4),  # best on both counts, but not a setting
    }
    samples = _samples(cells)
    samples.loc[samples.cell == "human", ["temperature", "top_p", "min_p"]] = float("nan")
    summary = summarise(samples, 200, 0)
    assert "human" in set(summary["cell"])  # the NaN knobs do not drop the row from the summary
    record = choose_default(summary, _distribution(cells), 0.10)
    assert record["kind"] == "max_in_corpus_drop" and record["cell"] == "warm"
    assert record["sampling_cells"] == 1 and record["eligible_cells"] == 1


def test_default_rule_kind_is_validated_by_the_schema():
    root = Path(__file__).resolve().parent.parent
    schema = str(root / "workflow/schemas/config.schema.yaml")
    config = yaml.safe_load((root / "config/config.yaml").read_text(encoding="utf-8"))
    assert config["sampling"]["default_rule"]["kind"] == "human_match"
    config["sampling"]["default_rule"] = {"kind": "closest_to_greedy"}
    with pytest.raises(WorkflowError, match="closest_to_greedy"):
        validate(config, schema)
    config["sampling"]["default_rule"] = {"kind": "max_in_corpus_drop"}  # that kind needs its threshold
    with pytest.raises(WorkflowError, match="max_in_corpus_drop"):
        validate(config, schema)
    config["sampling"]["default_rule"] = {"kind": "human_match"}  # this one does not
    validate(config, schema)
