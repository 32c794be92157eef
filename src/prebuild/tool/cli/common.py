"""What every command of the ``prebuild`` command line shares: the two consoles, the one way to
fail with a message, the ``--arch`` option, and the reflowing of docstrings into --help texts."""

from __future__ import annotations

from inspect import cleandoc

import typer
from rich.console import Console
from rich.markup import escape

from prebuild.runtime.arch import Arch, ArchError, parse_arch_list

# No emoji codes: a compiler's "wrapper.cpp:100:74: error" would show rich's :100: emoji.
out = Console(emoji=False)  # results: what a script reads
err = Console(stderr=True, emoji=False)  # the story and the errors
# In a file or a CI log a line is never wrapped at 80 columns: it is read, grepped and copied.
for _console in (out, err):
    _console.soft_wrap = not _console.is_terminal


def count(n: int, what: str) -> str:
    """``1 wheel``, ``2 wheels``."""
    return f"{n} {what}{'' if n == 1 else 's'}"


def listed(values: list[str] | None) -> tuple[str, ...]:
    """Every value of a repeatable option whose values may be comma-separated
    (``--torch 2.13,2.14 --torch 2.15``), stripped, in order."""
    return tuple(v.strip() for item in values or () for v in item.split(",") if v.strip())


def fail(message: str, code: int = 2) -> typer.Exit:
    """``raise fail(...)``: the message on stderr, then exit ``code`` (2: bad input)."""
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False)
    return typer.Exit(code)


# What `pip install 'prebuild[build]'` brings (pyproject.toml): import name -> distribution.
BUILD_EXTRA_MODULES = {
    "build": "build",
    "ninja": "ninja",
    "setuptools": "setuptools",
    "wheel": "wheel",
    "filelock": "filelock",
}


def missing_build_extra(exc: ModuleNotFoundError) -> str:
    """What to install when a command that builds cannot import its build dependencies."""
    top = (exc.name or "").partition(".")[0]
    if top in BUILD_EXTRA_MODULES:
        return (
            f"building wheels needs the '{BUILD_EXTRA_MODULES[top]}' package, which is not "
            "installed. Install prebuild's build extra: pip install 'prebuild[build]'"
        )
    return f"building wheels needs the module '{exc.name}', which is not installed ({exc})"


def parse_arch_value(text: str) -> tuple[Arch, ...]:
    """One ``--arch`` value (``sm_80,9.0``) parsed; a bad one is a usage error, which click
    reports the same way in every command (the option named, exit 2)."""
    try:
        return parse_arch_list(text)
    except ArchError as exc:
        raise typer.BadParameter(str(exc)) from None


def merge_arch_values(values: list[tuple[Arch, ...]] | None) -> tuple[Arch, ...]:
    """Every ``--arch`` given (repeated, each comma-separated) as one sorted set."""
    return tuple(sorted({arch for archs in values or () for arch in archs}))


def arch_option(help: str, required: bool = False):
    """The ``--arch``/``-a`` option of every command that takes archs: each value parsed by
    ``parse_arch_value`` and all merged, so the command receives ``list[Arch]`` (``None`` when
    an optional one is not given) and never parses archs itself."""
    if not help:
        raise ValueError("every --arch option says what its archs are for")
    return typer.Option(
        ... if required else None,
        "--arch",
        "-a",
        metavar="ARCHS",
        help=help,
        parser=parse_arch_value,
        callback=merge_arch_values,
    )


def reflow_help(doc: str) -> str:
    """A command's docstring as its --help text: prose paragraphs become one line each (the
    terminal wraps them to its width); indented lines (examples) stay as written."""
    paragraphs = cleandoc(doc).split("\n\n")
    return "\n\n".join(p if p.startswith(" ") else " ".join(p.split()) for p in paragraphs)
