"""PEP 825 variant wheels of built wheels: the twin of a per-arch wheel (``prebuild variant``)
and the ``variant.json`` a labelled wheel carries (every builder's, ``--variants``). The names
and documents are ``variant_wheels``' (pure); this rewrites wheels."""

from __future__ import annotations

import json
import zipfile
from dataclasses import replace
from pathlib import Path

from packaging.version import Version

from prebuild.runtime.manifest import Manifest
from prebuild.tool.builder.compile import BuildError
from prebuild.tool.builder.plan import PlannedWheel
from prebuild.tool.builder.relabel import rewrite_wheel
from prebuild.tool.inspection import inspect_wheel, package_manifests
from prebuild.tool.variant_wheels import (
    VARIANT_JSON,
    WheelArchs,
    cuda_lower_bound,
    parse_filename,
    properties,
    variant_label,
    variants_document,
)


def variant_twin(wheel: Path, out_dir: Path) -> Path:
    """The PEP 825 variant wheel of a per-arch wheel (``x-0.1.0+cu130.sm90-...whl`` ->
    ``x-0.1.0+cu130-...-sm90.whl``), native or classic: the same libraries, checked against
    their manifest first; the archs move from the version into the label, variant.json is
    added, and a native package's manifest takes the new version. (A release built per arch by
    cibuildwheel publishes both: pip's per-key indexes and uv's one index.)"""
    report = inspect_wheel(wheel)
    if report.disagreements or report.manifest is None:
        problems = (
            "; ".join(f"{d.file}: {d.message}" for d in report.disagreements) or "no manifest"
        )
        raise BuildError(
            f"{wheel.name} does not match what it records ({problems}): no variant made of it"
        )
    if report.variant is not None:
        raise BuildError(f"{wheel.name} is a variant wheel already")
    manifest = report.manifest
    sass, ptx = tuple(manifest.sass_archs), tuple(manifest.ptx_archs)
    planned = PlannedWheel(sass, bool(ptx), label=variant_label(WheelArchs(sass, ptx)))
    version = parse_filename(wheel.name)[1]
    tags = {a.tag for a in sass} | {f"ptx{a.number}" for a in ptx}
    kept = [part for part in (version.local or "").split(".") if part not in tags]
    if not any(part.startswith("cu") for part in kept) or len(kept) == len(
        (version.local or "").split(".")
    ):
        raise BuildError(
            f"{wheel.name}: its version does not name its CUDA and archs (+cu130.sm90): not a per-arch wheel"
        )
    new_version = f"{version.public}+{'.'.join(kept)}"
    cuda = manifest.cuda_version if isinstance(manifest, Manifest) else manifest.cuda
    files = {}
    if isinstance(manifest, Manifest):  # a native package's own manifest names its version
        with zipfile.ZipFile(wheel) as zf:
            (path,) = package_manifests(zf.namelist())
        files[path] = replace(manifest, package_version=new_version).to_json()
    return rewrite_wheel(
        wheel,
        out_dir,
        version=new_version,
        dist_info_files={VARIANT_JSON: variant_json(planned, cuda)},
        variant_label=planned.label,
        files=files,
    )


def variant_json(planned: PlannedWheel, cuda_version: str) -> str:
    """The ``variant.json`` of a labelled wheel: its own entry, from its archs and the CUDA
    version of the nvcc that built it."""
    archs = WheelArchs(planned.archs, planned.ptx_archs)
    entry = properties(archs, cuda_lower_bound(Version(cuda_version), archs))
    return json.dumps(variants_document({planned.label: entry}), indent=2) + "\n"
