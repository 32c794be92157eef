"""``prebuild install``: pick the wheel that covers every visible GPU, and say why.

``select_wheel`` is pure: wheel file names, the GPUs' compute capabilities, torch's and the
driver's CUDA versions in; the decision with a reason for every wheel out. The SASS/PTX
rules are ``prebuild.runtime.arch.select_code`` and the CUDA rules ``prebuild.runtime.compat``'s:
this module only ranks. ``find_candidates`` lists the wheels of a folder, of a site written
by ``prebuild index``, or of a PEP 503 index URL.
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

from packaging.utils import InvalidWheelFilename, canonicalize_name
from packaging.version import Version

import prebuild.tool.gpus as probe
from prebuild.runtime.arch import (
    Arch,
    CodeKind,
    arch_for_capability,
    format_capability,
    select_code,
)
from prebuild.runtime.compat import (
    cpu_torch_note,
    cuda_torch_command,
    driver_supports,
    same_cuda_major,
)
from prebuild.tool.arch_support import torch_minor_of, torch_tag
from prebuild.tool.builder.config import MIN_TORCH_TARGET
from prebuild.tool.gpus import GpuQuery, TorchInfo
from prebuild.tool.index_keys import index_key_of, is_host_wheel
from prebuild.tool.variant_wheels import parse_filename, split_filename


class SourceError(ValueError):
    """--from names nothing that holds wheels."""


@dataclass(frozen=True)
class Candidate:
    filename: str
    location: str  # a local path or a URL pip can install from


@dataclass(frozen=True)
class Target:
    """A GPU to cover: a visible one, or one named with ``--arch``."""

    label: str  # "cuda:0 (NVIDIA A100)" or "--arch sm_90"
    capability: tuple[int, int]


@dataclass(frozen=True)
class Verdict:
    target: Target
    kind: CodeKind
    arch: Arch | None
    host: bool = False  # the wheel holds no GPU code: any GPU runs it

    @property
    def text(self) -> str:
        if self.host:
            return "host code only (no GPU code to match)"
        if self.kind is CodeKind.SASS:
            return f"SASS {self.arch.sm}"  # type: ignore[union-attr]
        if self.kind is CodeKind.PTX:
            return f"PTX {self.arch.compute} via the driver's JIT"  # type: ignore[union-attr]
        return "not covered"


@dataclass
class Considered:
    candidate: Candidate
    verdicts: list[Verdict] = field(default_factory=list)
    rejected: str = ""  # why it cannot be used; "" when it can
    other_torch: str = ""  # "2.14": rejected only for being built for that torch release


@dataclass
class Decision:
    chosen: Considered | None
    reason: str
    considered: list[Considered]

    def to_dict(self) -> dict:
        def one(c: Considered) -> dict:
            return {
                "wheel": c.candidate.filename,
                "location": c.candidate.location,
                "rejected": c.rejected,
                "verdicts": [
                    {
                        "target": v.target.label,
                        "capability": format_capability(v.target.capability),
                        "code": v.kind.value,
                        "arch": v.arch.sm if v.arch else None,
                    }
                    for v in c.verdicts
                ],
            }

        return {
            "chosen": one(self.chosen) if self.chosen else None,
            "reason": self.reason,
            "considered": [one(c) for c in self.considered],
        }


def _rank(c: Considered) -> tuple:
    """Higher is better: every GPU on SASS, the newest release, the fewest archs beyond what
    is needed (a smaller wheel made for these GPUs), code closest to each GPU (sm_86 over
    sm_80 for an 8.9 GPU), then the newest CUDA."""
    version = parse_filename(c.candidate.filename)[1]
    key = index_key_of(c.candidate.filename)
    assert key is not None
    ptx_used = sum(v.kind is CodeKind.PTX for v in c.verdicts)
    closeness = sum(v.arch.capability[0] * 10 + v.arch.capability[1] for v in c.verdicts if v.arch)
    return (
        -ptx_used,
        Version(version.public),
        -len(key.sass) - len(key.ptx),
        closeness,
        Version(key.cuda_version or "0"),
    )


def select_wheel(
    filenames: list[Candidate],
    targets: list[Target],
    torch_cuda: str | None,
    driver_cuda: str | None,
    torch_version: str | None = None,
) -> Decision:
    """The best wheel whose code runs on every target, or None with the reason. A wheel tied
    to one torch minor release (``+pt214...``: another project's classic build) fits only
    that torch; one of host code only (``+pt214.cu130.host``, ``+pt214.cpu``) fits every GPU,
    and a machine with none."""
    considered: list[Considered] = []
    for cand in filenames:
        c = Considered(cand)
        considered.append(c)
        try:
            version = parse_filename(cand.filename)[1]
        except InvalidWheelFilename:
            c.rejected = "not a wheel file name"
            continue
        key = index_key_of(cand.filename)
        if key is None:
            c.rejected = (
                "no CUDA archs in its name (a --variants build's plain wheel, for pip: its labelled "
                "wheels name their archs)"
                if version.local and version.local.startswith("cu")
                else "no CUDA kernels (its version names no CUDA archs)"
            )
            continue
        wheel_cuda = key.cuda_version
        if key.torch_tag and (torch_version is None or torch_tag(torch_version) != key.torch_tag):
            have = (
                f"torch {torch_version} is installed" if torch_version else "torch is not installed"
            )
            c.other_torch = torch_minor_of(key.torch_tag)
            c.rejected = f"built for torch {c.other_torch} ({key.torch_tag}); {have}"
            continue
        if key.host:
            c.verdicts = [Verdict(t, CodeKind.NONE, None, host=True) for t in targets]
        else:
            choices = [select_code(t.capability, key.sass, key.ptx) for t in targets]
            c.verdicts = [Verdict(t, ch.kind, ch.arch) for t, ch in zip(targets, choices)]
        missing = [v.target.label for v in c.verdicts if v.kind is CodeKind.NONE and not v.host]
        if missing:
            c.rejected = f"no code for {', '.join(missing)}"
        elif wheel_cuda is None:
            pass  # CPU code: no CUDA to match
        elif torch_cuda is not None and not same_cuda_major(wheel_cuda, torch_cuda):
            c.rejected = f"built with CUDA {wheel_cuda}; torch uses CUDA {torch_cuda} (the majors must match)"
        elif driver_cuda is not None and not driver_supports(wheel_cuda, driver_cuda):
            c.rejected = (
                f"built with CUDA {wheel_cuda}; the driver supports CUDA {driver_cuda} at most"
            )
    if not targets:
        host = [c for c in considered if not c.rejected and is_host_wheel(c.candidate.filename)]
        if host:
            best = max(host, key=_rank)
            return Decision(
                best, "no GPU to cover, and it holds no GPU code (host code only)", considered
            )
        return Decision(
            None, "no GPU to cover: pass --arch to choose for a GPU that is not here", considered
        )
    fitting = [c for c in considered if not c.rejected]
    if not fitting:
        caps = ", ".join(f"{t.label} ({format_capability(t.capability)})" for t in targets)
        return Decision(None, f"no wheel covers {caps}", considered)
    best = max(fitting, key=_rank)
    how = "; ".join(f"{v.target.label}: {v.text}" for v in best.verdicts)
    others = len(fitting) - 1
    reason = f"covers every GPU ({how})" + (
        f"; preferred over {others} other fitting wheel(s): "
        "SASS over PTX, newest release, fewest archs, closest arch, newest CUDA"
        if others
        else ""
    )
    return Decision(best, reason, considered)


def no_fit_fix(decision: Decision, project: str, targets: list[Target]) -> str:
    """Pure: what to run when no wheel fits. Wheels refused only for being built for another
    torch: install that torch, or build for this one; otherwise build for these GPUs."""
    if decision.chosen is not None or not targets:
        return ""
    archs = ",".join(sorted({arch_for_capability(t.capability).sm for t in targets}))
    build = f"prebuild wheel --arch {archs}" + (
        "" if canonicalize_name(project) == "prebuild" else f" {project}"
    )
    rejected = [c for c in decision.considered if c.rejected]
    if rejected and all(c.other_torch for c in rejected):
        pins = " or ".join(
            f"pip install 'torch=={minor}.*'" for minor in sorted({c.other_torch for c in rejected})
        )
        return f"install the torch these wheels were built for ({pins}), or build them for this torch: {build}"
    return f"build a wheel for these GPUs (in an environment with the torch you use): {build}"


def cpu_torch_warning(torch: TorchInfo, decision: Decision) -> str | None:
    """Pure: with a CPU build of torch, the CUDA wheel about to be picked (or any of those
    considered) runs its CPU ops only: say so, and which torch to install, before picking."""
    if torch.version is None or torch.cuda is not None:
        return None
    considered = [decision.chosen] if decision.chosen else decision.considered
    for c in considered:
        try:
            key = index_key_of(c.candidate.filename)
        except InvalidWheelFilename:
            continue
        if key is not None and key.cuda_version is not None:  # CPU code runs with any torch
            archs = (
                ", ".join([a.sm for a in key.sass] + [a.compute for a in key.ptx]) or "host code"
            )
            return (
                f"{cpu_torch_note(torch.version, key.cuda_version, archs)}. To use the GPU, first "
                f"install a CUDA build of torch: {cuda_torch_command(key.cuda_version, str(MIN_TORCH_TARGET))}"
            )
    return None


# --- the whole decision, as `prebuild install` makes it -----------------------------------


@dataclass(frozen=True)
class InstallPlan:
    """What ``prebuild install`` found and decided (the CLI prints it, then pip installs the chosen
    wheel unless told not to)."""

    project: str
    source: str
    candidates: list[Candidate]
    gpus: GpuQuery
    torch: TorchInfo
    targets: list[Target]
    decision: Decision
    fix: str  # what to run instead when nothing fits
    warnings: list[str]

    @property
    def exit_code(self) -> int:
        """0 a wheel was chosen; 3 none fits; 4 no GPU visible and no --arch."""
        return 0 if self.decision.chosen else (4 if not self.targets else 3)

    def to_dict(self, dry_run: bool) -> dict:
        data = self.decision.to_dict()
        data.update(
            project=self.project,
            gpus=self.gpus.to_dict(),
            dry_run=dry_run,
            warnings=self.warnings,
            torch={"version": self.torch.version, "cuda": self.torch.cuda},
            fix=self.fix,
        )
        return data


def plan_install(project: str, source: str, archs: tuple[Arch, ...] = ()) -> InstallPlan:
    """The wheels of ``project`` at ``source``, this machine's GPUs (or ``archs`` instead),
    torch and driver, and the wheel chosen for them. SourceError when ``source`` holds none."""
    candidates = find_candidates(source, project)
    gpus, torch = probe.query_gpus(), probe.torch_info()
    if archs:
        targets = [Target(f"--arch {a.sm}", a.capability) for a in archs]
    else:
        targets = [Target(f"cuda:{g.index} ({g.name})", g.capability) for g in gpus.gpus]
    decision = select_wheel(candidates, targets, torch.cuda, gpus.driver_cuda, torch.version)
    note = cpu_torch_warning(torch, decision)
    return InstallPlan(
        project,
        source,
        candidates,
        gpus,
        torch,
        targets,
        decision,
        no_fit_fix(decision, project, targets),
        [note] if note else [],
    )


def installer(python: str, has_pip: bool, uv: str | None) -> list[str] | None:
    """Pure: the command that installs into ``python``'s environment: its pip, else uv's pip
    interface (uv makes its venvs without pip); None with neither."""
    if has_pip:
        return [python, "-m", "pip", "install"]
    return [uv, "pip", "install", "--python", python] if uv else None


def pip_install(candidate: Candidate, output_to_stderr: bool) -> int:
    """``pip install`` (or ``uv pip install``, ``installer``) the chosen wheel into this Python;
    the installer's exit status. With ``output_to_stderr`` (``--json``: stdout holds the JSON
    only) the installer's output goes to stderr.
    pip reads no PEP 825 variant label in a file name: a variant wheel is handed to it as a
    copy named without its label (the name its .dist-info says), its ``#sha256=`` checked."""
    import hashlib
    import importlib.util
    import shutil
    import subprocess
    import sys
    import tempfile

    install = installer(
        sys.executable, importlib.util.find_spec("pip") is not None, shutil.which("uv")
    )
    if install is None:
        print(
            f"{candidate.filename}: this environment ({sys.prefix}) has no pip, and uv is not on "
            "PATH to install with: install one of them (`python -m ensurepip`), then run this again",
            file=sys.stderr,
        )
        return 1
    location = candidate.location
    plain, label = split_filename(candidate.filename)
    with tempfile.TemporaryDirectory(prefix="prebuild-install-") as tmp:
        if label is not None:
            copy = Path(tmp) / plain
            url, _, fragment = location.partition("#")
            if "://" in url:
                with urllib.request.urlopen(url, timeout=300) as response, open(copy, "wb") as out:
                    shutil.copyfileobj(response, out)
            else:
                shutil.copyfile(url, copy)
            expected = fragment.partition("sha256=")[2]
            if expected and hashlib.sha256(copy.read_bytes()).hexdigest() != expected:
                print(
                    f"{candidate.filename}: its sha256 is not the index's {expected}",
                    file=sys.stderr,
                )
                return 1
            location = str(copy)
        command = [*install, location]
        print(
            f"Running: {' '.join(command)}"
            + (f" (the variant wheel {candidate.filename})" if label else ""),
            file=sys.stderr,
        )
        return subprocess.run(command, stdout=sys.stderr if output_to_stderr else None).returncode


