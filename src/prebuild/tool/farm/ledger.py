"""The farm's ledger, ``SITE/farm.json``: every job the index holds the output of (its key,
its fields, its wheels) and every job that failed (why, and its log). ``prebuild farm plan``
leaves out the jobs recorded as built; ``prebuild farm build`` adds to it as each job ends.
The one reader and writer of the file.

    {"schema": 1,
     "jobs": {"<key>": {"job": {...Job.to_dict()}, "status": "built" | "failed",
                        "wheels": ["gsplat-1.5.3+pt214.cu130.sm90-cp311-...whl"],
                        "seconds": 412.0, "smoke": "imported gsplat", "error": "...",
                        "finished": "2026-11-26T18:00:00Z"}}}
"""

from __future__ import annotations

import json
import os
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from prebuild.tool.farm.plan import Job

LEDGER = "farm.json"
SCHEMA = 1
BUILT, FAILED = "built", "failed"


class LedgerError(ValueError):
    """The ledger cannot be read; the message names it."""


@dataclass(frozen=True)
class Entry:
    job: Job
    status: str  # BUILT or FAILED
    wheels: tuple[str, ...] = ()  # file names, in SITE/wheels/
    seconds: float = 0.0
    smoke: str = ""  # what the smoke test did
    error: str = ""  # why it failed (the end of its log)
    log: str = ""  # where its build log is kept
    finished: str = ""  # UTC, ISO 8601

    def to_dict(self) -> dict:
        return {
            "job": self.job.to_dict(),
            "status": self.status,
            "wheels": list(self.wheels),
            "seconds": round(self.seconds, 1),
            "smoke": self.smoke,
            "error": self.error,
            "log": self.log,
            "finished": self.finished,
        }


@dataclass
class Ledger:
    entries: dict[str, Entry] = field(default_factory=dict)  # by job key

    @property
    def built(self) -> set[str]:
        return {key for key, e in self.entries.items() if e.status == BUILT}

    def wheels(self) -> list[str]:
        """Every wheel of the built jobs, once each."""
        return sorted({w for e in self.entries.values() if e.status == BUILT for w in e.wheels})

    def record(self, entry: Entry) -> None:
        self.entries[entry.job.key] = entry

    def merge(self, other: Ledger) -> None:
        """Add another ledger's entries (a CI job's); a built entry is never replaced by a
        failed one."""
        for key, entry in other.entries.items():
            mine = self.entries.get(key)
            if mine is None or mine.status != BUILT or entry.status == BUILT:
                self.entries[key] = entry

    def to_json(self) -> str:
        jobs = {key: self.entries[key].to_dict() for key in sorted(self.entries)}
        return json.dumps({"schema": SCHEMA, "jobs": jobs}, indent=2) + "\n"


def parse_ledger(text: str, where: str) -> Ledger:
    """Pure: a ledger from its JSON text (``where`` names it in errors)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise LedgerError(f"{where}: not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise LedgerError(
            f"{where}: not a farm ledger of schema {SCHEMA} (written by another prebuild?)"
        )
    ledger = Ledger()
    for key, raw in (data.get("jobs") or {}).items():
        try:
            job = Job.from_dict(raw["job"])
            entry = Entry(
                job,
                raw["status"],
                tuple(raw.get("wheels", ())),
                float(raw.get("seconds", 0.0)),
                raw.get("smoke", ""),
                raw.get("error", ""),
                raw.get("log", ""),
                raw.get("finished", ""),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise LedgerError(f"{where}: job {key}: unreadable ({exc!r})") from None
        if entry.status not in (BUILT, FAILED):
            raise LedgerError(f"{where}: job {key}: unknown status {entry.status!r}")
        ledger.entries[key] = entry  # the key it was recorded under, even from an older prebuild
    return ledger


def read_ledger(site: str | Path) -> Ledger:
    """The ledger of a site: a directory, or its URL (``https://.../``, ``file://...``). A site
    with none (or no site yet) has an empty one."""
    text = str(site)
    if "://" in text:
        url = text.rstrip("/") + "/" + LEDGER
        try:
            with urllib.request.urlopen(url, timeout=60) as response:
                body = response.read().decode("utf-8")
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return Ledger()
            raise LedgerError(f"{url}: {exc}") from None
        except (urllib.error.URLError, OSError) as exc:
            if text.startswith("file:") and isinstance(
                getattr(exc, "reason", exc), FileNotFoundError
            ):
                return Ledger()
            raise LedgerError(f"{url}: cannot read it: {exc}") from None
        return parse_ledger(body, url)
    path = Path(site) / LEDGER
    try:
        return parse_ledger(path.read_text(encoding="utf-8"), str(path))
    except FileNotFoundError:
        return Ledger()
    except (OSError, UnicodeDecodeError) as exc:
        raise LedgerError(f"{path}: cannot read it: {exc}") from None


def write_ledger(ledger: Ledger, directory: Path) -> Path:
    """Write ``directory/farm.json`` atomically (a crash leaves the old one or the new one)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / LEDGER
    fd, tmp = tempfile.mkstemp(prefix=".farm.", suffix=".json", dir=directory)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(ledger.to_json())
    os.replace(tmp, path)
    return path
