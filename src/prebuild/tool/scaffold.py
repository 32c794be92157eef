"""``prebuild new NAME``: a native project with one example op, ready to build and test.

The project (templates/native/) has the op's CPU, CUDA and simt bodies sharing their math, a
Python wrapper with ``torch.library`` autograd and fake kernels, tests (against plain PyTorch,
``opcheck``, ``torch.compile``, the CUDA body run on the CPU), a ``prebuild selftest`` case
(declared by ``[tool.prebuild] selftest``) and a README with its two commands.
``project_names`` and ``render`` are pure; ``create`` writes the files.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path
from string import Template

from packaging.utils import canonicalize_name

from prebuild.tool.builder.config import MIN_TORCH_TARGET

TEMPLATES = Path(__file__).resolve().parent / "templates" / "native"
PACKAGE_PLACEHOLDER = "__package__"  # a directory name in the templates
RENAMED = {"gitignore": ".gitignore"}  # kept out of the way of prebuild's own git checkout
TEMPLATE_SUFFIX = ".tmpl"  # on Python templates: not Python (nor byte-compiled) until rendered


class ScaffoldError(ValueError):
    """The name or the destination cannot be used."""


@dataclass(frozen=True)
class ProjectNames:
    name: str  # the distribution, as given ("my-kernels")
    name_wheel: str  # as in wheel file names ("my_kernels")
    package: str  # the import package ("my_kernels")
    namespace: str  # torch.ops namespace ("my_kernels")
    torch_target: str


_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9._-]*[A-Za-z0-9]$|^[A-Za-z]$")


def project_names(name: str) -> ProjectNames:
    """Pure: the names a project called ``name`` uses; ScaffoldError for a name that is not
    a valid distribution name or whose package name would not be importable."""
    if not _NAME.match(name):
        raise ScaffoldError(
            f"{name!r} is not a project name: use letters, digits, '-', '_' or '.', "
            "starting with a letter (e.g. my-kernels)"
        )
    package = str(canonicalize_name(name)).replace("-", "_").replace(".", "_")
    if not package.isidentifier():
        raise ScaffoldError(
            f"{name!r} gives the package name {package!r}, which Python cannot import"
        )
    if package in ("prebuild", "torch"):
        raise ScaffoldError(f"{name!r} would shadow the {package} package: choose another name")
    return ProjectNames(name, package, package, package, str(MIN_TORCH_TARGET))


def template_files() -> list[Path]:
    return sorted(p for p in TEMPLATES.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def render(relative: Path, text: str, names: ProjectNames) -> tuple[Path, str]:
    """Pure: one template file's path in the new project and its content."""
    parts = [
        names.package if part == PACKAGE_PLACEHOLDER else RENAMED.get(part, part)
        for part in relative.parts
    ]
    parts[-1] = parts[-1].removesuffix(TEMPLATE_SUFFIX)
    try:
        content = Template(text).substitute(asdict(names))
    except (KeyError, ValueError) as exc:  # a template bug, not the user's
        raise RuntimeError(f"template {relative}: bad placeholder {exc}") from exc
    return Path(*parts), content


def create(dest: Path, name: str) -> list[Path]:
    """Write the project into ``dest`` (absent or empty); returns the files written."""
    names = project_names(name)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise ScaffoldError(f"{dest} exists and is not empty: choose another directory")
    rendered = [
        render(p.relative_to(TEMPLATES), p.read_text(encoding="utf-8"), names)
        for p in template_files()
    ]
    written = []
    for relative, content in rendered:
        path = dest / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
        written.append(path)
    return written
