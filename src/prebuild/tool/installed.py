"""What prebuild built is installed here: prebuild's own package (its manifest, its libraries
checked, the variant wheel it came from) and every other installed distribution carrying a
prebuild manifest, another project's classic build (``.dist-info/prebuild.json``) or a native
project's (its package's ``_manifest.json``), each with its libraries checked (sha256 and archs).

Nothing here loads a library: ``prebuild doctor`` test-loads them in child processes
(``prebuild.tool.doctor.load_checks``), ``prebuild selftest`` runs their cases.
"""

from __future__ import annotations

import importlib.machinery
import importlib.metadata
import importlib.util
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import canonicalize_name

from prebuild.runtime.manifest import (
    MANIFEST_NAME,
    PROJECT_MANIFEST_NAME,
    Manifest,
    ManifestError,
    ProjectManifest,
    read_manifest,
    verify_libraries,
)


def _own_package_dir() -> Path:
    import prebuild

    return Path(prebuild.__file__).resolve().parent


def installed_package() -> tuple[Path, Manifest | None, str]:
    """The prebuild package directory, its manifest, and what is wrong with it (or "")."""
    directory = _own_package_dir()
    try:
        manifest = read_manifest(directory)
    except ManifestError as exc:
        return directory, None, str(exc)
    try:
        verify_libraries(directory, manifest)
    except ManifestError as exc:
        return directory, manifest, str(exc)
    return directory, manifest, ""


def own_variant(manifest: Manifest | None) -> tuple[str | None, str]:
    """The label of the PEP 825 variant wheel prebuild was installed from (None: another kind
    of install), and how its variant.json disagrees with the manifest ("" when it agrees)."""
    from prebuild.tool.inspection import (
        InspectionError,
        installed_variant_json,
        variant_disagreements,
    )

    if manifest is not None and not isinstance(manifest, Manifest):
        raise TypeError(f"own_variant takes a Manifest or None, got {type(manifest).__name__}")
    try:
        document = installed_variant_json(importlib.metadata.distribution("prebuild"))
    except importlib.metadata.PackageNotFoundError:
        return None, ""
    except InspectionError as exc:
        return None, str(exc)
    if document is None:
        return None, ""
    label = next(iter(document.get("variants", {})), None)
    problems = variant_disagreements(document, None, manifest) if manifest is not None else []
    return label, "; ".join(f"{d.file}: {d.message}" for d in problems)


@dataclass(frozen=True)
class InstalledProject:
    """An installed distribution whose wheel prebuild built: another project's
    (``.dist-info/prebuild.json``, a ``ProjectManifest``) or a native project's (its package's
    ``_manifest.json``, a ``Manifest``)."""

    name: str
    version: str
    manifest: ProjectManifest | Manifest | None
    problem: str = ""  # the manifest unreadable, or libraries missing or altered; "" when fine
    modules: tuple[str, ...] = ()  # its extension modules (a native project: its loader)
    load_error: str | None = None  # None: not checked; "": imported fine
    variant: str | None = None  # a PEP 825 variant wheel's label
    package_dir: Path | None = None  # a native project's: where its _manifest.json is
    # the C and C++ runtime versions its libraries need together ({"GLIBC": "2.36"})
    runtime_needs: Mapping[str, str] = field(default_factory=dict, hash=False)

    @property
    def title(self) -> str:
        return f"{self.name} {self.version}" + (
            f" (variant {self.variant})" if self.variant else ""
        )


def extension_module(file: str) -> str | None:
    """Pure: the module a library path inside a wheel would be (``pkg/_C.cpython-311-x86_64-linux-gnu.so``
    -> ``pkg._C``); None when it cannot be one (``pkg/lib/libfoo.so.1``). Whether it is one,
    its ``PyInit_`` symbol says (``installed_projects``)."""
    if not isinstance(file, str):
        raise TypeError(f"extension_module takes a path string, got {file!r}")
    for suffix in sorted(importlib.machinery.EXTENSION_SUFFIXES, key=len, reverse=True):
        if file.endswith(suffix):
            parts = file[: -len(suffix)].split("/")
            return ".".join(parts) if all(p.isidentifier() for p in parts) else None
    return None


