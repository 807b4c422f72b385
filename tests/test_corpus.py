import numpy as np
import pytest

from inferlab.corpus.text import (
    UNK,
    Vocabulary,
    chapter_starts,
    load_vocabulary,
    normalise,
    prepare,
    split_at_chapter,
)
from tests.conftest import synthetic_corpus


def test_normalise_strips_frame_credit_and_end_lines():
    text = normalise(synthetic_corpus(gutenberg_frame=True))
    assert "Gutenberg" not in text and "Produced by" not in text and "licence" not in text
    assert "\ufeff" not in text


def test_normalise_joins_hard_wraps_and_keeps_headings():
    raw = synthetic_corpus(n_chapters=3, paragraphs=2, wrap=10)
    lines = normalise(raw).splitlines()
    headings = [line for line in lines if line.startswith("第") and "回" in line[:5]]
    assert len(headings) == 3
    # each chapter: heading + 2 paragraphs, each rejoined into one line
    assert len(lines) == 3 * 3
    assert all(not line.startswith("\u3000") for line in lines)


def test_raw_and_framed_forms_normalise_identically():
    assert normalise(synthetic_corpus(gutenberg_frame=True)) == normalise(synthetic_corpus())


def test_split_is_contiguous_at_a_chapter_boundary():
    text = normalise(synthetic_corpus(n_chapters=20))
    split = split_at_chapter(text, 0.1)
    assert split.train + split.val == text
    assert split.boundary in chapter_starts(text)
    assert split.val.startswith("第")
    assert 0.03 < len(split.val) / len(text) < 0.2


def test_split_needs_two_chapters():
    with pytest.raises(ValueError, match="chapter"):
        split_at_chapter("no headings here\n", 0.1)


def test_vocabulary_is_most_frequent_plus_unk():
    vocab = Vocabulary.from_text("aaabbc", 3)
    assert vocab.tokens == [UNK, "a", "b"]
    assert vocab.encode("abcz") == [1, 2, 0, 0]
    assert vocab.unk_count("abcz") == 2


def test_prepare_stats_and_round_trip(tmp_path):
    raw = synthetic_corpus(n_chapters=15).encode("utf-8")
    prepared = prepare(raw, 0.1, 120)
    stats = prepared.stats
    assert stats["vocab_size"] == 120 and stats["chapters"] == 15
    assert stats["train_chars"] + stats["val_chars"] == stats["normalised_chars"]
    assert 0 < stats["unk_rate"] < 0.5

    class Paths:
        normalised = tmp_path / "n.txt"
        train = tmp_path / "train.npy"
        val = tmp_path / "val.npy"
        vocab = tmp_path / "vocab.json"

    prepared.save(Paths)
    vocab = load_vocabulary(Paths.vocab)
    assert vocab.tokens == prepared.vocab.tokens
    ids = np.load(Paths.val, allow_pickle=False)
    assert len(ids) == stats["val_chars"]
    assert vocab.decode(ids[:50].tolist()).replace("�", "") == \
        "".join(ch for ch in prepared.split.val[:50] if ch in vocab.index)


def test_prepare_rejects_too_small_vocabulary_source():
    with pytest.raises(ValueError, match="distinct characters"):
        prepare(synthetic_corpus(alphabet_size=20).encode(), 0.1, 5000)


def test_prompt_encoding_maps_unknown_characters_to_unk_and_counts_them():
    from inferlab.corpus.prompt import encode_prompt

    vocab = Vocabulary.from_text("aaabbc", 3)
    ids, unk = encode_prompt(vocab, "abzc")
    assert ids.tolist() == [[1, 2, 0, 0]] and unk == 2
    with pytest.raises(ValueError, match="empty"):
        encode_prompt(vocab, "")