# --- where the wheels are -----------------------------------------------------------------


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag, attrs) -> None:
        if tag == "a":
            href = dict(attrs).get("href")
            if href:
                self.hrefs.append(href)


def links_in(page: str, base_url: str) -> list[Candidate]:
    """Pure: the wheels a PEP 503 project page links to, as absolute URLs (with #sha256)."""
    parser = _Links()
    parser.feed(page)
    out = []
    for href in parser.hrefs:
        url = urllib.parse.urljoin(base_url, href)
        name = urllib.parse.unquote(urllib.parse.urlparse(url).path.rsplit("/", 1)[-1])
        if name.endswith(".whl"):
            out.append(Candidate(name, url))
    return out


def project_page_url(source: str, project: str = "prebuild") -> str:
    """Pure: a project's page for an index URL given as the site root, its ``simple/``
    index, or the project page itself (a site may itself be named after the project)."""
    name = canonicalize_name(project)
    url = source.rstrip("/")
    if url.endswith(f"/simple/{name}"):
        return url + "/"
    if url.endswith("/simple"):
        return url + f"/{name}/"
    return url + f"/simple/{name}/"


def _project_of(filename: str) -> str | None:
    try:
        return canonicalize_name(parse_filename(filename)[0])
    except InvalidWheelFilename:
        return None


