"""``prebuild farm plan`` and ``prebuild farm build``: many projects (recipes) across torch x
CUDA x Python x GPU arch, into one index that pip and uv install from."""

from __future__ import annotations

import json
import os
from pathlib import Path

import typer
from rich.markup import escape

from prebuild.runtime.arch import Arch
from prebuild.tool.cli.common import (
    arch_option,
    count,
    err,
    fail,
    listed,
    missing_build_extra,
    out,
    reflow_help,
)

app = typer.Typer(
    name="farm",
    help="Build many projects (recipe files) for several torch, CUDA and Python versions and GPU "
    "archs into one index: `prebuild farm plan` lists the jobs, `prebuild farm build` runs them.",
    no_args_is_help=True,
    add_completion=False,
)

RECIPES_HELP = (
    "Recipe files (TOML, one \\[\\[project]] table per project) or folders of them (a recipe set): "
    "see docs/farm.md."
)


def _installed_torch() -> tuple[str | None, str | None]:
    """This environment's torch version and its CUDA version (None where absent)."""
    try:
        import torch
    except ImportError:
        return None, None
    return torch.__version__, torch.version.cuda


def _recipes(paths: list[Path]):
    from prebuild.tool.farm.recipes import RecipeError, load_recipes

    try:
        return load_recipes(paths)
    except RecipeError as exc:
        raise fail(str(exc)) from None


def _farm(recipe_set, torch, cuda, python, arch):
    """The Farm asked for: each option, else the recipe set's [farm] table, else this
    environment (its torch, that torch's CUDA, this Python; every arch of the support table)."""
    import sys

    from packaging.version import Version

    import prebuild
    from prebuild.tool.farm.plan import Farm

    defaults = recipe_set.defaults
    torches = listed(torch) or (defaults.torch if defaults else ())
    cudas = listed(cuda) or (defaults.cuda if defaults else ())
    pythons = listed(python) or (defaults.python if defaults else ())
    archs = tuple(arch or ()) or (defaults.archs if defaults else ())
    if not torches or not cudas:
        installed, installed_cuda = _installed_torch()
        if not torches and installed:
            torches = (installed,)
        if not cudas and installed_cuda:
            cudas = (".".join(installed_cuda.split(".")[:2]),)
    if not torches:
        raise fail("no torch in this environment: say which with --torch (e.g. --torch 2.14)")
    if not cudas:
        raise fail(
            "this environment's torch is a CPU build: say which CUDA with --cuda (e.g. --cuda 13.0)"
        )
    pythons = pythons or (f"{sys.version_info[0]}.{sys.version_info[1]}",)
    try:
        return Farm(torches, cudas, pythons, archs, Version(prebuild.__version__).public)
    except ValueError as exc:
        raise fail(str(exc)) from None


def _plan(recipe_set, farm, built: set[str]):
    from prebuild.tool.farm.plan import plan_jobs, source_facts
    from prebuild.tool.farm.recipes import RecipeError

    try:
        facts = {r.name: source_facts(r) for r in recipe_set.recipes}
    except (RecipeError, OSError) as exc:
        raise fail(str(exc)) from None
    return plan_jobs(recipe_set.recipes, facts, farm, built)


def _ledger(where: str | None):
    from prebuild.tool.farm.ledger import Ledger, LedgerError, read_ledger

    if where is None:
        return Ledger()
    try:
        return read_ledger(where)
    except LedgerError as exc:
        raise fail(str(exc)) from None


TORCH_HELP = (
    "torch minor releases, comma-separated or repeated (default: this environment's torch)."
)
CUDA_HELP = (
    "CUDA versions of the support table (default: this environment's torch's). Each job needs nvcc "
    "of that version and torch's CUDA build for it."
)
PYTHON_HELP = (
    "Pythons for classic (per-Python) wheels, e.g. 3.10,3.11 (default: this one). Native projects "
    "are built once, abi3, with the oldest."
)
ARCH_HELP = "Only these GPU archs (default: every arch of the support table for each CUDA version)."


