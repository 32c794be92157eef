"""The farm's ledger (SITE/farm.json): what an index holds, read from a folder or a URL."""

from __future__ import annotations

import http.server
import threading
from functools import partial
from pathlib import Path

import pytest

from prebuild.tool.farm.ledger import (
    BUILT,
    FAILED,
    Entry,
    Ledger,
    LedgerError,
    parse_ledger,
    read_ledger,
    write_ledger,
)
from prebuild.tool.farm.plan import Job

JOB = Job(
    "gsplat", "gsplat==1.5.3", "gsplat==1.5.3", "classic", "2.14", "13.0", "3.11",
    "sm_90", ("sm_90",), True, (("FORCE_CUDA", "1"),), ("ninja",), "0.1.0",
)  # fmt: skip
OTHER = Job(**{**JOB.__dict__, "wheel": "sm_80", "archs": ("sm_80",), "ptx": False})


def test_round_trip_and_what_is_built(tmp_path):
    ledger = Ledger()
    ledger.record(Entry(JOB, BUILT, ("a.whl",), 12.34, "imported gsplat", finished="t"))
    ledger.record(Entry(OTHER, FAILED, error="nvcc said no", log="/logs/x.log"))
    write_ledger(ledger, tmp_path)
    again = read_ledger(tmp_path)
    assert again.entries == {
        JOB.key: Entry(JOB, BUILT, ("a.whl",), 12.3, "imported gsplat", finished="t"),
        OTHER.key: Entry(OTHER, FAILED, error="nvcc said no", log="/logs/x.log"),
    }
    assert again.built == {JOB.key} and again.wheels() == ["a.whl"]
    assert not list(tmp_path.glob(".farm.*"))  # written through a temporary file, renamed


def test_merge_never_forgets_a_built_job():
    ledger = Ledger({JOB.key: Entry(JOB, BUILT, ("a.whl",))})
    ledger.merge(Ledger({JOB.key: Entry(JOB, FAILED), OTHER.key: Entry(OTHER, FAILED)}))
    assert ledger.entries[JOB.key].status == BUILT and OTHER.key in ledger.entries
    ledger.merge(Ledger({OTHER.key: Entry(OTHER, BUILT, ("b.whl",))}))
    assert ledger.wheels() == ["a.whl", "b.whl"]


def test_no_site_or_no_ledger_is_an_empty_one(tmp_path):
    assert read_ledger(tmp_path / "missing").entries == {}
    assert read_ledger((tmp_path / "missing").as_uri()).entries == {}


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("{", "not JSON"),
        ('{"schema": 2}', "not a farm ledger of schema 1"),
        ('{"schema": 1, "jobs": {"k": {"status": "built"}}}', "job k: unreadable"),
        ('{"schema": 1, "jobs": {"k": {"job": {}, "status": "built"}}}', "job k: unreadable"),
    ],
)
def test_a_bad_ledger_is_refused_naming_it(text, said):
    with pytest.raises(LedgerError, match=f"^site/farm.json: {said}"):
        parse_ledger(text, "site/farm.json")


def test_a_ledger_is_read_from_a_served_site(tmp_path):
    ledger = Ledger({JOB.key: Entry(JOB, BUILT, ("a.whl",))})
    write_ledger(ledger, tmp_path / "site")
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        assert read_ledger(f"{url}/site/").built == {JOB.key}
        assert read_ledger(f"{url}/nothing-here").entries == {}  # a 404: no ledger yet
    finally:
        server.shutdown()
        server.server_close()
    assert read_ledger(Path(tmp_path / "site").as_uri()).built == {JOB.key}
