"""prebuild.tool.builder.plan: the wheels one build plans (through the pipeline's request:
tests/tool/builder/test_pipeline.py)."""

from __future__ import annotations

from prebuild.runtime.arch import parse_arch_list
from prebuild.tool.builder.plan import PlannedWheel


def test_planned_wheels_name_their_archs():
    assert PlannedWheel(parse_arch_list("sm_80,sm_90"), True).name == "sm_80,sm_90 +PTX"