def plan(
    recipes: list[Path] = typer.Argument(
        ..., metavar="RECIPES...", help=RECIPES_HELP, show_default=False
    ),
    torch: list[str] | None = typer.Option(None, "--torch", metavar="VERSIONS", help=TORCH_HELP),
    cuda: list[str] | None = typer.Option(None, "--cuda", metavar="VERSIONS", help=CUDA_HELP),
    python: list[str] | None = typer.Option(None, "--python", metavar="VERSIONS", help=PYTHON_HELP),
    arch: list[Arch] | None = arch_option(ARCH_HELP),
    index: str | None = typer.Option(
        None,
        "--index",
        metavar="SITE",
        help="An index the farm built (a folder or its URL): the jobs it holds already are left out.",
    ),
    as_json: bool = typer.Option(
        False,
        "--json",
        help='Print the jobs as a GitHub Actions matrix ({"include": [...]}); each entry\'s keys '
        "go to prebuild farm build --only.",
    ),
    group: bool = typer.Option(
        False,
        "--group",
        help="With --json: one entry per project x torch x CUDA x Python (its wheels built on one "
        "runner), to stay under GitHub's 256 jobs per matrix.",
    ),
) -> None:
    """List the jobs that build every recipe for every torch, CUDA, Python and arch asked for.

    One job makes one wheel: an arch's (sm_90; published with its PEP 825 variant twin, which uv
    matches to the GPU) or the plain wheel (every arch and PTX of the newest, for pip). Each job
    is keyed by everything that decides its output (the recipe, its source's hash, torch, CUDA,
    Python, arch, prebuild's version); with --index, jobs whose key the index holds are left out,
    so a new torch release or one new recipe costs only the new jobs.

    Examples:

      prebuild farm plan recipes/ --torch 2.14 --cuda 13.0 --arch sm_80,sm_90

      prebuild farm plan recipes/ --torch 2.13,2.14 --python 3.10,3.11,3.12 --index site --json
    """
    try:
        from prebuild.tool.farm.plan import matrix

        recipe_set = _recipes(recipes)
        made = _plan(recipe_set, _farm(recipe_set, torch, cuda, python, arch), _ledger(index).built)
    except ModuleNotFoundError as exc:
        raise fail(missing_build_extra(exc)) from None
    if as_json:
        print(json.dumps(matrix(made.jobs, group), separators=(",", ":")))
    else:
        for job in made.jobs:
            out.print(f"  {job.key}  {escape(job.title)}", highlight=False, soft_wrap=True)
        out.print(
            f"[bold]{count(len(made.jobs), 'job')} to build[/]"
            + (f", {count(len(made.done), 'job')} in the index already" if made.done else ""),
            highlight=False,
        )
    for note in made.notes:
        err.print(f"[yellow]note:[/] {escape(note)}", highlight=False, soft_wrap=True)


class _Reporter:
    """One line when a job starts and one when it ends (a job's own output is in its log)."""

    def job_started(self, number: int, total: int, job) -> None:
        err.print(
            f"[{number}/{total}] {escape(job.title)}: building", highlight=False, soft_wrap=True
        )

    def job_finished(self, number: int, total: int, entry) -> None:
        from prebuild.tool.farm.ledger import BUILT

        title = escape(entry.job.title)
        if entry.status == BUILT:
            err.print(
                f"[{number}/{total}] {title}: [green]built[/] {escape(', '.join(entry.wheels))} in "
                f"{entry.seconds:.0f} s; {escape(entry.smoke)}",
                highlight=False,
                soft_wrap=True,
            )
        else:
            first = next((line for line in entry.error.splitlines() if line.strip()), "")
            err.print(
                f"[{number}/{total}] {title}: [red]failed[/]: {escape(first)} (log: {escape(entry.log)})",
                highlight=False,
                soft_wrap=True,
            )