def installed_projects() -> list[InstalledProject]:
    """Every installed distribution carrying a prebuild manifest, its libraries checked
    (sha256 and archs, by ``prebuild.tool.inspection``), none of them loaded."""
    from prebuild.tool.inspection import InspectionError, exports_symbol, inspect_distribution

    found: dict[str, InstalledProject] = {}
    for dist in importlib.metadata.distributions():
        name = str(dist.metadata["Name"] or "")
        if not name or canonicalize_name(name) in found:
            continue  # shadowed by the same name earlier on sys.path
        if dist.read_text(PROJECT_MANIFEST_NAME) is None:
            native = installed_native_project(dist)
            if native is not None:
                found[canonicalize_name(name)] = native
            continue
        try:
            report = inspect_distribution(name)
        except (ManifestError, InspectionError, OSError) as exc:
            found[canonicalize_name(name)] = InstalledProject(name, dist.version, None, str(exc))
            continue
        manifest = report.manifest
        assert isinstance(manifest, ProjectManifest)
        problem = "; ".join(f"{d.file}: {d.message}" for d in report.disagreements)
        modules: tuple[str, ...] = ()
        if not problem:  # every library is there, as built
            modules = tuple(
                m
                for lib in manifest.libraries
                if (m := extension_module(lib.file))
                and exports_symbol(
                    Path(str(dist.locate_file(lib.file))).read_bytes(),
                    f"PyInit_{m.rsplit('.', 1)[-1]}",
                )
            )
        found[canonicalize_name(name)] = InstalledProject(
            name,
            dist.version,
            manifest,
            problem,
            modules,
            None,
            report.variant_label,
            runtime_needs=report.runtime,
        )
    return sorted(found.values(), key=lambda p: canonicalize_name(p.name))


def _editable(dist) -> bool:
    """Installed with ``pip install -e`` (PEP 610's ``direct_url.json``)."""
    try:
        return bool(
            json.loads(dist.read_text("direct_url.json") or "{}")
            .get("dir_info", {})
            .get("editable")
        )
    except (ValueError, AttributeError):
        return False


def native_package_dir(dist) -> Path | None:
    """The directory holding a native project's ``_manifest.json``: the one its files list (an
    installed wheel) or, for an editable install (its RECORD lists only what puts its source on
    sys.path), the one under its top-level packages (``top_level.txt``) as sys.path finds them.
    None when there is not exactly one."""
    from prebuild.tool.inspection import package_manifests

    manifests = package_manifests([str(f) for f in dist.files or ()])
    if manifests or not _editable(dist):
        return Path(str(dist.locate_file(manifests[0]))).parent if len(manifests) == 1 else None
    found: list[Path] = []
    for top in (dist.read_text("top_level.txt") or "").split():
        try:
            spec = (
                importlib.util.find_spec(top) if top.isidentifier() else None
            )  # a top-level name: imports nothing
        except (ImportError, ValueError):
            continue
        for location in (spec.submodule_search_locations or []) if spec else []:
            found += [path.parent for path in Path(location).rglob(MANIFEST_NAME)]
    return found[0] if len(set(found)) == 1 else None


def installed_native_project(dist) -> InstalledProject | None:
    """A native project's distribution (a package ``_manifest.json`` among its files, or in
    its editable source) other than this prebuild's own package (the doctor's "install" rows),
    its libraries checked (sha256 and archs); None for any other distribution."""
    from prebuild.tool.inspection import (
        InspectionError,
        inspect_directory,
        installed_variant_json,
        with_variant,
    )

    directory = native_package_dir(dist)
    if directory is None:
        return None
    if directory.resolve() == _own_package_dir():
        return None  # this prebuild's own kernels: installed_package's
    name = str(dist.metadata["Name"])
    try:
        report = with_variant(inspect_directory(directory), installed_variant_json(dist), None)
    except (ManifestError, InspectionError, OSError) as exc:
        return InstalledProject(name, dist.version, None, str(exc))
    manifest = report.manifest
    assert isinstance(manifest, Manifest)
    problem = "; ".join(f"{d.file}: {d.message}" for d in report.disagreements)
    runtime = f"{manifest.package}._prebuild_runtime"
    return InstalledProject(
        name,
        dist.version,
        manifest,
        problem,
        (runtime,),
        None,
        report.variant_label,
        directory,
        report.runtime,
    )
