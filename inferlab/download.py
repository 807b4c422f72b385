"""The corpus download: the only network access in the workflow, with a clear way out."""

from __future__ import annotations

import logging
import os
import urllib.error
import urllib.request
from pathlib import Path


class CorpusUnavailable(RuntimeError):
    pass


def download_corpus(url: str, destination: str | Path, timeout_s: float = 60.0) -> None:
    destination = Path(destination)
    hint = (f"Put the UTF-8 text of Project Gutenberg #23950 (三國志演義) at {destination}, "
            f"or point the workflow at an existing copy with --config corpus_path=/path/to/sanguo-yanyi.txt. "
            f"Both the raw Gutenberg download and the frame-stripped copy are accepted.")
    if not url:
        raise CorpusUnavailable(f"No corpus at {destination} and no corpus_url configured. {hint}")
    logging.info("downloading %s -> %s", url, destination)
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            data = response.read()
    except (urllib.error.URLError, OSError) as err:
        raise CorpusUnavailable(f"No corpus at {destination} and the download of {url} failed ({err}). {hint}") from err
    destination.parent.mkdir(parents=True, exist_ok=True)
    tmp = destination.with_name(destination.name + ".part")
    tmp.write_bytes(data)
    os.replace(tmp, destination)
    logging.info("saved %d bytes", len(data))
