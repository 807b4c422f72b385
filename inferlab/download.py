"""The corpus download: the only network access in the workflow, with a clear way out."""

from __future__ import annotations

import logging
import os
import urllib.error
import urllib.request
from pathlib import Path


class CorpusUnavailable(RuntimeError):
    pass


def download_corpus(url: str, destination: str | Path, configured_path: str | Path | None = None,
                    timeout_s: float = 60.0) -> None:
    """Downloads into destination (never the user's configured path, which stays read-only to us)."""
    destination = Path(destination)
    wanted = Path(configured_path) if configured_path else destination
    hint = (f"Put the UTF-8 text of Project Gutenberg #23950 (三國志演義) at {wanted}, "
            f"or point the workflow at an existing copy with --config corpus_path=/path/to/sanguo-yanyi.txt. "
            f"Both the raw Gutenberg download and the frame-stripped copy are accepted.")
    if not url:
        raise CorpusUnavailable(f"No corpus at {wanted} and no corpus_url configured. {hint}")
    logging.info("downloading %s -> %s", url, destination)
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            data = response.read()
    except (urllib.error.URLError, OSError) as err:
        raise CorpusUnavailable(f"No corpus at {wanted} and the download of {url} failed ({err}). {hint}") from err
    destination.parent.mkdir(parents=True, exist_ok=True)
    tmp = destination.with_name(destination.name + ".part")
    tmp.write_bytes(data)
    os.replace(tmp, destination)
    logging.info("saved %d bytes", len(data))
