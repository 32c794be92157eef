"""Source archives made by tests, as an index or a find-links folder serves them. Importable by
name: pytest puts tests/ on sys.path (tests/conftest.py)."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path


def write_sdist(folder: Path, name: str, version: str, files: dict[str, str]) -> Path:
    """``folder/NAME-VERSION.tar.gz`` holding ``files`` (path -> text) under ``NAME-VERSION/``."""
    folder.mkdir(parents=True, exist_ok=True)
    archive = folder / f"{name}-{version}.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for path, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{name}-{version}/{path}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return archive
