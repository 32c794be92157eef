"""PEP 825 variants files, read from and written to disk: ``{name}-{version}-variants.json``,
every variant wheel's entry of one project version, merged from the wheels' own
``variant.json`` (what an index serves beside the wheels, and what ``--find-links`` reads).
Written by ``prebuild wheel --variants`` and ``prebuild variant``, checked and served by
``prebuild index``. The documents themselves are ``variant_wheels``' (pure).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from prebuild.tool.variant_wheels import (
    VariantError,
    merge_documents,
    parse_filename,
    variants_filename,
)


def documents_from_wheels(wheels: list[Path]) -> dict[str, dict]:
    """PEP 825: for each project version with variant wheels among ``wheels``, its variants
    file's name and document, merged from the wheels' own ``variant.json``. VariantError when a
    labelled wheel has none, names another label, or two wheels call different builds by one
    label."""
    from prebuild.tool.inspection import wheel_variant_json

    groups: dict[str, list[dict]] = {}
    for path in wheels:
        name, version, _, _, label = parse_filename(path.name)
        if label is None:
            continue
        document = wheel_variant_json(path)
        if document is None or list(document.get("variants", {})) != [label]:
            raise VariantError(
                f"{path.name}: its label is {label!r} but its .dist-info/variant.json does not "
                f"describe exactly that variant"
            )
        groups.setdefault(variants_filename(str(name), str(version)), []).append(document)
    try:
        return {
            filename: merge_documents(documents) for filename, documents in sorted(groups.items())
        }
    except VariantError as exc:
        raise VariantError(f"variant label clash: {exc}") from None


def write_variants_files(wheels: list[Path], out_dir: Path) -> list[Path]:
    """``{name}-{version}-variants.json`` in ``out_dir`` for each project version among the
    variant wheels, merged from their own variant.json (each written atomically)."""
    written = []
    for filename, document in documents_from_wheels(wheels).items():
        path = out_dir / filename
        partial = path.with_name(f".{filename}.partial")
        partial.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
        os.replace(partial, path)
        written.append(path)
    return written


def check_variants_files(dist_dir: Path, documents: dict[str, dict]) -> None:
    """A variants file already in DIST_DIR (``prebuild wheel --variants`` writes one) must say
    what the wheels there say: a wheel it does not list, or lists otherwise, is an error."""
    for path in sorted(dist_dir.glob("*-variants.json")):
        try:
            listed = json.loads(path.read_text(encoding="utf-8")).get("variants", {})
        except (OSError, ValueError, AttributeError) as exc:
            raise VariantError(f"{path.name} cannot be read as a variants file: {exc}") from None
        ours = documents.get(path.name, {}).get("variants", {})
        missing = sorted(set(ours) - set(listed))
        if missing:
            raise VariantError(
                f"{path.name} does not list the wheel(s) labelled {', '.join(missing)} in {dist_dir}: "
                "it belongs to another build; build the variants again or remove it"
            )
        changed = sorted(label for label in ours if listed.get(label) != ours[label])
        if changed:
            raise VariantError(
                f"{path.name} describes {', '.join(changed)} otherwise than the wheels' own variant.json"
            )
