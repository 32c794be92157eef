"""Give a classic project's wheel metadata that tells the truth about what was built.

A wheel built by a project's own backend says nothing about the torch, CUDA or GPU archs it
needs. ``relabel_wheel`` rewrites it: the version gains a local label (``+pt214.cu130.sm90``),
``Requires-Dist`` pins torch to the minor release it was built against, and the
``.dist-info`` directory gains ``prebuild.json`` (the manifest). The wheel package's own
``WheelFile`` reads the original (checking its RECORD) and writes the new one (writing
RECORD), so every hash stays valid. ``rewrite_metadata`` is pure.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version
from wheel.wheelfile import WheelFile

from prebuild.tool.builder.wheel import place_atomically
from prebuild.runtime.manifest import PROJECT_MANIFEST_NAME


def add_local_label(version: str, label: str) -> str:
    """``1.0.0`` + ``pt214.cu130.sm90`` -> ``1.0.0+pt214.cu130.sm90``; a project's own local
    label stays in front (``1.0.0+abc`` -> ``1.0.0+abc.pt214...``)."""
    v = Version(version)
    return str(Version(f"{v.public}+{v.local}.{label}" if v.local else f"{v.public}+{label}"))


def rewrite_metadata(text: str, version: str, torch_requirement: str) -> str:
    """METADATA with ``Version`` replaced and every ``Requires-Dist`` on torch replaced by
    ``torch_requirement`` (added when there was none; extras' torch requirements too)."""
    head, sep, body = text.partition("\n\n")
    lines, pinned = [], False
    for line in head.splitlines():
        key, _, value = line.partition(":")
        if key == "Version":
            line = f"Version: {version}"
        elif key == "Requires-Dist":
            try:
                requirement = Requirement(value.strip())
            except InvalidRequirement:
                requirement = None
            if requirement is not None and canonicalize_name(requirement.name) == "torch":
                if pinned:
                    continue
                line, pinned = f"Requires-Dist: {torch_requirement}", True
        lines.append(line)
    if not pinned:
        lines.append(f"Requires-Dist: {torch_requirement}")
    return "\n".join(lines) + (sep + body if sep else "\n")


def relabel_wheel(wheel: Path, out_dir: Path, label: str, torch_requirement: str, manifest_json: str) -> Path:
    """Write the relabelled copy of ``wheel``, with ``manifest_json`` as its .dist-info's
    prebuild.json, into ``out_dir`` (atomically) and return it."""
    version = parse_wheel_filename(wheel.name)[1]
    new_version = add_local_label(str(version), label)
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
        old_info = root / dist_info
        stem = dist_info[: -len(".dist-info")].rsplit("-", 1)[0]
        new_info = root / f"{stem}-{new_version}.dist-info"
        old_info.rename(new_info)
        (new_info / "RECORD").unlink()
        metadata = new_info / "METADATA"
        metadata.write_text(rewrite_metadata(metadata.read_text(encoding="utf-8"), new_version, torch_requirement),
                            encoding="utf-8")  # fmt: skip
        (new_info / PROJECT_MANIFEST_NAME).write_text(manifest_json, encoding="utf-8")
        tag = "-".join(wheel.name[: -len(".whl")].split("-")[-3:])  # python-abi-platform, as built
        filename = f"{stem}-{new_version}-{tag}.whl"  # (a build tag, if any, belonged to the old version)
        built = Path(tmp) / filename
        with WheelFile(built, "w") as wf:
            wf.write_files(str(root))
        return place_atomically(built, out_dir)
