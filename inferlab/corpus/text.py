"""Corpus preparation: strip the Gutenberg frame, rejoin hard wraps, split, build the vocabulary."""

from __future__ import annotations

import codecs
import hashlib
import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

UNK = "<unk>"
CHAPTER_HEADING = re.compile(r"^第[一二三四五六七八九十百零〇○]+回：?")
_FRAME_START = re.compile(r"^\*\*\*\s*START OF (THE|THIS) PROJECT GUTENBERG", re.IGNORECASE)
_FRAME_END = re.compile(r"^\*\*\*\s*END OF (THE|THIS) PROJECT GUTENBERG", re.IGNORECASE)
_CREDIT_OR_END_LINE = re.compile(r"^(Produced by|End of (the )?Project Gutenberg)", re.IGNORECASE)
# Gutenberg indents each paragraph with ideographic spaces; they carry no content.
_INDENT = " \t\u3000"


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _strip_frame(lines: list[str]) -> list[str]:
    start = next((i + 1 for i, line in enumerate(lines) if _FRAME_START.match(line)), 0)
    end = next((i for i, line in enumerate(lines) if _FRAME_END.match(line)), len(lines))
    return [line for line in lines[start:end] if not _CREDIT_OR_END_LINE.match(line.strip())]


def normalise(raw: str) -> str:
    """Accepts the raw Gutenberg download or the shared frame-less copy.

    Returns one paragraph per line; chapter headings stay on lines of their own.
    """
    text = raw.lstrip("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
    paragraphs: list[str] = []
    current: list[str] = []

    def flush() -> None:
        if current:
            paragraphs.append("".join(current))
            current.clear()

    for line in _strip_frame(text.split("\n")):
        stripped = line.strip(_INDENT)
        if not stripped:
            flush()
        elif CHAPTER_HEADING.match(stripped):
            flush()
            paragraphs.append(stripped)
        else:
            # A line that starts with an indent opens a new paragraph even without a blank line.
            if line[:1] in _INDENT:
                flush()
            current.append(stripped)
    flush()
    return "\n".join(paragraphs) + "\n"


def chapter_starts(text: str) -> list[int]:
    """Character offsets at which chapter headings begin."""
    starts, offset = [], 0
    for line in text.split("\n"):
        if CHAPTER_HEADING.match(line):
            starts.append(offset)
        offset += len(line) + 1
    return starts


@dataclass(frozen=True)
class Split:
    train: str
    val: str
    boundary: int
    val_first_chapter: int  # 1-based index of the first validation chapter


def split_at_chapter(text: str, val_fraction: float) -> Split:
    """Contiguous split: validation is the tail, cut at the chapter start nearest 1 - val_fraction."""
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
    starts = chapter_starts(text)
    if len(starts) < 2:
        raise ValueError(f"need at least 2 chapter headings to split, found {len(starts)}")
    target = len(text) * (1.0 - val_fraction)
    candidates = starts[1:]  # never put the whole text into validation
    boundary = min(candidates, key=lambda s: abs(s - target))
    return Split(text[:boundary], text[boundary:], boundary, starts.index(boundary) + 1)


class Vocabulary:
    """Character vocabulary; id 0 is <unk>."""

    def __init__(self, tokens: list[str]):
        if not tokens or tokens[0] != UNK:
            raise ValueError("the first vocabulary entry must be <unk>")
        self.tokens = list(tokens)
        self.index = {t: i for i, t in enumerate(self.tokens)}

    @classmethod
    def from_text(cls, text: str, size: int) -> Vocabulary:
        counts = Counter(text)
        # Frequency first, then code point, so the vocabulary is a pure function of the text.
        ranked = sorted(counts, key=lambda ch: (-counts[ch], ord(ch)))
        return cls([UNK] + ranked[: size - 1])

    def __len__(self) -> int:
        return len(self.tokens)

    def encode(self, text: str) -> list[int]:
        return [self.index.get(ch, 0) for ch in text]

    def decode(self, ids) -> str:
        return "".join(self.tokens[i] if i != 0 else "�" for i in ids)

    def sha256(self) -> str:
        return sha256_bytes("\n".join(self.tokens).encode("utf-8"))

    def unk_count(self, text: str) -> int:
        return sum(1 for ch in text if ch not in self.index)


@dataclass(frozen=True)
class PreparedCorpus:
    normalised: str
    split: Split
    vocab: Vocabulary
    stats: dict

    def save(self, paths) -> None:
        """paths has .normalised, .train, .val and .vocab (the stats are written by the caller)."""
        import numpy as np

        Path(paths.normalised).write_text(self.normalised, encoding="utf-8")
        for name, text in (("train", self.split.train), ("val", self.split.val)):
            np.save(getattr(paths, name), np.asarray(self.vocab.encode(text), dtype=np.uint16))
        Path(paths.vocab).write_text(json.dumps({"tokens": self.vocab.tokens}, ensure_ascii=False) + "\n",
                                     encoding="utf-8")


def load_vocabulary(path: str | Path) -> Vocabulary:
    return Vocabulary(json.loads(Path(path).read_text(encoding="utf-8"))["tokens"])


class CorpusError(ValueError):
    pass


def read_corpus(path: str | Path) -> bytes:
    """The raw bytes; a directory or an empty file is refused with its own message."""
    path = Path(path)
    if path.is_dir():
        raise CorpusError(f"corpus {path} is a directory, not the corpus text file")
    if not path.is_file():
        raise CorpusError(f"corpus {path} does not exist")
    raw = path.read_bytes()
    if not raw.strip():
        raise CorpusError(f"corpus {path} is empty")
    return raw


# Chinese novels often circulate in these; each is tried when a corpus is not UTF-8.
LEGACY_ENCODINGS = {"GBK": "gb18030", "Big5": "big5"}
# Share of these in the decoded text tells the right legacy encoding from a wrong one: Chinese prose
# is about a tenth punctuation, and a wrong decoding turns those byte pairs into other characters.
CJK_PUNCTUATION = frozenset("，。、：；！？「」『』")
_UTF16_BOMS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)


