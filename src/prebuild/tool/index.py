"""``prebuild index``: a PEP 503 "simple" package index per index key, plus one of all.

Layout of SITE (static files: serve them, or use them through ``file://``)::

    SITE/index.html                          what is here, and the pip command per index
    SITE/wheels/<wheel files>                each wheel stored once
    SITE/simple/prebuild/index.html          every wheel
    SITE/<key>/simple/prebuild/index.html    only the wheels of that index key, e.g. cu130-sm90
    SITE/index.json                          the same facts for programs (prebuild install)

A wheel's index key (``index_keys``) is the CUDA version and SASS archs of its local version
label (``0.1.0+cu130.sm90.ptx90`` -> ``cu130-sm90``), so
``pip install prebuild --index-url SITE_URL/cu130-sm90/simple`` can only pick a wheel made
for sm_90. Every link carries ``#sha256=`` and ``data-requires-python``. PEP 825 variant
wheels and their variants files (``variants_files``) are served in the index of every wheel.

Grouping and HTML are pure (``group_by_index``, ``project_page``, ``root_page``);
``build_index`` does the reading, hashing and writing.
"""

from __future__ import annotations

import html
import json
import os
import shutil
import tempfile
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path
from urllib.parse import quote

from packaging.utils import InvalidWheelFilename, canonicalize_name

from prebuild.runtime.manifest import sha256_file
from prebuild.tool.index_keys import index_key_of
from prebuild.tool.variant_wheels import VariantError, parse_filename
from prebuild.tool.variants_files import check_variants_files, documents_from_wheels

MARKER = ".prebuild-index"
ALL = ""  # the key of the index of every wheel


class SiteError(ValueError):
    """DIST_DIR or SITE cannot be used."""


@dataclass(frozen=True)
class WheelInfo:
    filename: str
    sha256: str
    requires_python: str | None = None

    @property
    def project(self) -> str:
        return str(canonicalize_name(parse_filename(self.filename)[0]))

    @property
    def version(self) -> str:
        return str(parse_filename(self.filename)[1])


def group_by_index(wheels: list[WheelInfo]) -> dict[str, list[WheelInfo]]:
    """Which wheels each index lists: ``ALL`` lists every wheel, each index key its own. With
    PEP 825 variant wheels among them, ``ALL`` lists those and the wheels whose name says no
    archs (the plain wheel), not the per-arch wheels (``+cu130.sm90``), whose higher local
    version pip would take over the plain one whatever the GPU; the per-key indexes are for
    pip, which cannot read a variant label, and list the per-arch wheels only. A host wheel
    (no GPU code: ``+pt214.cu130.host``) is listed in its own index and in every index of its
    torch (and CUDA) that serves a GPU, so that one ``--index-url`` finds it too."""
    ordered = sorted(wheels, key=lambda w: w.filename)
    labelled = {w.filename for w in ordered if parse_filename(w.filename)[4] is not None}
    keys = {w.filename: index_key_of(w.filename) for w in ordered}
    out: dict[str, list[WheelInfo]] = {
        ALL: [
            w
            for w in ordered
            if not labelled
            or w.filename in labelled
            or keys[w.filename] is None
            or keys[w.filename].host  # type: ignore[union-attr]
        ]
    }
    per_key = {
        key.name: key for name, key in keys.items() if key is not None and name not in labelled
    }
    for wheel in ordered:
        key = keys[wheel.filename]
        if key is None or wheel.filename in labelled:
            continue
        for name, other in per_key.items():
            if key.serves(other):
                out.setdefault(name, []).append(wheel)
    return dict(sorted(out.items()))


def _page(title: str, body: list[str]) -> str:
    return (
        '<!DOCTYPE html>\n<html>\n  <head>\n    <meta name="pypi:repository-version" '
        f'content="1.0">\n    <title>{html.escape(title)}</title>\n  </head>\n  <body>\n'
        + "".join(f"    {line}\n" for line in body)
        + "  </body>\n</html>\n"
    )


def project_page(
    project: str, wheels: list[WheelInfo], wheels_href: str, files: list[str] = ()
) -> str:
    """A PEP 503 project page; ``wheels_href`` is the relative path to SITE/wheels/; ``files``:
    other files linked there (PEP 825: a variants file must be linked beside its wheels)."""
    body = [f"<h1>Links for {html.escape(project)}</h1>"]
    body += [
        f'<a href="{html.escape(wheels_href + quote(f))}">{html.escape(f)}</a><br>' for f in files
    ]
    for w in wheels:
        attrs = f'href="{html.escape(wheels_href + quote(w.filename))}#sha256={w.sha256}"'
        if w.requires_python:
            attrs += f' data-requires-python="{html.escape(w.requires_python)}"'
        body.append(f"<a {attrs}>{html.escape(w.filename)}</a><br>")
    return _page(f"Links for {project}", body)


