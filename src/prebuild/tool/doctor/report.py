"""``prebuild doctor --json``: the gathered facts and the verdicts as one JSON document (its keys
are what scripts and the tests read: keep them)."""

from __future__ import annotations

from prebuild.runtime.manifest import Manifest, ProjectManifest
from prebuild.tool.doctor.jit_locks import clear_command
from prebuild.tool.doctor.rules import FAIL, Check, Facts, OpVerdict, project_checks


def _project_manifest_dict(m: ProjectManifest | Manifest | None) -> dict | None:
    if isinstance(m, ProjectManifest):
        return m.to_dict() | {"torch_minor": m.torch_minor}
    if isinstance(m, Manifest):
        return {
            "kind": "native",
            "package": m.package,
            "package_version": m.package_version,
            "torch_target": m.torch_target,
            "cuda_version": m.cuda_version,
            "sass_archs": [a.sm for a in m.sass_archs],
            "ptx_archs": [a.compute for a in m.ptx_archs],
        }
    return None


def doctor_json(facts: Facts, checks: list[Check], verdicts: list[OpVerdict]) -> dict:
    """The report as plain JSON data: "ok" (nothing fails), the facts, every check and op
    verdict, each other project's own checks, and the JIT locks with the command that clears
    the stale ones."""
    if not isinstance(facts, Facts):
        raise TypeError(f"doctor_json takes the gathered Facts, got {type(facts).__name__}")
    if not all(isinstance(c, Check) for c in checks) or not all(
        isinstance(v, OpVerdict) for v in verdicts
    ):
        raise TypeError("doctor_json takes a list of Check and a list of OpVerdict")
    return {
        "ok": not any(c.status == FAIL for c in checks + verdicts),  # type: ignore[operator]
        "python": facts.python,
        "torch": {
            "version": facts.torch.version,
            "cuda": facts.torch.cuda,
            "cxx11_abi": facts.torch.cxx11_abi,
        },
        "package_dir": str(facts.package_dir),
        "manifest": None
        if facts.manifest is None
        else {
            "package_version": facts.manifest.package_version,
            "cuda_version": facts.manifest.cuda_version,
            "sass_archs": [a.sm for a in facts.manifest.sass_archs],
            "ptx_archs": [a.compute for a in facts.manifest.ptx_archs],
            "torch_target": facts.manifest.torch_target,
            "variant": facts.variant,
        },
        "gpus": facts.gpus.to_dict(),
        "projects": [
            {
                "name": p.name,
                "version": p.version,
                "variant": p.variant,
                "modules": list(p.modules),
                "problem": p.problem,
                "manifest": _project_manifest_dict(p.manifest),
                "checks": [
                    {"status": c.status, "message": c.message, "fix": c.fix}
                    for c in project_checks(p, facts.torch, facts.gpus, facts.glibc)
                ],
            }
            for p in facts.projects
        ],
        "checks": [
            {"area": c.area, "status": c.status, "message": c.message, "fix": c.fix} for c in checks
        ],
        "ops": [
            {"op": v.op, "device": v.device, "code": v.code, "status": v.status, "reason": v.reason}
            for v in verdicts
        ],
        "jit_locks": [
            {
                "path": str(lock.path),
                "age_seconds": round(lock.age_seconds),
                "stale": lock.stale,
                "state": lock.state,
                "holders": [{"pid": pid, "command": cmd} for pid, cmd in lock.holders],
            }
            for lock in facts.locks
        ],
        "clear_command": clear_command(facts.locks),
    }