def decode_utf8(raw: bytes, source: str = "the corpus") -> str:
    """The text, or a CorpusError naming the first bad byte, what the file looks like and the fix."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise CorpusError(_not_utf8_message(raw, err, source)) from None


def looks_like(raw: bytes) -> str | None:
    """'UTF-16', 'GBK' or 'Big5' when the bytes read as that; None when they read as none of them."""
    if raw.startswith(_UTF16_BOMS):
        return "UTF-16"
    scores = {}
    for name, codec in LEGACY_ENCODINGS.items():
        try:
            text = raw.decode(codec)
        except UnicodeDecodeError:
            continue
        scores[name] = sum(ch in CJK_PUNCTUATION for ch in text) / max(len(text), 1)
    return max(scores, key=scores.get) if scores else None


def _not_utf8_message(raw: bytes, err: UnicodeDecodeError, source: str) -> str:
    bad = f"byte 0x{raw[err.start]:02x} at offset {err.start:,}"
    if err.reason == "unexpected end of data":  # a cut inside a multi-byte character
        return (f"{source} is not UTF-8: it ends inside a character ({bad} of {len(raw):,}), so it looks "
                "truncated (an interrupted download or copy); copy or download it again")
    encoding = looks_like(raw)
    if encoding is None:
        return f"{source} is not UTF-8 ({bad} is not valid there) and does not read as UTF-16, GBK or Big5"
    return (f"{source} is not UTF-8 ({bad} is not valid there); it reads as {encoding}. Convert it once and "
            f"point corpus_path at the copy: iconv -f {encoding.upper()} -t UTF-8 {source} > corpus-utf8.txt")


def require_chars(available: int, needed: int, what: str) -> None:
    """what: e.g. 'results/corpus/val.npy (validation split) for seq_len 256'."""
    if available < needed:
        raise CorpusError(f"{what}: the split has {available} characters, {needed} are needed; "
                          f"use a longer corpus, a smaller seq_len/batch_size, or another corpus.val_fraction")


def prepare(raw: bytes, val_fraction: float, vocab_size: int, source: str = "the corpus") -> PreparedCorpus:
    """Normalise, split and build the vocabulary; stats record hashes, sizes and the <unk> rate.

    source names the file in every error.
    """
    prepared = measure(raw, val_fraction, vocab_size, source)
    if len(prepared.vocab) < vocab_size:
        raise CorpusError(f"{source}: the training text has only {len(prepared.vocab) - 1} distinct characters; "
                          f"corpus.vocab_size {vocab_size} needs {vocab_size - 1}")
    return prepared


def measure(raw: bytes, val_fraction: float, vocab_size: int, source: str = "the corpus") -> PreparedCorpus:
    """prepare() without its check of the vocabulary's size, which the config check words itself."""
    text = decode_utf8(raw, source)
    normalised = normalise(text)
    try:
        split = split_at_chapter(normalised, val_fraction)
    except ValueError as err:
        raise CorpusError(f"{source} is too short to split ({len(normalised)} characters after normalisation): "
                          f"{err}") from err
    vocab = Vocabulary.from_text(split.train, vocab_size)
    train_unk, val_unk = vocab.unk_count(split.train), vocab.unk_count(split.val)
    stats = {
        "raw_sha256": sha256_bytes(raw),
        "normalised_sha256": sha256_bytes(normalised.encode("utf-8")),
        "raw_chars": len(text),
        "normalised_chars": len(normalised),
        "distinct_chars": len(set(normalised)),
        "train_distinct_chars": len(set(split.train)),
        "chapters": len(chapter_starts(normalised)),
        "val_fraction_requested": val_fraction,
        "train_chars": len(split.train),
        "val_chars": len(split.val),
        "val_fraction_actual": len(split.val) / len(normalised),
        "val_first_chapter": split.val_first_chapter,
        "vocab_size": len(vocab),
        "train_unk_rate": train_unk / len(split.train),
        "val_unk_rate": val_unk / len(split.val),
        "unk_rate": (train_unk + val_unk) / len(normalised),
        "vocab_sha256": vocab.sha256(),
    }
    return PreparedCorpus(normalised, split, vocab, stats)