def root_page(projects: list[str]) -> str:
    return _page(
        "Simple index", [f'<a href="{html.escape(p)}/">{html.escape(p)}</a><br>' for p in projects]
    )


# pip's default index. Said here rather than read from pip._internal: importing pip in a
# process makes setuptools, imported after it there, fail its distutils check.
PYPI_SIMPLE = "https://pypi.org/simple"


def usual_index_url(env: Mapping[str, str] | None = None) -> str:
    """The index pip uses when told none: ``PIP_INDEX_URL``, else pip's own default. A site
    holds only the wheels built here; their dependencies (torch, ...) come from there."""
    env = os.environ if env is None else env
    if not isinstance(env, Mapping):
        raise TypeError(f"usual_index_url takes a mapping of variables, got {type(env).__name__}")
    return env.get("PIP_INDEX_URL") or PYPI_SIMPLE


def install_command(
    site_url: str, key: str, project: str = "prebuild", extra_index: str | None = None
) -> str:
    """Pure: the pip command that installs from one index of the site (``key`` an index key or
    ``ALL``), taking the dependencies from ``extra_index`` (``usual_index_url()``)."""
    where = f"{site_url.rstrip('/')}/{key}/simple" if key else f"{site_url.rstrip('/')}/simple"
    extra = extra_index if extra_index is not None else usual_index_url()
    return f"pip install {project} --index-url {where} --extra-index-url {extra}"


def variant_commands(
    site_url: str, project: str, extra_index: str | None = None
) -> tuple[str, str]:
    """Pure: for a project with PEP 825 variant wheels, the uv command that picks the wheel of
    this machine's GPU from the index of every wheel, and the pip command (pip knows no
    variants: it gets the plain wheel)."""
    where = f"{site_url.rstrip('/')}/simple"
    extra = extra_index if extra_index is not None else usual_index_url()
    return (
        # --index: searched before the default index, so a project the usual index also has
        # (gsplat on PyPI) comes from here; uv's --extra-index-url would be searched first
        f"uv pip install --preview-features wheel-variants {project} --index {where} --default-index {extra}",
        f"pip install {project} --index-url {where} --extra-index-url {extra}",
    )


def variant_projects(variants: dict[str, dict]) -> list[str]:
    """The projects the variants files (by file name) are of."""
    return sorted({_variants_project(name) for name in variants})


def _variants_project(filename: str) -> str:
    """``demo_ops-0.1.0+cu130-variants.json`` -> ``demo-ops``."""
    return str(canonicalize_name(filename.rsplit("-", 2)[0]))


def landing_page(indexes: dict[str, list[WheelInfo]], with_variants: list[str] = ()) -> str:
    body = [
        "<h1>prebuild wheels</h1>",
        "<p>Pick the index of your GPU's arch and your torch's CUDA version "
        "(or let <code>prebuild install --from SITE_URL</code> pick), then:</p>",
        "<pre>pip install PROJECT --index-url SITE_URL/INDEX/simple --extra-index-url YOUR_USUAL_INDEX</pre>",
        "<p>The site holds only these wheels: their dependencies (torch, ...) come from the extra "
        "index (or pass <code>--no-deps</code> when they are installed).</p>",
    ]
    for project in with_variants:
        uv, pip = variant_commands("SITE_URL", project, "YOUR_USUAL_INDEX")
        body += [
            f"<p>{html.escape(project)} has PEP 825 variant wheels: one command picks the wheel of this "
            "machine's GPU (uv's preview of wheel variants):</p>",
            f"<pre>{html.escape(uv)}</pre>",
            "<p>pip knows no variants and gets the plain wheel (every arch, and PTX of the newest):</p>",
            f"<pre>{html.escape(pip)}</pre>",
        ]
    body.append("<ul>")
    for key, wheels in indexes.items():
        where = f"{key}/simple/" if key else "simple/"
        label = key or "all wheels"
        files = ", ".join(html.escape(w.filename) for w in wheels)
        body.append(f'<li><a href="{where}">{html.escape(label)}</a>: {files}</li>')
    body.append("</ul>")
    return _page("prebuild wheels", body)


def index_json(indexes: dict[str, list[WheelInfo]]) -> dict:
    """SITE/index.json: every wheel, and under ``indexes`` each per-key index by its index key."""
    by_key = {}
    for key, wheels in indexes.items():
        if key == ALL:
            continue
        keys = [k for w in wheels if (k := index_key_of(w.filename)) is not None]
        index_key = next(k for k in keys if k.name == key)
        by_key[key] = {
            "cuda_tag": index_key.cuda_tag,
            "torch_tag": index_key.torch_tag or None,
            "sass_archs": [a.sm for a in index_key.sass],  # none: an index of host wheels
            "index": f"{key}/simple",
            "wheels": [
                {
                    "filename": w.filename,
                    "sha256": w.sha256,
                    "ptx_archs": [a.compute for a in index_key_of(w.filename).ptx],
                }
                for w in wheels
            ],  # type: ignore[union-attr]
        }
    return {
        "schema": 1,
        "wheels": [
            {"filename": w.filename, "sha256": w.sha256, "path": f"wheels/{w.filename}"}
            for w in indexes[ALL]
        ],
        "indexes": by_key,
    }


