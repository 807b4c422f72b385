"""The reviewer bundle: one zip of the report and its evidence, checkable with `sha256sum -c`."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path, PurePosixPath

from inferlab.jobs.lineage import file_sha256

MANIFEST_NAME = "MANIFEST.sha256"
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # a fixed timestamp, so the same files give the same zip


def build_bundle(zip_path: str | Path, files: dict[str, str | Path]) -> Path:
    """Writes zip_path atomically: the files under their arcnames plus MANIFEST.sha256 ('<hex>  <arcname>'
    per line, `sha256sum` format)."""
    zip_path = Path(zip_path)
    for arcname, path in files.items():
        parts = PurePosixPath(arcname)
        if parts.is_absolute() or ".." in parts.parts or not parts.parts or arcname == MANIFEST_NAME:
            raise ValueError(f"bundle entry name {arcname!r} must be a relative path inside the bundle "
                             f"and not {MANIFEST_NAME}")
        if not Path(path).is_file():
            raise FileNotFoundError(f"bundle file {path} (as {arcname}) does not exist")
    zip_path.parent.mkdir(parents=True, exist_ok=True)
    temp = zip_path.with_name(zip_path.name + ".tmp")
    manifest = "".join(f"{file_sha256(path)}  {arcname}\n" for arcname, path in sorted(files.items()))
    try:
        with zipfile.ZipFile(temp, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            for arcname, path in [*sorted(files.items()), (MANIFEST_NAME, None)]:
                info = zipfile.ZipInfo(arcname, date_time=_ZIP_TIME)
                info.compress_type = zipfile.ZIP_STORED if path is None else zipfile.ZIP_DEFLATED
                info.external_attr = 0o644 << 16
                archive.writestr(info, manifest if path is None else Path(path).read_bytes())
        os.replace(temp, zip_path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return zip_path
