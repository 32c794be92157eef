"""The documentation: the MkDocs site builds with --strict (so a broken link, a missing anchor or a
page left out of the nav fails, as it fails the docs workflow), every command has a page showing
its --help, and README stays a landing page with the two fresh-machine commands."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import typer
import yaml

from prebuild.tool.cli import app

ROOT = Path(__file__).resolve().parents[1]
# The hook mkdocs.yml names (scripts/ is not a package).
_spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "scripts" / "docs_hooks.py")
docs_hooks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(docs_hooks)
README = ROOT / "README.md"
FRESH_MACHINE_COMMANDS = (
    "scripts/bootstrap.sh && .venv/bin/prebuild wheel --arch sm_80,sm_90",
    "scripts/bootstrap.sh && .venv/bin/python -m pytest",
)


def mkdocs_build(project: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)],
        cwd=project,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )


def nav_pages(nav) -> list[str]:
    """Every page file the nav names, however deep."""
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, dict):
        return [p for v in nav.values() for p in nav_pages(v)]
    return [p for item in nav for p in nav_pages(item)]


def test_site_builds_strictly_with_each_commands_help(tmp_path):
    proc = mkdocs_build(ROOT, tmp_path / "site")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    wheel_page = (tmp_path / "site" / "commands" / "wheel" / "index.html").read_text()
    assert "Usage: prebuild wheel" in wheel_page and "prebuild-help" not in wheel_page
    home = (tmp_path / "site" / "index.html").read_text()
    assert "Usage: prebuild [OPTIONS] COMMAND" in home


def copy_of_the_site_sources(dest: Path) -> Path:
    dest.mkdir()
    shutil.copy2(ROOT / "mkdocs.yml", dest / "mkdocs.yml")
    shutil.copytree(ROOT / "docs", dest / "docs")
    (dest / "scripts").mkdir()
    shutil.copy2(ROOT / "scripts" / "docs_hooks.py", dest / "scripts" / "docs_hooks.py")
    return dest


@pytest.mark.parametrize(
    ("page", "text", "said"),
    [
        ("guarantees.md", "\n[gone](no-such-page.md)\n", "no-such-page.md"),
        ("guarantees.md", "\n[gone](kernels.md#no-such-heading)\n", "no-such-heading"),
        ("orphan.md", "# Not in the nav\n", "orphan.md"),
        ("commands/wheel.md", "\n<!-- prebuild-help no-such-command -->\n", "no-such-command"),
    ],
    ids=["broken-link", "missing-anchor", "page-not-in-nav", "unknown-command-help"],
)
def test_strict_build_fails_on(tmp_path, page, text, said):
    """The checks above can fail: each defect stops the strict build, naming what is wrong."""
    project = copy_of_the_site_sources(tmp_path / "project")
    path = project / "docs" / page
    path.write_text((path.read_text() if path.exists() else "") + text)
    proc = mkdocs_build(project, tmp_path / "site")
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert said in proc.stdout + proc.stderr


def test_every_command_has_a_page_in_the_nav_showing_its_help():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    pages = nav_pages(config["nav"])
    commands = sorted(typer.main.get_command(app).commands)
    assert commands, "no commands found"
    for name in commands:
        page = f"commands/{name}.md"
        assert page in pages, f"{page} is not in mkdocs.yml's nav"
        assert f"<!-- prebuild-help {name} -->" in (ROOT / "docs" / page).read_text(), page
    assert sorted(p.name for p in (ROOT / "docs" / "commands").glob("*.md")) == sorted(
        f"{name}.md" for name in commands
    ), "a page for a command that does not exist"


def test_help_marker_becomes_the_commands_help_text():
    rendered = docs_hooks.with_help("before\n<!-- prebuild-help matrix -->\nafter\n")
    assert rendered.startswith("before\n```text\n") and rendered.endswith("```\nafter\n")
    assert "Usage: prebuild matrix [OPTIONS]" in rendered and "--markdown" in rendered
    assert "\x1b[" not in rendered, "no terminal colours in the page"
    assert all(line == line.rstrip() for line in rendered.splitlines())
    assert max(len(line) for line in rendered.splitlines()) <= 100
    assert "Usage: prebuild [OPTIONS] COMMAND" in docs_hooks.with_help("<!-- prebuild-help -->")
    with pytest.raises(ValueError, match="no-such-command"):
        docs_hooks.help_text("no-such-command")
    with pytest.raises(ValueError, match="not a command name"):
        docs_hooks.help_text("wheel; rm -rf /")


# A repository path the pages name (`tests/runtime/test_loader.py::test_x` too), ending before
# the punctuation or markup that follows it; paths with placeholders (<package>, *) are left out.
REPO_PATH = re.compile(
    r"(?<![\w/.<-])((?:src|tests|scripts|csrc|docs|\.github)/[\w./-]*[\w])(?:::(\w+))?(?![\w<*])"
)


def test_every_repository_path_the_docs_name_exists():
    """Files move (modules are renamed, tests follow them): a page naming a file or a test that
    is gone fails here. The generated benchmark pages are scripts/bench.py's output. The GPU
    check reports (docs/gpu-checks) are records of a run: the tests they name are the ones that
    ran then, so only their files must still exist."""
    pages = [p for p in (ROOT / "docs").rglob("*.md") if not p.name.startswith("benchmarks")]
    missing = []
    for page in [*pages, README]:
        record = page.parent.name == "gpu-checks"
        for match in REPO_PATH.finditer(page.read_text(encoding="utf-8")):
            path, test = ROOT / match[1], match[2]
            if not path.exists():
                missing.append(f"{page.relative_to(ROOT)}: {match[1]}")
            elif test and not record and f"def {test}(" not in path.read_text(encoding="utf-8"):
                missing.append(f"{page.relative_to(ROOT)}: {match[1]}::{test}")
    assert not missing, "\n".join(missing)


def test_readme_is_a_landing_page_with_the_two_commands_and_working_links():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    for command in FRESH_MACHINE_COMMANDS:
        assert f"```bash\n{command}\n```" in text, command
    links = re.findall(r"\]\((docs/[^)#\s]+)(?:#[^)\s]*)?\)", text)
    assert links, "README links into docs/"
    for link in links:
        assert (ROOT / link).is_file(), f"README links to {link}, which does not exist"
