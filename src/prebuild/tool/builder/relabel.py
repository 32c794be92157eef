"""Rewrite built wheels so that their metadata tells the truth about what was built, and place
them in the output directory atomically.

A wheel built by a classic project's own backend says nothing about the torch, CUDA or GPU
archs it needs. ``relabel_wheel`` rewrites it: the version gains a local label
(``+pt214.cu130.sm90``), ``Requires-Dist`` pins torch to the minor release it was built
against, and the ``.dist-info`` directory gains ``prebuild.json`` (the manifest). A variant
wheel of either kind of project gains ``variant.json`` and its label in its file name
(``rewrite_wheel``). The wheel package's own ``WheelFile`` reads the original (checking its
RECORD) and writes the new one (writing RECORD), so every hash stays valid.
``rewrite_metadata`` is pure.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version
from wheel.wheelfile import WheelFile

from prebuild.runtime.manifest import PROJECT_MANIFEST_NAME
from prebuild.tool.builder.guard_files import GUARD_PREFIX
from prebuild.tool.variant_wheels import variant_filename


def add_local_label(version: str, label: str) -> str:
    """``1.0.0`` + ``pt214.cu130.sm90`` -> ``1.0.0+pt214.cu130.sm90``; a project's own local
    label stays in front (``1.0.0+abc`` -> ``1.0.0+abc.pt214...``) unless ours says all it
    says (AutoAWQ_kernels' ``0.0.9+cu130``: ``0.0.9+pt214.cu130.sm90``, not ``+cu130.pt214...``)."""
    v = Version(version)
    own = v.local if v.local and not set(v.local.split(".")) <= set(label.split(".")) else None
    return str(Version(f"{v.public}+{own}.{label}" if own else f"{v.public}+{label}"))


def project_version(version: str) -> str:
    """Pure: a classic wheel's version without the label prebuild added (add_local_label's,
    which starts with the torch, ``pt214``, or for a stable-ABI wheel with the CUDA, ``cu130``):
    ``1.0.0+abc.pt214.cu130.sm90`` and ``1.0.0+abc.cu130.sm90`` -> ``1.0.0+abc``."""
    public, _, local = version.partition("+")
    parts = local.split(".") if local else []
    ours = next((i for i in range(len(parts)) if _is_our_label(parts[i:])), len(parts))
    return public + (f"+{'.'.join(parts[:ours])}" if ours else "")


def _is_our_label(parts: list[str]) -> bool:
    if re.fullmatch(r"pt\d+", parts[0]):
        return True
    if parts in (["cpu"], ["cpu", "host"]):
        return True
    return bool(re.fullmatch(r"cu\d+", parts[0])) and all(
        re.fullmatch(r"sm\d+[a-z]?|ptx\d+[a-z]?|host", part) for part in parts[1:]
    )


def is_torch_requirement(text: str) -> bool:
    """Pure: whether a requirement (``torch>=2.0; extra == "dev"``, ``Torch[opt]==2.5``) is on
    torch itself; False for one that does not parse."""
    try:
        return canonicalize_name(Requirement(text.strip()).name) == "torch"
    except InvalidRequirement:
        return False


def rewrite_metadata(text: str, version: str, torch_requirement: str | None = None) -> str:
    """METADATA with ``Version`` replaced and, given ``torch_requirement``, every
    ``Requires-Dist`` on torch replaced by it (added when there was none; extras' torch
    requirements too)."""
    head, sep, body = text.partition("\n\n")
    lines, pinned = [], False
    for line in head.splitlines():
        key, _, value = line.partition(":")
        if key == "Version":
            line = f"Version: {version}"
        elif key == "Requires-Dist" and torch_requirement is not None:
            if is_torch_requirement(value):
                if pinned:
                    continue
                line, pinned = f"Requires-Dist: {torch_requirement}", True
        lines.append(line)
    if torch_requirement is not None and not pinned:
        lines.append(f"Requires-Dist: {torch_requirement}")
    return "\n".join(lines) + (sep + body if sep else "\n")


def relabel_wheel(
    wheel: Path,
    out_dir: Path,
    label: str,
    torch_requirement: str | None,
    manifest_json: str,
    dist_info_files: Mapping[str, str] | None = None,
    variant_label: str | None = None,
    files: Mapping[str, str] | None = None,
    tag: str | None = None,
) -> Path:
    """Write the relabelled copy of ``wheel``, with ``manifest_json`` as its .dist-info's
    prebuild.json (and ``dist_info_files``, and ``files`` added beside the project's, and
    ``tag``, python-abi-platform, instead of its own), into ``out_dir`` (atomically) and return
    it."""
    version = add_local_label(str(parse_wheel_filename(wheel.name)[1]), label)
    return rewrite_wheel(
        wheel,
        out_dir,
        version=version,
        torch_requirement=torch_requirement,
        dist_info_files={PROJECT_MANIFEST_NAME: manifest_json, **(dist_info_files or {})},
        variant_label=variant_label,
        files=files,
        tag=tag,
    )


def relabelled_dist_info(dist_info: str, version: str) -> str:
    """The name the .dist-info directory ``dist_info`` takes when its version becomes
    ``version``."""
    return f"{dist_info[: -len('.dist-info')].rsplit('-', 1)[0]}-{version}.dist-info"


def rewrite_wheel(
    wheel: Path,
    out_dir: Path,
    *,
    version: str | None = None,
    torch_requirement: str | None = None,
    dist_info_files: Mapping[str, str] | None = None,
    variant_label: str | None = None,
    files: Mapping[str, str] | None = None,
    tag: str | None = None,
    edit: Callable[[Path], None] | None = None,
) -> Path:
    """A copy of ``wheel`` in ``out_dir`` (placed atomically): its version, torch requirement
    and tag (python-abi-platform: the name's and WHEEL's) replaced when given,
    ``dist_info_files`` (name -> text) added to its .dist-info, ``files`` (path in the wheel ->
    text) replaced, ``variant_label`` after its platform tag, and ``edit`` called with the
    unpacked tree to change its files in place (debug_info.strip_wheel)."""
    old_version = str(parse_wheel_filename(wheel.name)[1])
    new_version = version or old_version
    with tempfile.TemporaryDirectory(prefix="prebuild-relabel-") as tmp:
        root = Path(tmp) / "tree"
        with WheelFile(wheel) as wf:  # checks every file against RECORD while extracting
            dist_info = wf.dist_info_path
            for member in wf.namelist():
                wf.extract(member, root)
            # Keep file modes (extensions must stay executable).
            for info in wf.infolist():
                mode = (info.external_attr >> 16) & 0o777
                if mode:
                    os.chmod(root / info.filename, mode)
        if edit is not None:
            edit(root)
        old_info = root / dist_info
        new_info = root / relabelled_dist_info(dist_info, new_version)
        stem = new_info.name[: -len(".dist-info")].rsplit("-", 1)[0]
        old_info.rename(new_info)
        (new_info / "RECORD").unlink()
        # a classic wheel's guard names its manifest's place: it moves with the .dist-info
        for guard in root.glob(f"{GUARD_PREFIX}*.pth"):
            text = guard.read_text(encoding="utf-8")
            guard.write_text(text.replace(f"{dist_info}/", f"{new_info.name}/"), encoding="utf-8")
        if version is not None or torch_requirement is not None:
            metadata = new_info / "METADATA"
            text = metadata.read_text(encoding="utf-8")
            metadata.write_text(
                rewrite_metadata(text, new_version, torch_requirement), encoding="utf-8"
            )
        for name, text in (dist_info_files or {}).items():
            (new_info / name).write_text(text, encoding="utf-8")
        for name, text in (files or {}).items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(text, encoding="utf-8")
        if tag is not None:
            info = new_info / "WHEEL"
            info.write_text(retagged_wheel_info(info.read_text(encoding="utf-8"), tag))
        else:
            tag = "-".join(wheel.name[: -len(".whl")].split("-")[-3:])  # python-abi-platform
        filename = (
            f"{stem}-{new_version}-{tag}.whl"  # (a build tag, if any, belonged to the old version)
        )
        built = Path(tmp) / filename
        with WheelFile(built, "w") as wf:
            wf.write_files(str(root))
        return place_atomically(
            built, out_dir, variant_filename(filename, variant_label) if variant_label else None
        )


def retagged_wheel_info(text: str, tag: str) -> str:
    """Pure: a WHEEL file whose ``Tag`` lines are replaced by one, ``tag``; a wheel of one
    platform's is no longer pure Python (``Root-Is-Purelib: false``)."""
    lines = [line for line in text.splitlines() if not line.startswith("Tag:")]
    if not tag.endswith("-any"):
        lines = [
            "Root-Is-Purelib: false" if line.startswith("Root-Is-Purelib:") else line
            for line in lines
        ]
    return "\n".join([*lines, f"Tag: {tag}"]) + "\n"


def place_atomically(built: Path, out_dir: Path, filename: str | None = None) -> Path:
    """Copy ``built`` into ``out_dir`` under a hidden name, then rename: the target name
    appears only once the wheel is complete, even across file systems."""
    out_dir.mkdir(parents=True, exist_ok=True)
    final = out_dir / (filename or built.name)
    partial = out_dir / f".{final.name}.partial"
    try:
        shutil.copyfile(built, partial)
        os.replace(partial, final)
    finally:
        partial.unlink(missing_ok=True)
    return final
