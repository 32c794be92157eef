"""The farm's index: every wheel its ledger records as built, published as one site
(``prebuild index``'s: pip's per-key indexes, the index of every wheel, the PEP 825 variant
twin of each per-arch wheel for uv), with the ledger (``farm.json``) and a summary page
(``farm.html``: which project exists for which torch x CUDA x Python, for which archs) that
a person reads before installing. The site's ``wheels/`` folder is also where the farm keeps
each job's wheel as it is built, so a run that stops keeps what it finished."""

from __future__ import annotations

import html
import os
import shutil
import tempfile
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import quote

from prebuild.tool.builder.variant_twin import variant_twin
from prebuild.tool.farm.ledger import BUILT, LEDGER, Ledger, read_ledger
from prebuild.tool.farm.plan import PLAIN
from prebuild.tool.index import MARKER, WheelInfo, build_index, check_site
from prebuild.tool.index_keys import index_key_of, is_host_wheel
from prebuild.tool.variant_wheels import parse_filename
from prebuild.tool.variants_files import write_variants_files

SUMMARY = "farm.html"


def store(site: Path) -> Path:
    """SITE/wheels, where built wheels are kept (SITE made a site if it is none yet)."""
    site = check_site(site)
    (site / "wheels").mkdir(parents=True, exist_ok=True)
    if not (site / MARKER).exists():
        (site / MARKER).write_text("written by prebuild farm; replaced whole on each run\n")
    return site / "wheels"


def is_per_arch(filename: str) -> bool:
    """A wheel whose version names its archs (``+pt214.cu130.sm90``): it gets a variant twin.
    A host wheel (``+pt214.cu130.host``) names none: it serves every GPU as it is."""
    return (
        parse_filename(filename)[4] is None
        and index_key_of(filename) is not None
        and not is_host_wheel(filename)
    )


def publish(site: Path, ledger: Ledger) -> dict[str, list[WheelInfo]]:
    """Rewrite SITE whole from the ledger's wheels (kept in SITE/wheels), their variant twins,
    the ledger and the summary page. Wheels the ledger does not name are dropped."""
    wheels_dir = store(site)
    missing = [w for w in ledger.wheels() if not (wheels_dir / w).is_file()]
    if missing:
        raise FileNotFoundError(
            f"{wheels_dir} lacks wheels its ledger records: {', '.join(missing)}"
        )
    staging = Path(tempfile.mkdtemp(prefix=".farm-dist.", dir=site.resolve().parent))
    try:
        dist = staging / "dist"
        dist.mkdir()
        for name in ledger.wheels():
            _link_or_copy(wheels_dir / name, dist / name)
        twins = [variant_twin(dist / name, dist) for name in ledger.wheels() if is_per_arch(name)]
        write_variants_files(twins, dist)
        extra = {LEDGER: ledger.to_json(), SUMMARY: summary_page(ledger)}
        if not ledger.wheels():
            _empty_site(site, extra)
            return {}
        return build_index(dist, site, extra)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def merge_sites(sources: list[str], site: Path) -> Ledger:
    """Merge farm sites (folders, or URLs of published ones) into SITE: every ledger's entries
    (a built job is never replaced by a failed one) and the wheels they record, fetched from a
    URL where needed; then SITE is published whole. How a CI run's jobs, each a site of its
    own, and the index published before them become the new index."""
    ledger = read_ledger(site) if site.exists() else Ledger()
    wheels_dir = store(site)
    for source in sources:
        other = read_ledger(source)
        for name in other.wheels():
            target = wheels_dir / name
            if target.is_file():
                continue
            if "://" in source:
                _download(f"{source.rstrip('/')}/wheels/{quote(name)}", target)
            else:
                _link_or_copy(Path(source) / "wheels" / name, target)
        ledger.merge(other)
    publish(site, ledger)
    return ledger


def _download(url: str, target: Path) -> None:
    """``url`` into ``target`` through a temporary file (a failed download leaves nothing)."""
    partial = target.with_name(f".{target.name}.part")
    try:
        with urllib.request.urlopen(url, timeout=600) as response, partial.open("wb") as f:
            shutil.copyfileobj(response, f)
        os.replace(partial, target)
    except (urllib.error.URLError, OSError) as exc:
        partial.unlink(missing_ok=True)
        raise OSError(f"cannot download {url}: {exc}") from None


def _link_or_copy(source: Path, dest: Path) -> None:
    try:
        os.link(source, dest)
    except OSError:
        shutil.copyfile(source, dest)


def _empty_site(site: Path, extra: dict[str, str]) -> None:
    """No wheel built yet (every job failed): the ledger and the summary say why."""
    for name, text in extra.items():
        (site / name).write_text(text, encoding="utf-8")


def summary_rows(ledger: Ledger) -> list[dict]:
    """Pure: one row per (project, torch, CUDA, Python): the archs built, whether the plain
    wheel is, and the jobs that failed."""
    rows: dict[tuple, dict] = {}
    for entry in ledger.entries.values():
        job = entry.job
        key = (job.project, job.torch_tag, job.cuda_tag, job.python_tag)
        row = rows.setdefault(
            key,
            {
                "project": job.project,
                "torch": job.torch_tag and job.torch,
                "cuda": job.cuda,
                "python": job.python_tag,
                "archs": [],
                "plain": False,
                "failed": [],
            },
        )
        if entry.status != BUILT:
            row["failed"].append(job.wheel)
        elif job.wheel == PLAIN:
            row["plain"] = True
        else:
            row["archs"].append(job.wheel)

    def order(wheel: str) -> tuple[bool, int]:  # by arch, the plain wheel last
        return wheel == PLAIN, 0 if wheel == PLAIN else int(wheel[3:].rstrip("af"))

    for row in rows.values():
        row["archs"].sort(key=order)
        row["failed"].sort(key=order)
    return [rows[k] for k in sorted(rows)]


def summary_page(ledger: Ledger) -> str:
    """``farm.html``: what the index holds, a row per project x torch x CUDA x Python."""
    columns = ("project", "torch", "CUDA", "Python", "archs", "plain wheel (pip)", "failed")
    head = "<tr>" + "".join(f"<th>{c}</th>" for c in columns) + "</tr>"
    body = []
    for row in summary_rows(ledger):
        cells = [
            row["project"],
            row["torch"] or "every (stable ABI)",
            row["cuda"],
            row["python"],
            ", ".join(row["archs"]) or "-",
            "yes" if row["plain"] else "no",
            ", ".join(row["failed"]) or "-",
        ]
        body.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
    return (
        '<!DOCTYPE html>\n<html>\n<head><meta charset="utf-8"><title>prebuild farm</title></head>\n'
        "<body>\n<h1>What this index holds</h1>\n"
        "<p>One row per project, torch, CUDA and Python. Install with uv (it picks the wheel of "
        'your GPU) or pip (the plain wheel): see <a href="index.html">the index page</a>. '
        'The jobs behind each row, their keys and logs: <a href="farm.json">farm.json</a>.</p>\n'
        f"<table>\n{head}\n" + "\n".join(body) + "\n</table>\n</body>\n</html>\n"
    )
