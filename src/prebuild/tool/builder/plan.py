"""Which wheels one ``prebuild wheel`` builds, pure: the archs of each, and how its name says
them (the planning step of ``pipeline``; nothing is touched)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from prebuild.runtime.arch import Arch
from prebuild.tool.builder import flags
from prebuild.tool.variant_wheels import WheelArchs, variant_label


@dataclass(frozen=True)
class PlannedWheel:
    """The archs that go into one wheel, and how its name says them: in the version's local
    label (``+cu130.sm90``, the default), or, in a ``--variants`` build, in a PEP 825 variant
    label (``...-sm90.whl``, version ``+cu130``) or nowhere (the plain wheel, for installers
    that know no variants)."""

    archs: tuple[Arch, ...]
    ptx: bool
    label: str | None = None  # a PEP 825 variant label
    plain: bool = False  # a --variants build's wheel without a label

    @property
    def archs_in_version(self) -> bool:
        return self.label is None and not self.plain

    @property
    def ptx_archs(self) -> tuple[Arch, ...]:
        return flags.ptx_archs_for(self.archs, self.ptx)

    @property
    def name(self) -> str:
        name = ",".join(a.sm for a in self.archs) + (" +PTX" if self.ptx else "")
        return (
            f"{name} [{self.label}]" if self.label else (f"{name} [plain]" if self.plain else name)
        )


def plan_wheels(
    archs: Sequence[Arch], fat: bool, ptx: bool, variants: bool = False, plain: bool = False
) -> list[PlannedWheel]:
    """One wheel per arch by default; ``fat`` puts every arch into one wheel. ``variants``: the
    same as PEP 825 variant wheels, each labelled, plus the plain wheel that pip installs:
    every arch and PTX of the newest, so that it runs on every GPU from the oldest arch on.
    ``plain``: that plain wheel only (a CI job beside per-arch ones, whose twins ``prebuild
    variant`` makes)."""
    archs = tuple(sorted(set(archs)))
    if not archs:
        raise ValueError("no CUDA arch given: pass --arch, for example --arch sm_80,sm_90")
    if plain:
        return [PlannedWheel(archs, True, plain=True)]
    planned = [PlannedWheel(archs, ptx)] if fat else [PlannedWheel((a,), ptx) for a in archs]
    if not variants:
        return planned
    labelled = [
        PlannedWheel(w.archs, w.ptx, label=variant_label(WheelArchs(w.archs, w.ptx_archs)))
        for w in planned
    ]
    return [*labelled, PlannedWheel(archs, True, plain=True)]
