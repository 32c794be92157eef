"""The farm's summary of what its index holds, and which wheels get variant twins."""

from __future__ import annotations

from prebuild.tool.farm.ledger import BUILT, FAILED, Entry, Ledger
from prebuild.tool.farm.plan import Job
from prebuild.tool.farm.site import is_per_arch, summary_page, summary_rows


def job(project="gsplat", wheel="sm_90", kind="classic", python="3.11"):
    archs = ("sm_80", "sm_90") if wheel == "plain" else (wheel,)
    return Job(project, "s", "s", kind, "2.14", "13.0", python, wheel, archs, True, (), (), "0.1.0")


def test_a_row_per_project_torch_cuda_python():
    ledger = Ledger()
    for wheel in ("sm_90", "sm_80", "plain"):
        ledger.record(Entry(job(wheel=wheel), BUILT, (f"{wheel}.whl",)))
    ledger.record(Entry(job(python="3.12", wheel="sm_90"), FAILED, error="no"))
    ledger.record(Entry(job("demo", "sm_90", kind="native"), BUILT, ("d.whl",)))
    rows = summary_rows(ledger)
    assert rows == [
        {"project": "demo", "torch": "", "cuda": "13.0", "python": "abi3",
         "archs": ["sm_90"], "plain": False, "failed": []},
        {"project": "gsplat", "torch": "2.14", "cuda": "13.0", "python": "cp311",
         "archs": ["sm_80", "sm_90"], "plain": True, "failed": []},
        {"project": "gsplat", "torch": "2.14", "cuda": "13.0", "python": "cp312",
         "archs": [], "plain": False, "failed": ["sm_90"]},
    ]  # fmt: skip
    page = summary_page(ledger)
    assert "<td>demo</td><td>every (stable ABI)</td>" in page
    assert "<td>cp312</td><td>-</td><td>no</td><td>sm_90</td>" in page


def test_per_arch_wheels_get_twins_and_the_others_do_not():
    assert is_per_arch("g-1.0+pt214.cu130.sm90-cp311-cp311-linux_x86_64.whl")
    assert is_per_arch("d-0.1.0+cu130.sm90.ptx90-cp310-abi3-linux_x86_64.whl")
    assert not is_per_arch("g-1.0+pt214.cu130-cp311-cp311-linux_x86_64.whl")  # plain
    assert not is_per_arch("g-1.0+pt214.cu130-cp311-cp311-linux_x86_64-sm90.whl")  # a twin
    # host wheels (no GPU code) serve every GPU as they are: no twin
    assert not is_per_arch("t-0.0.10+pt214.cu130.host-cp39-abi3-linux_x86_64.whl")
    assert not is_per_arch("t-0.0.5+pt214.cpu-cp311-cp311-linux_x86_64.whl")