def _requires_python(wheel: Path) -> str | None:
    try:
        with zipfile.ZipFile(wheel) as zf:
            name = next(
                (
                    n
                    for n in zf.namelist()
                    if n.endswith(".dist-info/METADATA") and n.count("/") == 1
                ),
                None,
            )
            if name is None:
                raise SiteError(f"{wheel.name} has no .dist-info/METADATA: not a wheel")
            return (
                HeaderParser()
                .parsestr(zf.read(name).decode("utf-8", "replace"))
                .get("Requires-Python")
            )
    except zipfile.BadZipFile as exc:
        raise SiteError(f"{wheel.name} is not a readable wheel: {exc}") from exc


def read_wheels(dist_dir: Path) -> list[tuple[Path, WheelInfo]]:
    """Every wheel in DIST_DIR (not recursive), hashed; SiteError for a bad name or file."""
    if not dist_dir.is_dir():
        raise SiteError(f"{dist_dir} is not a directory")
    found = []
    for path in sorted(dist_dir.glob("*.whl")):
        try:
            parse_filename(path.name)
        except InvalidWheelFilename as exc:
            raise SiteError(f"{path.name}: {exc}") from exc
        found.append((path, WheelInfo(path.name, sha256_file(path), _requires_python(path))))
    if not found:
        raise SiteError(
            f"no wheels (*.whl) in {dist_dir}: build some with `prebuild wheel --arch ...`"
        )
    return found


def write_site(
    site: Path,
    wheels: list[tuple[Path, WheelInfo]],
    variants: dict[str, dict] | None = None,
    extra_files: Mapping[str, str] | None = None,
) -> dict[str, list[WheelInfo]]:
    """Write the whole site into ``site`` (which must not exist); ``variants``: the variants
    files (name -> document) served beside the wheels and linked on the index of all wheels;
    ``extra_files``: more files at the top of the site (name -> text: the farm's ledger)."""
    indexes = group_by_index([info for _, info in wheels])
    (site / "wheels").mkdir(parents=True)
    for path, info in wheels:
        shutil.copyfile(path, site / "wheels" / info.filename)
    variants = variants or {}
    for filename, document in variants.items():
        (site / "wheels" / filename).write_text(
            json.dumps(document, indent=2) + "\n", encoding="utf-8"
        )
    for key, listed in indexes.items():
        simple = site / key / "simple" if key else site / "simple"
        depth = 2 if key else 1  # from <simple>/<project>/ up to SITE
        projects = sorted({w.project for w in listed})
        simple.mkdir(parents=True)
        (simple / "index.html").write_text(root_page(projects), encoding="utf-8")
        for project in projects:
            (simple / project).mkdir()
            extra = [f for f in variants if key == ALL and _variants_project(f) == project]
            page = project_page(
                project,
                [w for w in listed if w.project == project],
                "../" * (depth + 1) + "wheels/",
                extra,
            )
            (simple / project / "index.html").write_text(page, encoding="utf-8")
    (site / "index.html").write_text(
        landing_page(indexes, variant_projects(variants)), encoding="utf-8"
    )
    (site / "index.json").write_text(
        json.dumps(index_json(indexes), indent=2) + "\n", encoding="utf-8"
    )
    for name, text in (extra_files or {}).items():
        (site / name).write_text(text, encoding="utf-8")
    (site / MARKER).write_text(
        "written by prebuild index; the whole folder is replaced on the next run\n"
    )
    return indexes


def check_site(site: Path) -> Path:
    """SITE, resolved, when it may be written: absent, empty, or a site written before."""
    site = site.resolve()
    if site.exists() and (
        not site.is_dir() or (any(site.iterdir()) and not (site / MARKER).exists())
    ):
        raise SiteError(
            f"{site} exists and is not an index written by prebuild index: choose another --out"
        )
    return site


def build_index(
    dist_dir: Path, site: Path, extra_files: Mapping[str, str] | None = None
) -> dict[str, list[WheelInfo]]:
    """Build the site next to SITE, then put it in place: SITE must be absent, empty, or a
    site this command wrote before (it is replaced whole, so no stale wheel lingers)."""
    wheels = read_wheels(dist_dir)
    try:
        variants = documents_from_wheels([path for path, _ in wheels])
        check_variants_files(dist_dir, variants)
    except VariantError as exc:
        raise SiteError(str(exc)) from None
    site = check_site(site)
    site.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{site.name}.", dir=site.parent))
    try:
        indexes = write_site(staging / "site", wheels, variants, extra_files)
        old = staging / "old"
        if site.exists():
            os.replace(site, old)
        os.replace(staging / "site", site)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return indexes
