"""Shared fixtures. Tests never read the real corpus: they build small synthetic ones."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
CHINESE_NUMERALS = "一二三四五六七八九十"


def link_workflow(workdir: Path, *, package: bool = False) -> Path:
    """A workdir that runs this checkout's workflow as `snakemake` from the root would: the
    Snakefile, rules, scripts, config and the default profile (whose settings, such as comparing
    the corpus by content, every real run gets), and the package when a test must not copy it."""
    for name in ("Snakefile", "workflow", "scripts", "config", "profiles", *(["inferlab"] if package else [])):
        (workdir / name).symlink_to(ROOT / name)
    return workdir


def chapter_heading(n: int) -> str:
    """第N回 in Chinese numerals for 1 <= n <= 99."""
    tens, ones = divmod(n, 10)
    if n < 10:
        numeral = CHINESE_NUMERALS[n - 1]
    else:
        tens_part = "" if tens == 1 else CHINESE_NUMERALS[tens - 1]
        numeral = tens_part + "十" + (CHINESE_NUMERALS[ones - 1] if ones else "")
    return f"第{numeral}回"


def synthetic_corpus(n_chapters: int = 12, paragraphs: int = 6, seed: int = 0, alphabet_size: int = 300,
                     gutenberg_frame: bool = False, wrap: int = 38) -> str:
    """Gutenberg-shaped text: indented, hard-wrapped paragraphs under chapter headings.

    Characters follow a skewed (Zipf-like) law so that vocabulary truncation and <unk> occur.
    """
    rng = random.Random(seed)
    alphabet = [chr(0x4E00 + 7 * i) for i in range(alphabet_size)]
    weights = [1.0 / (i + 1) for i in range(alphabet_size)]
    lines = []
    if gutenberg_frame:
        lines += ["\ufeffThe Project Gutenberg eBook of a synthetic test", "",
                  "*** START OF THE PROJECT GUTENBERG EBOOK SYNTHETIC ***", ""]
    lines += ["Produced by a test fixture", "", ""]
    for chapter in range(1, n_chapters + 1):
        lines += [f"{chapter_heading(chapter)}：{''.join(rng.choices(alphabet[:50], k=8))}", ""]
        for _ in range(paragraphs):
            sentences = ["".join(rng.choices(alphabet, weights, k=rng.randint(5, 15))) + rng.choice("，。")
                         for _ in range(rng.randint(4, 10))]
            body = "".join(sentences)
            wrapped = [body[i:i + wrap] for i in range(0, len(body), wrap)]
            lines += ["\u3000\u3000" + wrapped[0], *wrapped[1:], ""]
    lines += ["", "End of Project Gutenberg's synthetic test"]
    if gutenberg_frame:
        lines += ["*** END OF THE PROJECT GUTENBERG EBOOK SYNTHETIC ***", "licence text"]
    return "\n".join(lines) + "\n"


@pytest.fixture
def corpus_text() -> str:
    return synthetic_corpus()


@pytest.fixture(autouse=True)
def _deterministic_torch():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    yield