def build(
    recipes: list[Path] = typer.Argument(
        ..., metavar="RECIPES...", help=RECIPES_HELP, show_default=False
    ),
    site: Path = typer.Option(
        ...,
        "--out",
        "-o",
        metavar="SITE",
        help="The index: made, or added to (the jobs it holds are not built again).",
        show_default=False,
    ),
    torch: list[str] | None = typer.Option(None, "--torch", metavar="VERSIONS", help=TORCH_HELP),
    cuda: list[str] | None = typer.Option(None, "--cuda", metavar="VERSIONS", help=CUDA_HELP),
    python: list[str] | None = typer.Option(None, "--python", metavar="VERSIONS", help=PYTHON_HELP),
    arch: list[Arch] | None = arch_option(ARCH_HELP),
    only: list[str] | None = typer.Option(
        None, "--only", metavar="KEYS", help="Only these jobs of the plan (a CI matrix job's key)."
    ),
    env: list[Path] | None = typer.Option(
        None,
        "--env",
        metavar="PYTHON",
        help="An interpreter with torch to build in, for the jobs it fits (repeatable). This one is "
        "always tried; other environments are made with uv under the work folder.",
    ),
    torch_index: str = typer.Option(
        "https://download.pytorch.org/whl/{cuda_tag}",
        "--torch-index",
        metavar="URL",
        help="Where the environments the farm makes get torch's CUDA build ({cuda_tag}: cu130); "
        "'' for the indexes pip is configured with.",
    ),
    work: Path | None = typer.Option(
        None,
        "--work",
        metavar="DIR",
        help="Environments, logs and the compile cache (default: ~/.cache/prebuild/farm).",
    ),
    cache: str | None = typer.Option(
        None,
        "--cache",
        metavar="SPEC",
        envvar="PREBUILD_CACHE",
        show_envvar=True,
        help="The compile cache every job uses (as prebuild wheel --cache; default: WORK/cache; "
        "'off' for none).",
    ),
) -> None:
    """Run the plan's jobs on this machine, then write the index of everything built so far.

    Each job is one `prebuild wheel` in the environment of its torch, CUDA and Python, with the
    recipe's variables, through one compile cache. Its wheel is installed into a throwaway venv
    and imported with no GPU visible (nothing may compile), and the recipe's GPU check runs where
    a GPU it fits is visible. Each finished job is kept at once (SITE/wheels, SITE/farm.json):
    a run that stops keeps what it finished, and running the same command again builds only what
    is missing. A failed job is recorded with its log; the others go on.

    SITE then holds pip's per-key indexes, the index of every wheel with PEP 825 variant wheels
    (uv picks the wheel of the GPU, pip the plain one), farm.json and farm.html (which project
    exists for which torch x CUDA x Python, and for which archs).

    Exit codes: 0 every job built (or none to do); 1 some failed; 2 bad input.

    Examples:

      prebuild farm build recipes/ --torch 2.14 --cuda 13.0 --arch sm_80,sm_90 --out site

      uv pip install --preview-features wheel-variants gsplat --index file://$PWD/site/simple
    """
    try:
        from prebuild.tool.farm.build import FarmError, default_work, run_farm
        from prebuild.tool.farm.envs import EnvError, Environments
        from prebuild.tool.index import SiteError
    except ModuleNotFoundError as exc:
        raise fail(missing_build_extra(exc)) from None
    import sys

    recipe_set = _recipes(recipes)
    farm_ = _farm(recipe_set, torch, cuda, python, arch)
    made = _plan(recipe_set, farm_, _ledger(str(site)).built if site.exists() else set())
    for note in made.notes:
        err.print(f"[yellow]note:[/] {escape(note)}", highlight=False, soft_wrap=True)
    jobs = made.jobs
    if only:
        wanted = set(listed(only))
        known = {j.key for j in made.jobs + made.done}
        unknown = sorted(wanted - known)
        if unknown:
            raise fail(
                f"no job of this plan has the key {', '.join(unknown)}: see prebuild farm plan"
            )
        jobs = [j for j in jobs if j.key in wanted]
    work = (work or default_work()).resolve()
    cache = cache or str(work / "cache")
    err.print(
        f"{count(len(jobs), 'job')} to build into {escape(str(site))}"
        + (f" ({count(len(made.done), 'job')} there already)" if made.done else "")
        + f"; logs in {escape(str(work / 'logs'))}",
        highlight=False,
        soft_wrap=True,
    )
    try:
        environments = Environments.probing(
            work / "envs", [Path(sys.executable), *(env or ())], torch_index
        )
        result = run_farm(
            jobs,
            {r.name: r for r in recipe_set.recipes},
            site,
            work,
            environments,
            _Reporter(),
            cache=None if cache == "off" else cache,
            gpu_archs=_gpu_archs(),
        )
    except (FarmError, SiteError, EnvError, OSError) as exc:
        raise fail(str(exc)) from None
    except KeyboardInterrupt:
        err.print(
            f"[bold red]interrupted:[/] the jobs that finished are kept in {escape(str(site))} "
            "(its ledger, farm.json); its index pages were not rewritten: run the same command "
            "again, it builds only what is missing",
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(130) from None
    out.print(
        f"[bold]{count(len(result.built), 'job')} built, {count(len(result.failed), 'job')} failed, "
        f"{result.seconds:.0f} s; the index: {escape(str(site))}/ (what it holds: "
        f"{escape(str(site))}/farm.html)[/]",
        highlight=False,
        soft_wrap=True,
    )
    if result.failed:
        raise typer.Exit(1)


def index(
    sources: list[str] = typer.Argument(
        ...,
        metavar="SOURCES...",
        help="Farm sites to merge: folders `prebuild farm build` wrote, or URLs of published ones.",
        show_default=False,
    ),
    site: Path = typer.Option(
        ...,
        "--out",
        "-o",
        metavar="SITE",
        help="The merged index (made, or added to).",
        show_default=False,
    ),
) -> None:
    """Merge farm sites into one index: every job they record and its wheel.

    How a CI run publishes: each matrix job builds its slice of the plan into a site of its own
    (`prebuild farm build --only KEYS --out part`), and the publishing job merges those with the
    index published before (its URL: its ledger and wheels are fetched), so the new index holds
    everything built so far. A job built in one source is never replaced by a failure in another.

    Examples:

      prebuild farm index parts/* --out site

      prebuild farm index https://OWNER.github.io/REPO/farm parts/* --out site
    """
    try:
        from prebuild.tool.farm.ledger import LedgerError
        from prebuild.tool.farm.site import merge_sites
        from prebuild.tool.index import SiteError
    except ModuleNotFoundError as exc:
        raise fail(missing_build_extra(exc)) from None
    try:
        ledger = merge_sites(sources, site)
    except (LedgerError, SiteError, OSError) as exc:
        raise fail(str(exc)) from None
    out.print(
        f"[bold]{count(len(ledger.built), 'job')} built, {count(len(ledger.wheels()), 'wheel')} in "
        f"{escape(str(site))}/ (what it holds: {escape(str(site))}/farm.html)[/]",
        highlight=False,
        soft_wrap=True,
    )


def _gpu_archs() -> tuple[str, ...]:
    """The visible GPUs' archs (NVML: no CUDA context), where the recipes' GPU checks run."""
    from prebuild.runtime.arch import arch_for_capability
    from prebuild.runtime.nvml import NvmlUnavailable, visible_gpus

    try:
        gpus = visible_gpus(dict(os.environ))
    except NvmlUnavailable:
        return ()
    return tuple(dict.fromkeys(arch_for_capability(g.capability).sm for g in gpus))


for _command in (plan, build, index):
    app.command(help=reflow_help(_command.__doc__))(_command)
