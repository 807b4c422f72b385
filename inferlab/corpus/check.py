"""The corpus as prepare_corpus would take it, checked when the workflow is parsed.

Snakemake deletes a job's outputs before it runs the job, so a corpus that prepare_corpus would
refuse must be refused before any job starts: found inside the job, it has already cost the
prepared corpus and, through it, every job of the DAG. The check is prepare()'s own measure() (torch- and
numpy-free), and its result is kept by the file's size and mtime, as the code parses are kept, so
an unchanged corpus adds nothing to a dry run.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from inferlab.corpus import text
from inferlab.corpus.text import CorpusError, measure, read_corpus

# The result of one check, from an earlier Snakemake start: entries beyond this are dropped.
KEPT_ENTRIES = 8


def corpus_check(path: str | Path, val_fraction: float, vocab_size: int, cache_file: str | Path | None = None) -> dict:
    """measure()'s stats of the file with its size (raw_bytes), or {"problem": why, raw_sha256, raw_bytes}."""
    path = Path(path)
    key = _cache_key(path, val_fraction, vocab_size)
    cache = _load(cache_file)
    if key in cache:
        return cache[key]
    facts = corpus_facts(read_corpus(path), val_fraction, vocab_size, source=str(path))
    if cache_file is not None:
        _save(cache_file, {**cache, key: facts})
    return facts


def corpus_facts(raw: bytes, val_fraction: float, vocab_size: int, source: str = "the corpus") -> dict:
    """What inferlab.jobs.configcheck checks of a corpus: measure()'s stats, or why it fails."""
    facts = {"raw_sha256": text.sha256_bytes(raw), "raw_bytes": len(raw)}
    try:
        facts.update(measure(raw, val_fraction, vocab_size, source=source).stats)
    except CorpusError as err:
        facts["problem"] = str(err)
    return facts


def _cache_key(path: Path, val_fraction: float, vocab_size: int) -> str:
    """The file by where, how long and when it was last written, the settings, and the code that prepares it."""
    stat = path.stat()
    code = hashlib.sha256(Path(text.__file__).read_bytes()).hexdigest()[:16]
    return json.dumps([str(path.resolve()), stat.st_size, stat.st_mtime_ns, val_fraction, vocab_size, code])


def _load(cache_file: str | Path | None) -> dict:
    if cache_file is None:
        return {}
    try:
        saved = json.loads(Path(cache_file).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return saved if isinstance(saved, dict) else {}


def _save(cache_file: str | Path, entries: dict) -> None:
    """Best effort and atomic: jobs that parse the Snakefile at once never read half a file."""
    path = Path(cache_file)
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial.write_text(json.dumps(dict(list(entries.items())[-KEPT_ENTRIES:])), encoding="utf-8")
        os.replace(partial, path)
    except OSError:
        partial.unlink(missing_ok=True)
