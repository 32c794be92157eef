"""The farm's plan: the jobs that build every recipe for every (torch, CUDA, Python, arch)
asked for, each keyed by everything that decides its output, so that a job whose key is
already in the index is left out (a new torch release or one new recipe costs only the new
jobs). Pure (``plan_jobs``) but for ``source_facts``, which reads local sources.

One job makes one wheel: the wheel of one arch (``sm_90``: published with its PEP 825 variant
twin, which uv matches to the GPU, and in pip's per-key index), or the plain wheel (every arch
and PTX of the newest: what pip gets from the index of every wheel). A classic project's
wheels are per Python and per torch minor release; a native project's are abi3 and load in
every torch from its stable-ABI target on, so it is built once per (CUDA, arch), with the
oldest torch and Python asked for.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from packaging.version import Version

from prebuild.runtime.arch import Arch
from prebuild.tool import arch_support
from prebuild.tool.builder.project import IGNORED, is_native
from prebuild.tool.farm.recipes import CLASSIC, NATIVE, PATH, Recipe, RecipeError

PLAIN = "plain"  # the ``wheel`` of the job making the plain wheel


@dataclass(frozen=True)
class Farm:
    """What the farm is asked to cover (``prebuild farm plan/build`` options, parsed)."""

    torch: tuple[str, ...]  # minor releases: "2.14"
    cuda: tuple[str, ...]  # "13.0": versions of the support table
    python: tuple[str, ...]  # "3.11"
    archs: tuple[Arch, ...] = ()  # empty: every arch of each CUDA version in the support table
    prebuild: str = ""  # prebuild's (public) version: a new one may build differently

    def __post_init__(self) -> None:
        for name in ("torch", "cuda", "python"):
            if not getattr(self, name):
                raise ValueError(f"the farm needs at least one {name} version")
        known = {r.version for r in arch_support.CUDA_RELEASES}
        unknown = [c for c in self.cuda if c not in known]
        if unknown:
            raise ValueError(
                f"no CUDA {', '.join(unknown)} in the support table; it has {', '.join(sorted(known))}"
            )
        minors = [arch_support.torch_minor(t) for t in self.torch]  # ValueError names a bad one
        object.__setattr__(self, "torch", tuple(dict.fromkeys(minors)))

    def archs_for(self, cuda: str) -> tuple[Arch, ...]:
        (release,) = [r for r in arch_support.CUDA_RELEASES if r.version == cuda]
        return tuple(a for a in release.archs if not self.archs or a in self.archs)


@dataclass(frozen=True)
class SourceFacts:
    """What reading a recipe's source says before anything is built."""

    source_id: str  # the source's identity: its text when pinned remotely, else a content hash
    kind: str  # CLASSIC or NATIVE


