"""MkDocs hook (mkdocs.yml ``hooks:``): a ``<!-- prebuild-help COMMAND -->`` line in a page
becomes that command's ``--help`` (``<!-- prebuild-help -->``: the top-level one), rendered
from the CLI itself at build time, so the command pages cannot drift from the commands."""

from __future__ import annotations

import re

from mkdocs.exceptions import PluginError
from typer.testing import CliRunner

from prebuild.tool.cli import app

MARKER = re.compile(r"^<!-- prebuild-help(?: (?P<command>[a-z][a-z -]*[a-z]))? -->$", re.M)
# A fixed width and no colour: the pages are the same whatever terminal builds them.
HELP_ENV = {"COLUMNS": "100", "NO_COLOR": "1", "TERM": "dumb"}


def help_text(command: str | None) -> str:
    """``prebuild [COMMAND] --help`` as plain text, trailing blanks removed (``COMMAND`` may
    name a subcommand: ``farm plan``)."""
    if command is not None and not re.fullmatch(r"[a-z][a-z-]*( [a-z][a-z-]*)*", command):
        raise ValueError(f"not a command name: {command!r}")
    args = [*command.split(), "--help"] if command else ["--help"]
    result = CliRunner().invoke(app, args, prog_name="prebuild", env=HELP_ENV, color=False)
    if result.exit_code != 0:
        raise ValueError(
            f"`prebuild {' '.join(args)}` exited with {result.exit_code}: {result.output.strip()}"
        )
    lines = [line.rstrip() for line in result.output.splitlines()]
    return "\n".join(lines).strip("\n") + "\n"


def with_help(markdown: str) -> str:
    """``markdown`` with every marker replaced by a ``text`` block of that command's help."""
    return MARKER.sub(lambda m: f"```text\n{help_text(m['command'])}```", markdown)


def on_page_markdown(markdown: str, page, **kwargs) -> str:
    try:
        return with_help(markdown)
    except ValueError as exc:
        raise PluginError(f"{page.file.src_uri}: {exc}") from None
