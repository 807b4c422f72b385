"""The corpus download: the only network access in the workflow, with a clear way out."""

from __future__ import annotations

import hashlib
import logging
import os
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlparse


class CorpusUnavailable(RuntimeError):
    pass


def _check_sha256(data: bytes, expected: str | None, destination: Path) -> None:
    """A mismatch keeps the bytes aside as <destination>.rejected, for inspection, and stops."""
    actual = hashlib.sha256(data).hexdigest()
    if expected is None:
        logging.warning("downloaded %d bytes with sha256 %s; corpus_sha256 is null, so it is not checked "
                        "(set corpus_sha256 to this value to pin it)", len(data), actual)
        return
    if actual != expected.lower():
        rejected = destination.with_name(destination.name + ".rejected")
        rejected.parent.mkdir(parents=True, exist_ok=True)
        rejected.write_bytes(data)
        raise CorpusUnavailable(f"the download's sha256 is {actual}, corpus_sha256 pins {expected}; the file "
                                f"was kept aside as {rejected} and not used. If the new file is the right one, "
                                f"set corpus_sha256: {actual}")


def download_corpus(url: str, destination: str | Path, configured_path: str | Path | None = None,
                    timeout_s: float = 60.0, expected_sha256: str | None = None) -> None:
    """Downloads into destination (never the user's configured path, which stays read-only to us).

    https only; the bytes must match expected_sha256 unless it is None (then the hash is only logged).
    """
    destination = Path(destination)
    wanted = Path(configured_path) if configured_path else destination
    hint = (f"Put the UTF-8 text of Project Gutenberg #23950 (三國志演義) at {wanted}, "
            f"or point the workflow at an existing copy with --config corpus_path=/path/to/sanguo-yanyi.txt. "
            f"Both the raw Gutenberg download and the frame-stripped copy are accepted.")
    if wanted.is_dir():
        raise CorpusUnavailable(f"corpus_path {wanted} is a directory, not the corpus text file. {hint}")
    if not url:
        raise CorpusUnavailable(f"No corpus at {wanted} and no corpus_url configured. {hint}")
    if urlparse(url).scheme != "https":
        raise CorpusUnavailable(f"corpus_url {url!r} is not https; the download accepts https only. {hint}")
    logging.info("downloading %s -> %s", url, destination)
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            data = response.read()
    except (urllib.error.URLError, OSError) as err:
        raise CorpusUnavailable(f"No corpus at {wanted} and the download of {url} failed ({err}). {hint}") from err
    _check_sha256(data, expected_sha256, destination)
    destination.parent.mkdir(parents=True, exist_ok=True)
    tmp = destination.with_name(destination.name + ".part")
    tmp.write_bytes(data)
    os.replace(tmp, destination)
    logging.info("saved %d bytes", len(data))