@dataclass(frozen=True)
class Job:
    project: str
    source: str
    source_id: str
    kind: str
    torch: str  # the build's torch minor release
    cuda: str
    python: str  # the build's Python ("3.11")
    wheel: str  # "sm_90", or PLAIN
    archs: tuple[str, ...]  # the wheel's SASS archs
    ptx: bool  # PTX of the newest of them
    env: tuple[tuple[str, str], ...]
    build_requires: tuple[str, ...]
    prebuild: str
    first_use: tuple[str, ...] = ()  # the recipe's --first-use code

    @property
    def python_tag(self) -> str:
        """``cp311``, or ``abi3`` for a native project (one wheel for every Python)."""
        return "abi3" if self.kind == NATIVE else "cp" + self.python.replace(".", "")

    @property
    def torch_tag(self) -> str:
        """``pt214``, or ``""`` for a native project (every torch from its target on)."""
        return "" if self.kind == NATIVE else arch_support.torch_tag(self.torch)

    @property
    def cuda_tag(self) -> str:
        return "cu" + self.cuda.replace(".", "")

    def decides(self) -> dict:
        """Everything that decides the job's output, and nothing else: a native project's
        build torch and Python do not (its wheel is abi3 for the stable ABI)."""
        facts = asdict(self)
        del facts["source"]  # where it was read from: source_id says what it is
        if not self.first_use:  # the keys of jobs planned before recipes could give it
            del facts["first_use"]
        facts.update(python=self.python_tag, torch=self.torch_tag or "stable-abi")
        return facts

    @property
    def key(self) -> str:
        text = json.dumps(self.decides(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def arch_free_key(self) -> str:
        """The key of what decides the output but the archs: jobs sharing it build the same
        wheel where the project holds no GPU code (a host wheel serves every arch)."""
        facts = {k: v for k, v in self.decides().items() if k not in ("wheel", "archs", "ptx")}
        text = json.dumps(facts, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def torch_python_free_key(self) -> str:
        """The key of what decides the output but the torch and the Python: jobs sharing it
        build the same wheel where the project's libraries use PyTorch's stable ABI alone
        (from its target on) or nothing of torch's, and nothing of Python's C API."""
        facts = {k: v for k, v in self.decides().items() if k not in ("torch", "python")}
        text = json.dumps(facts, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def title(self) -> str:
        """``gsplat pt214 cu130 cp311 sm_90``: the job in a line."""
        parts = [self.project, self.torch_tag, self.cuda_tag, self.python_tag, self.wheel]
        return " ".join(p for p in parts if p)

    def wheel_args(self) -> list[str]:
        """The ``prebuild wheel`` options of this job."""
        args = ["--arch", ",".join(self.archs)]
        for code in self.first_use:
            args += ["--first-use", code]
        if self.wheel == PLAIN:
            return [*args, "--plain"]
        return [*args, "--ptx"] if self.ptx else args

    def to_dict(self) -> dict:
        """The job as a CI matrix entry (and in the index's ledger): its key and fields."""
        data = asdict(self)
        data["env"] = dict(self.env)
        data["build_requires"] = list(self.build_requires)
        data["archs"] = list(self.archs)
        data["first_use"] = list(self.first_use)
        return {"key": self.key, "title": self.title, **data}

    @classmethod
    def from_dict(cls, data: dict) -> Job:
        fields = {k: v for k, v in data.items() if k not in ("key", "title")}
        fields["env"] = tuple(sorted(fields["env"].items()))
        fields["build_requires"] = tuple(fields["build_requires"])
        fields["archs"] = tuple(fields["archs"])
        fields["first_use"] = tuple(fields.get("first_use", ()))  # a ledger written before it
        return cls(**fields)


@dataclass(frozen=True)
class Plan:
    jobs: list[Job]  # to build
    done: list[Job]  # left out: their key is in the index already
    notes: list[str]  # recipes or combinations that make no job, and why


def _python_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def plan_jobs(
    recipes: list[Recipe],
    facts: dict[str, SourceFacts],
    farm: Farm,
    built: frozenset[str] | set[str] = frozenset(),
) -> Plan:
    """Pure: the jobs for ``recipes`` (``facts`` by recipe name) over ``farm``, minus those
    whose key is in ``built``."""
    jobs: list[Job] = []
    notes: list[str] = []
    oldest_torch = min(farm.torch, key=Version)
    oldest_python = min(farm.python, key=_python_key)
    for recipe in recipes:
        fact = facts[recipe.name]
        if fact.kind == NATIVE:
            envs = [(oldest_torch, oldest_python)]
        else:
            pythons = [p for p in farm.python if not recipe.pythons or p in recipe.pythons]
            if not pythons:
                notes.append(
                    f"{recipe.name}: none of the farm's Pythons ({', '.join(farm.python)}) is in "
                    f"its recipe's pythons ({', '.join(recipe.pythons)})"
                )
            envs = [(t, p) for t in farm.torch for p in pythons]
        for cuda in farm.cuda:
            archs = [a for a in farm.archs_for(cuda) if not recipe.archs or a in recipe.archs]
            if not archs:
                notes.append(
                    f"{recipe.name}: no arch of its recipe is among CUDA {cuda}'s asked for"
                )
                continue
            for torch, python in envs:
                common = dict(
                    project=recipe.name,
                    source=recipe.source,
                    source_id=fact.source_id,
                    kind=fact.kind,
                    torch=torch,
                    cuda=cuda,
                    python=python,
                    env=recipe.env,
                    build_requires=recipe.build_requires,
                    prebuild=farm.prebuild,
                    first_use=recipe.first_use,
                )
                for arch in archs:
                    ptx = recipe.ptx and arch == max(archs)
                    jobs.append(Job(wheel=arch.sm, archs=(arch.sm,), ptx=ptx, **common))
                # the plain wheel always carries PTX of the newest arch: pip's pick for any GPU
                jobs.append(Job(wheel=PLAIN, archs=tuple(a.sm for a in archs), ptx=True, **common))
    return Plan([j for j in jobs if j.key not in built], [j for j in jobs if j.key in built], notes)


def tree_digest(root: Path) -> str:
    """The sha256 of a source directory's files (names and contents), leaving out what a
    copy of it leaves out (VCS data, build outputs: ``project.IGNORED``)."""
    from fnmatch import fnmatch

    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if any(fnmatch(part, pattern) for part in relative.parts for pattern in IGNORED):
            continue
        if path.is_file():
            digest.update(str(relative).encode() + b"\0")
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def source_facts(recipe: Recipe) -> SourceFacts:
    """A recipe's source identity and kind. A local directory or archive is hashed (a native
    directory is known from its pyproject.toml); a remote source is pinned by its text, and
    is classic unless the recipe says ``kind = "native"``."""
    if recipe.source_kind == PATH:
        path = Path(recipe.source)
        if path.is_dir():
            kind = recipe.kind or (NATIVE if is_native(path) else CLASSIC)
            return SourceFacts(f"tree:sha256:{tree_digest(path)}", kind)
        if path.is_file():
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            return SourceFacts(f"file:sha256:{digest}", recipe.kind or CLASSIC)
        raise RecipeError(f"{recipe.where}: key 'source': {path} does not exist")
    return SourceFacts(recipe.source, recipe.kind or CLASSIC)


def matrix(jobs: list[Job], group: bool = False) -> dict:
    """Pure: the jobs as a GitHub Actions matrix. Each entry's ``keys`` is what ``prebuild farm
    build --only`` takes. ``group``: one entry per project x torch x CUDA x Python (its archs'
    wheels and its plain wheel on one runner, sharing the compile cache's host objects), which
    keeps a large farm under GitHub's 256 jobs per matrix."""
    if not group:
        return {"include": [{"keys": j.key, **j.to_dict()} for j in jobs]}
    groups: dict[tuple, list[Job]] = {}
    for job in jobs:
        groups.setdefault((job.project, job.torch, job.cuda, job.python), []).append(job)
    include = []
    for (project, torch, cuda, python), members in groups.items():
        first = members[0]
        include.append(
            {
                "keys": ",".join(j.key for j in members),
                "title": " ".join(p for p in first.title.split()[:-1]),
                "project": project,
                "torch": torch,
                "cuda": cuda,
                "python": python,
                "wheels": ",".join(j.wheel for j in members),
            }
        )
    return {"include": include}