def find_candidates(source: str, project: str = "prebuild") -> list[Candidate]:
    """The project's wheels in a folder of wheels, a site written by ``prebuild index``, or
    at a PEP 503 index URL (``file://``, ``https://``: the site, its ``simple/`` index or
    the project page)."""
    name = canonicalize_name(project)
    if "://" not in source:
        path = Path(source)
        if (path / "index.json").is_file():
            data = json.loads((path / "index.json").read_text(encoding="utf-8"))
            wheels = [Candidate(w["filename"], str(path / w["path"])) for w in data["wheels"]]
        elif path.is_dir():
            wheels = [Candidate(p.name, str(p.resolve())) for p in sorted(path.glob("*.whl"))]
            if not wheels:
                raise SourceError(f"no wheels (*.whl) in {path}")
        else:
            raise SourceError(f"{source} is not a folder of wheels, a site, or an index URL")
        mine = [c for c in wheels if _project_of(c.filename) == name]
        if not mine:
            others = sorted({p for c in wheels if (p := _project_of(c.filename))})
            raise SourceError(
                f"no wheels of {project} in {source}; it holds wheels of {', '.join(others)}: "
                "name one of them (prebuild install NAME --from ...)"
            )
        return mine
    url = project_page_url(source, project)
    try:
        with urllib.request.urlopen(
            url if not url.startswith("file:") else url + "index.html", timeout=30
        ) as r:
            page = r.read().decode("utf-8", "replace")
    except (OSError, ValueError) as exc:
        raise SourceError(
            f"cannot read the index page {url} (is {project} on that index?): {exc}"
        ) from exc
    return [c for c in links_in(page, url) if _project_of(c.filename) == name]
