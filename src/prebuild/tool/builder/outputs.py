"""Where ``prebuild wheel`` writes: the output directory (proved writable before anything is
built) and the ``--lock`` files (one pinned requirement per wheel)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from prebuild.runtime.manifest import sha256_file
from prebuild.tool.index_keys import index_key_of
from prebuild.tool.variant_wheels import parse_filename


class OutputError(ValueError):
    """An output path (--out, --lock) cannot be created or written."""


def prepare_output_dir(path: Path, what: str = "--out") -> Path:
    """Create ``path`` if needed and prove it writable, before any lock is taken or anything
    is compiled: a bad --out must not cost a build. OutputError names the problem."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise OutputError(f"{what} {path}: exists and is not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
        # Permission bits do not tell (root ignores them; read-only mounts, /proc): write.
        with tempfile.NamedTemporaryFile(dir=path, prefix=".prebuild-write-check-"):
            pass
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise OutputError(
            f"{what} {path}: cannot create or write there ({reason}); choose another {what}"
        ) from None
    return path


@contextmanager
def removed_if_left_empty(path: Path) -> Iterator[None]:
    """A failed or interrupted build leaves no empty ``--out`` behind: the directories of
    ``path`` that did not exist on entry are removed on the way out of an error, if empty."""
    path = Path(path).absolute()
    missing = [p for p in (path, *path.parents) if not p.exists()]
    try:
        yield
    except BaseException:
        for directory in missing:  # deepest first
            try:
                directory.rmdir()  # only if empty: a wheel written meanwhile stays
            except OSError:
                break
        raise


# Stands for the wheel's index key (cu130-sm90), or its local label for a wheel that has none
# (cpu, cu130: a plain wheel).
LOCK_PLACEHOLDER = "{index_key}"


def check_lock_target(template: str, n_wheels: int) -> None:
    """pip refuses two requirements of one name in a file, so several wheels need one lock
    file each: ``{index_key}`` in the name says where (ValueError otherwise)."""
    if n_wheels > 1 and LOCK_PLACEHOLDER not in template:
        raise ValueError(
            f"--lock {template}: {n_wheels} wheels are built but pip accepts one prebuild line "
            f"per requirements file. Put {LOCK_PLACEHOLDER} in the name (--lock "
            f"'locks/{LOCK_PLACEHOLDER}.txt' writes one per wheel), or build one wheel (--fat)"
        )
    parent = Path(template).parent
    while LOCK_PLACEHOLDER in str(parent):  # 'locks/{index_key}/req.txt': check what is fixed
        parent = parent.parent
    prepare_output_dir(parent, "--lock")


def lock_line(project: str, wheel: Path, sha256: str) -> str:
    """``prebuild @ file:///abs/x.whl --hash=sha256:...``: what ``pip install
    --require-hashes -r FILE`` accepts."""
    return f"{project} @ {wheel.resolve().as_uri()} --hash=sha256:{sha256}\n"


def write_lock(template: str, wheel: Path) -> Path:
    """Write the lock file of one built wheel (its sha256 computed from the file itself)."""
    key = index_key_of(wheel.name)
    # a wheel of no arch: a CPU build (+cpu), or a --variants build's plain wheel (+cu130)
    name = key.name if key else (parse_filename(wheel.name)[1].local or "cpu").replace(".", "-")
    path = Path(template.replace(LOCK_PLACEHOLDER, name))
    path.parent.mkdir(parents=True, exist_ok=True)
    project = str(parse_filename(wheel.name)[0])
    text = f"# {wheel.name}: pip install --require-hashes -r {path.name}\n" + lock_line(
        project, wheel, sha256_file(wheel)
    )
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)
    return path
