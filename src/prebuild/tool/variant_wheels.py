"""PEP 825 wheel variants, pure: what prebuild writes so that an installer that knows variants
(uv with ``--preview-features wheel-variants``) picks the wheel whose code runs on the GPU.

- A variant wheel's file name carries a **label** after its platform tag
  (``prebuild-0.1.0+cu130-cp310-abi3-linux_x86_64-sm90.whl``). prebuild's labels spell the
  archs, so the archs are known from the name alone: ``sm90``, ``sm80.90`` (one wheel, two
  archs), ``sm90.ptx`` (with PTX of its newest arch); at most 16 characters.
- Its properties, in the ``nvidia`` namespace that uv's built-in provider reads: ``sm_arch``
  (``90_real`` for SASS of sm_90, ``90_virtual`` for its PTX) and
  ``cuda_version_lower_bound`` (``cuda_lower_bound``).
- The wheel carries ``variant.json`` (its own entry) in its ``.dist-info``; the index serves
  ``{name}-{version}-variants.json`` (every wheel's entry), linked beside the wheels.

The JSON is written here rather than with ``variantlib`` (0.2.2): its writer names a newer
schema than the one uv 0.13 accepts. The tests read what prebuild writes back with
variantlib's own parser, and have uv install from it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from packaging.version import Version

from prebuild.runtime.arch import Arch, ArchError, parse_arch

LABEL_RE = re.compile(r"^[0-9a-z_.]{1,16}$")
NULL_LABEL = "null"  # reserved by PEP 825 for the null variant
SCHEMA = "https://variants-schema.wheelnext.dev/peps/825/v0.1.1.json"
NAMESPACE = "nvidia"
# uv recognises this plugin and runs its own built-in NVIDIA provider: nothing is installed.
PROVIDER = {
    "requires": ["nvidia-variant-provider>=0.0.1,<1.0.0"],
    "plugin-api": "nvidia_variant_provider.plugin:NvidiaVariantPlugin",
}
VARIANT_JSON = "variant.json"  # in the wheel's .dist-info


class VariantError(ValueError):
    """Archs that no variant wheel can describe, a label that clashes or does not parse, a
    variants document that disagrees with the wheels."""


@dataclass(frozen=True)
class WheelArchs:
    """The GPU code of one wheel: SASS archs and PTX archs."""

    sass: tuple[Arch, ...]
    ptx: tuple[Arch, ...] = ()


def _digits(arch: Arch) -> str:
    return f"{arch.major}{arch.minor}{arch.suffix}"


def variant_label(archs: WheelArchs) -> str:
    """``sm90``, ``sm80.90``, ``sm90.ptx``: the archs in at most 16 characters. The PTX, when
    there is any, is that of the newest arch (``prebuild wheel --ptx``)."""
    check_describable(archs)
    ptx_newest = archs.ptx == (max(archs.sass),) if archs.ptx else True
    if not ptx_newest:
        raise VariantError(
            f"PTX of {', '.join(a.compute for a in archs.ptx)} beside SASS of "
            f"{', '.join(a.sm for a in archs.sass)}: only PTX of the newest arch has a label"
        )
    label = "sm" + ".".join(_digits(a) for a in sorted(archs.sass)) + (".ptx" if archs.ptx else "")
    if not LABEL_RE.match(label):
        raise VariantError(
            f"the variant label {label!r} is longer than the 16 characters PEP 825 allows: "
            "build fewer archs per wheel (one per arch is the default; drop --fat)"
        )
    return label


def parse_label(label: str) -> WheelArchs:
    """The archs a prebuild label spells (the inverse of ``variant_label``)."""
    parts = label.split(".")
    ptx = parts[-1] == "ptx"
    if ptx:
        parts = parts[:-1]
    if not LABEL_RE.match(label) or not parts or not parts[0].startswith("sm"):
        raise VariantError(f"{label!r} is not a prebuild variant label (sm80, sm80.90, sm90.ptx)")
    try:
        sass = tuple(sorted(parse_arch(part) for part in [parts[0][2:], *parts[1:]]))
    except ArchError as exc:
        raise VariantError(f"{label!r} is not a prebuild variant label: {exc}") from None
    return WheelArchs(sass, (max(sass),) if ptx else ())


def check_describable(archs: WheelArchs) -> None:
    """An arch-specific build (sm_90a, sm_100a) runs on that one capability only, which the
    nvidia ``sm_arch`` property cannot say (``100_real`` also accepts a 10.3 GPU)."""
    specific = [a.sm for a in (*archs.sass, *archs.ptx) if a.suffix == "a"]
    if specific:
        raise VariantError(
            f"{', '.join(specific)}: arch-specific code runs on that exact GPU only, and a variant "
            "wheel's sm_arch property cannot say 'only'. Build it without --variants, or build "
            "the family-portable arch instead (sm_100f runs on every 10.x GPU)"
        )


def built_variant_problem(label: str, built: WheelArchs) -> str | None:
    """Why a classic project's variant wheel cannot carry ``label`` once its libraries' archs
    are read back (``built``), None when it can. The project, not prebuild, can ask nvcc for
    more: an arch-specific variant (hopper_ext's sm_90a, FlashAttention 3's) kept beside or
    instead of the asked arch, which no variant property can describe."""
    named = parse_label(label)
    if built == named:
        return None
    specific = sorted({a for a in (*built.sass, *built.ptx) if a.suffix == "a"})
    if specific:
        gpus = " or ".join(f"{a.major}.{a.minor}" for a in specific)
        return (
            f"the libraries hold {_spell(built)}: {', '.join(a.sm for a in specific)} is "
            f"arch-specific code, which runs on a {gpus} GPU only, and a variant's sm_arch "
            "property cannot say 'only'"
        )
    return f"the variant {label!r} names {_spell(named)}, and the libraries hold {_spell(built)}"


def _spell(archs: WheelArchs) -> str:
    """``SASS sm_90, PTX compute_90``; ``SASS sm_80, no PTX``."""
    sass = ", ".join(a.sm for a in archs.sass) or "of no arch"
    ptx = f"PTX {', '.join(a.compute for a in archs.ptx)}" if archs.ptx else "no PTX"
    return f"SASS {sass}, {ptx}"


def cuda_lower_bound(nvcc_version: Version, archs: WheelArchs) -> str:
    """The oldest CUDA driver the wheel runs on. SASS built by CUDA X.Y (CUDA runtime linked
    statically) runs on every driver of major X (CUDA's minor version compatibility): X.0. PTX
    is JIT-compiled by the driver, which must know that PTX version: X.Y itself."""
    if archs.ptx:
        return f"{nvcc_version.major}.{nvcc_version.minor}"
    return f"{nvcc_version.major}.0"


def properties(archs: WheelArchs, lower_bound: str) -> dict[str, dict[str, list[str]]]:
    """The wheel's properties: ``{"nvidia": {"cuda_version_lower_bound": ["13.0"],
    "sm_arch": ["80_real", "90_real", "90_virtual"]}}``."""
    check_describable(archs)
    values = [f"{a.major}{a.minor}_real" for a in sorted(archs.sass)]
    values += [f"{a.major}{a.minor}_virtual" for a in sorted(archs.ptx)]
    return {NAMESPACE: {"cuda_version_lower_bound": [lower_bound], "sm_arch": values}}


def variants_document(variants: Mapping[str, dict]) -> dict:
    """A variants document: a wheel's ``variant.json`` (its own entry) or the index's
    ``{name}-{version}-variants.json`` (every wheel's)."""
    for label in variants:
        if label == NULL_LABEL or not LABEL_RE.match(label):
            raise VariantError(f"{label!r} cannot be a variant label")
    return {
        "$schema": SCHEMA,
        "default-priorities": {"namespace": [NAMESPACE]},
        "providers": {NAMESPACE: dict(PROVIDER)},
        "variants": dict(sorted(variants.items())),
    }


def merge_documents(documents: list[dict]) -> dict:
    """The index's document from the wheels' own: one entry per label; a label two wheels give
    different properties is a clash (VariantError)."""
    merged: dict[str, dict] = {}
    for doc in documents:
        for label, props in doc.get("variants", {}).items():
            if label in merged and merged[label] != props:
                raise VariantError(
                    f"two wheels call different builds {label!r}: {merged[label]} and {props}"
                )
            merged[label] = props
    return variants_document(merged)


def archs_of(props: Mapping[str, Mapping[str, list[str]]]) -> WheelArchs:
    """The archs an entry's ``sm_arch`` values name (``90_real`` -> SASS sm_90)."""
    sass, ptx = [], []
    for value in props.get(NAMESPACE, {}).get("sm_arch", []):
        digits, _, kind = value.partition("_")
        try:
            arch = parse_arch(digits)
        except ArchError as exc:
            raise VariantError(f"sm_arch value {value!r}: {exc}") from None
        if kind == "real":
            sass.append(arch)
        elif kind == "virtual":
            ptx.append(arch)
        else:
            raise VariantError(f"sm_arch value {value!r}: neither _real nor _virtual")
    return WheelArchs(tuple(sorted(sass)), tuple(sorted(ptx)))


def split_filename(filename: str) -> tuple[str, str | None]:
    """``x-1.0-cp310-abi3-linux_x86_64-sm90.whl`` -> (``x-1.0-cp310-abi3-linux_x86_64.whl``,
    ``sm90``); a wheel without a label -> (filename, None). (A wheel name has five or six
    dash-separated parts, six with a build tag, which starts with a digit: seven, or six whose
    third does not start with a digit, carry a label.)"""
    if not filename.endswith(".whl"):
        return filename, None
    parts = filename[: -len(".whl")].split("-")
    labelled = len(parts) == 7 or (len(parts) == 6 and not parts[2][:1].isdigit())
    if not labelled:
        return filename, None
    return "-".join(parts[:-1]) + ".whl", parts[-1]


def parse_filename(filename: str) -> tuple:
    """packaging's ``parse_wheel_filename`` for variant wheels too: (name, version, build tag,
    tags, label or None). InvalidWheelFilename as packaging raises it."""
    from packaging.utils import parse_wheel_filename

    plain, label = split_filename(filename)
    return (*parse_wheel_filename(plain), label)


def variant_filename(filename: str, label: str) -> str:
    """The variant wheel's file name: the label after the platform tag."""
    if not LABEL_RE.match(label) or label == NULL_LABEL:
        raise VariantError(f"{label!r} cannot be a variant label")
    return f"{filename[: -len('.whl')]}-{label}.whl"


def variants_filename(name: str, version: str) -> str:
    """``prebuild-0.1.0+cu130-variants.json``: the index's variants document (name and version
    normalised as in wheel file names)."""
    return f"{name.replace('-', '_')}-{version}-variants.json"
