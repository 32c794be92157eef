"""Recipes: what the farm builds. A recipe file is TOML with one ``[[project]]`` table per
project; a folder of such files (``*.toml``) is a recipe set. Parsing is pure
(``parse_recipes`` over the text); ``load_recipes`` reads the files. Every error names the
file and the key (``RecipeError``).

    [[project]]
    name = "fused-ssim"                 # the distribution the wheels are of (required)
    source = "git+https://github.com/rahul-goel/fused-ssim@<commit>"   # (required)
    kind = "classic"                    # or "native"; default: from the source (below)
    env = { FORCE_CUDA = "1" }          # what its build needs in the environment
    build-requires = ["jaxtyping"]      # installed into the build environment first
    pythons = ["3.10", "3.11"]          # classic wheels are per Python; native ones abi3
    archs = ["sm_80", "sm_90"]          # only these of the farm's archs
    ptx = true                          # PTX in the newest arch's wheel (default; the plain
                                        # wheel always has it)
    first-use = ["from colbert.modeling.colbert import ColBERT; ColBERT.try_load_torch_extensions(False)"]
                                        # prebuild wheel --first-use: the calls its users' code
                                        # makes that compile at first use

    [project.smoke]
    import = "fused_ssim"               # default: the name, "-" -> "_"
    gpu = "import fused_ssim; ..."      # run only where a GPU the wheel fits is visible

One file of a set may also say what the set is built for, the defaults of ``prebuild farm``'s
options (a scheduled CI job adds new torch releases here):

    [farm]
    torch = ["2.13", "2.14"]
    cuda = ["12.8", "13.0"]
    python = ["3.10", "3.11", "3.12", "3.13"]
    archs = ["sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120"]

``source`` is a pinned requirement (``gsplat==1.5.3``), a git URL at a fixed revision
(``git+https://...@v1.5.3``), an sdist URL, or a local directory or sdist (relative to the
recipe file). A job's key must decide its output, so a source that can change under the same
text (an unpinned requirement, a git URL without a revision) is refused.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from prebuild.runtime.arch import Arch, ArchError, parse_arch_list
from prebuild.tool.builder.project import CLASSIC, NATIVE, SDIST_SUFFIXES, git_source
from prebuild.tool.jit_sites import given_trigger

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 (tomli: the build extra's)
    import tomli as tomllib


# What a source string is (``source_kind``).
REQUIREMENT, GIT, URL, PATH = "requirement", "git", "url", "path"

_KEYS = {
    "name",
    "source",
    "kind",
    "env",
    "build-requires",
    "pythons",
    "archs",
    "ptx",
    "first-use",
    "smoke",
}
_SMOKE_KEYS = {"import", "gpu"}
_PYTHON = re.compile(r"3\.(\d+)")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class RecipeError(ValueError):
    """A recipe cannot be used; the message names the file and the key."""


@dataclass(frozen=True)
class Smoke:
    """How a built wheel is tried: imported (always, with no GPU visible), and ``gpu`` run where
    a GPU the wheel fits is visible."""

    import_name: str
    gpu: str | None = None


@dataclass(frozen=True)
class Recipe:
    name: str  # canonical distribution name
    source: str  # as written; a local path made absolute
    source_kind: str  # REQUIREMENT, GIT, URL or PATH
    kind: str | None  # CLASSIC, NATIVE, or None: decided from the source (``plan.project_kinds``)
    file: Path
    env: tuple[tuple[str, str], ...] = ()
    build_requires: tuple[str, ...] = ()
    pythons: tuple[str, ...] = ()  # empty: the farm's
    archs: tuple[Arch, ...] = ()  # empty: the farm's
    ptx: bool = True
    smoke: Smoke = field(default_factory=lambda: Smoke(""))
    first_use: tuple[str, ...] = ()  # prebuild wheel --first-use, each

    @property
    def where(self) -> str:
        return f"{self.file}: project {self.name!r}"


def source_kind(source: str) -> str:
    """Pure: REQUIREMENT, GIT, URL or PATH for a source as written."""
    if git_source(source) is not None:
        return GIT
    text = source.split(" @ ", 1)[1].strip() if " @ " in source else source
    if re.match(r"https?://", text):
        return URL
    if text.startswith((".", "/", "~")) or text.endswith(SDIST_SUFFIXES) or "/" in text:
        return PATH
    return REQUIREMENT


def _check_pinned(source: str, kind: str) -> str | None:
    """Why ``source`` does not name one fixed source, or None."""
    if kind == REQUIREMENT:
        try:
            req = Requirement(source)
        except InvalidRequirement as exc:
            return f"{source!r} is not a requirement, URL or path: {exc}"
        pins = [s for s in req.specifier if s.operator in ("==", "===") and "*" not in s.version]
        if len(pins) != 1 or len(req.specifier) != 1:
            return f"{source!r} names no single version: pin it ({req.name}==X.Y.Z)"
    if kind == GIT:
        _, revision, _ = git_source(source)
        if revision is None:
            return f"{source!r} names no revision: add @TAG or @COMMIT (git+https://...@v1.0.0)"
    if kind == URL and not source.split("#", 1)[0].endswith(SDIST_SUFFIXES):
        return f"{source!r} is not a source archive ({', '.join(SDIST_SUFFIXES)})"
    return None


def _python(value: object, where: str) -> str:
    match = _PYTHON.fullmatch(str(value)) if isinstance(value, str) else None
    if not match or int(match.group(1)) < 10:
        raise RecipeError(f'{where}: {value!r} is not a Python of 3.10 or newer (e.g. "3.11")')
    return value


def _string_list(value: object, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise RecipeError(f"{where}: expected a list of strings, got {value!r}")
    return tuple(v.strip() for v in value)


def parse_project(table: object, file: Path, index: int) -> Recipe:
    """Pure: one ``[[project]]`` table (the ``index``-th of ``file``) as a Recipe."""
    where = f"{file}: project[{index}]"
    if not isinstance(table, dict):
        raise RecipeError(f"{where}: expected a table ([[project]]), got {table!r}")
    unknown = sorted(set(table) - _KEYS)
    if unknown:
        raise RecipeError(
            f"{where}: unknown key {', '.join(map(repr, unknown))}; a project takes "
            f"{', '.join(sorted(_KEYS))}"
        )
    for key in ("name", "source"):
        if not isinstance(table.get(key), str) or not table[key].strip():
            raise RecipeError(f"{where}: key {key!r} is required (a non-empty string)")
    name = str(canonicalize_name(table["name"].strip()))
    where = f"{file}: project {name!r}"
    source = table["source"].strip()
    kind_of_source = source_kind(source)
    if kind_of_source == PATH:
        path = Path(source).expanduser()
        source = str(path if path.is_absolute() else (file.parent / path).resolve())
    problem = _check_pinned(source, kind_of_source)
    if problem:
        raise RecipeError(f"{where}: key 'source': {problem}")
    kind = table.get("kind")
    if kind not in (None, CLASSIC, NATIVE):
        raise RecipeError(f"{where}: key 'kind': {kind!r} is neither {CLASSIC!r} nor {NATIVE!r}")
    env = table.get("env", {})
    if not isinstance(env, dict):
        raise RecipeError(f"{where}: key 'env': expected a table of strings, got {env!r}")
    for key, value in env.items():
        if not _ENV_NAME.fullmatch(key) or not isinstance(value, (str, int, bool)):
            raise RecipeError(f"{where}: key 'env.{key}': expected NAME = \"value\", got {value!r}")
    env_pairs = tuple(
        sorted((k, str(v).lower() if isinstance(v, bool) else str(v)) for k, v in env.items())
    )
    build_requires = _checked_strings(table, "build-requires", where, _requirement)
    pythons = tuple(
        _python(v, f"{where}: key 'pythons'")
        for v in _string_list(table.get("pythons", []), f"{where}: key 'pythons'")
    )
    if pythons and kind == NATIVE:
        raise RecipeError(
            f"{where}: key 'pythons': a native project's wheels are abi3 (one for every Python)"
        )
    try:
        archs = parse_arch_list(_string_list(table.get("archs", []), f"{where}: key 'archs'"))
    except ArchError as exc:
        raise RecipeError(f"{where}: key 'archs': {exc}") from None
    ptx = table.get("ptx", True)
    if not isinstance(ptx, bool):
        raise RecipeError(f"{where}: key 'ptx': expected true or false, got {ptx!r}")
    first_use = _checked_strings(table, "first-use", where, given_trigger)
    smoke = table.get("smoke", {})
    if not isinstance(smoke, dict) or set(smoke) - _SMOKE_KEYS:
        raise RecipeError(f"{where}: key 'smoke': a table of {', '.join(sorted(_SMOKE_KEYS))}")
    import_name = smoke.get("import", name.replace("-", "_"))
    if not isinstance(import_name, str) or not re.fullmatch(r"[A-Za-z_][\w.]*", import_name):
        raise RecipeError(f"{where}: key 'smoke.import': {import_name!r} is not a module name")
    gpu = smoke.get("gpu")
    if gpu is not None and (not isinstance(gpu, str) or not gpu.strip()):
        raise RecipeError(f"{where}: key 'smoke.gpu': expected Python code, got {gpu!r}")
    return Recipe(
        name,
        source,
        kind_of_source,
        kind,
        file,
        env_pairs,
        build_requires,
        pythons,
        archs,
        ptx,
        Smoke(import_name, gpu),
        tuple(first_use),
    )


def _checked_strings(
    table: dict, key: str, where: str, check: Callable[[str], object]
) -> tuple[str, ...]:
    """The list of strings at ``key``, each given to ``check``, whose ValueError names what is
    wrong with it."""
    values = _string_list(table.get(key, []), f"{where}: key '{key}'")
    for value in values:
        try:
            check(value)
        except ValueError as exc:
            raise RecipeError(f"{where}: key '{key}': {exc}") from None
    return values


def _requirement(text: str) -> Requirement:
    try:
        return Requirement(text)
    except InvalidRequirement as exc:
        raise ValueError(f"{text!r}: {exc}") from None


@dataclass(frozen=True)
class FarmDefaults:
    """A recipe set's ``[farm]`` table: what it is built for when the command does not say."""

    file: Path
    torch: tuple[str, ...] = ()
    cuda: tuple[str, ...] = ()
    python: tuple[str, ...] = ()
    archs: tuple[Arch, ...] = ()


@dataclass(frozen=True)
class RecipeSet:
    recipes: list[Recipe]
    defaults: FarmDefaults | None = None


_FARM_KEYS = ("torch", "cuda", "python", "archs")


def parse_farm_table(table: object, file: Path) -> FarmDefaults:
    """Pure: a ``[farm]`` table."""
    where = f"{file}: [farm]"
    if not isinstance(table, dict):
        raise RecipeError(f"{where}: expected a table")
    unknown = sorted(set(table) - set(_FARM_KEYS))
    if unknown:
        raise RecipeError(
            f"{where}: unknown key {', '.join(map(repr, unknown))}; it takes {', '.join(_FARM_KEYS)}"
        )
    values = {k: _string_list(table.get(k, []), f"{where}: key {k!r}") for k in _FARM_KEYS}
    for version in values["python"]:
        _python(version, f"{where}: key 'python'")
    try:
        archs = parse_arch_list(values["archs"])
    except ArchError as exc:
        raise RecipeError(f"{where}: key 'archs': {exc}") from None
    return FarmDefaults(file, values["torch"], values["cuda"], values["python"], archs)


def parse_recipes(text: str, file: Path) -> RecipeSet:
    """Pure: the recipes (and the ``[farm]`` table, if any) of one file's text."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RecipeError(f"{file}: not valid TOML: {exc}") from None
    unknown = sorted(set(data) - {"project", "farm"})
    if unknown:
        raise RecipeError(
            f"{file}: unknown key {', '.join(map(repr, unknown))}: a recipe file holds [[project]] "
            "tables (and at most one [farm] table)"
        )
    defaults = parse_farm_table(data["farm"], file) if "farm" in data else None
    projects = data.get("project", [] if defaults else None)
    if not isinstance(projects, list) or (not projects and defaults is None):
        raise RecipeError(f"{file}: no [[project]] table: a recipe file holds one per project")
    return RecipeSet([parse_project(table, file, i) for i, table in enumerate(projects)], defaults)


def recipe_files(path: Path) -> list[Path]:
    """A recipe file, or the ``*.toml`` files of a folder (a recipe set), sorted."""
    if path.is_dir():
        files = sorted(p for p in path.glob("*.toml") if p.is_file())
        if not files:
            raise RecipeError(f"{path}: no recipe files (*.toml) in this folder")
        return files
    if not path.is_file():
        raise RecipeError(f"{path}: no such recipe file or folder")
    return [path]


def load_recipes(paths: list[Path]) -> RecipeSet:
    """Every recipe of the files and folders given; a project named twice, or two [farm]
    tables, is an error."""
    recipes: list[Recipe] = []
    seen: dict[str, Recipe] = {}
    defaults: FarmDefaults | None = None
    for path in paths:
        for file in recipe_files(path):
            try:
                text = file.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise RecipeError(f"{file}: cannot read it: {exc}") from None
            parsed = parse_recipes(text, file)
            if parsed.defaults is not None:
                if defaults is not None:
                    raise RecipeError(
                        f"{file}: a second [farm] table (the first is in {defaults.file})"
                    )
                defaults = parsed.defaults
            for recipe in parsed.recipes:
                if recipe.name in seen:
                    raise RecipeError(
                        f"{recipe.where}: named twice (also in {seen[recipe.name].file})"
                    )
                seen[recipe.name] = recipe
                recipes.append(recipe)
    if not recipes:
        raise RecipeError(f"no [[project]] in {', '.join(map(str, paths))}: nothing to build")
    return RecipeSet(recipes, defaults)
