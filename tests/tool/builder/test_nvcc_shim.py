"""prebuild.tool.builder.nvcc_shim: every arch option of a call is replaced by the requested
-gencode options, everything else is kept in order; queries pass through."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

from hypothesis import given
from hypothesis import strategies as st

from prebuild.tool.builder.nvcc_shim import ARCH_OPTIONS, QUERY_OPTIONS, SHIM_ENV_GENCODE, SHIM_ENV_LOG, SHIM_ENV_REAL, rewrite_args

WANT = ["-gencode=arch=compute_90,code=sm_90"]


def test_hard_coded_gencodes_are_replaced_and_other_flags_kept():
    given_args = ["-c", "k.cu", "-o", "k.o", "-gencode", "arch=compute_75,code=sm_75",
                  "-gencode=arch=compute_80,code=[sm_80,compute_80]", "--use_fast_math", "--maxrregcount=64",
                  "-arch=sm_86", "--gpu-architecture", "compute_89", "-code=sm_89", "--generate-code=arch=compute_70,code=sm_70",
                  "-O3", "-Xptxas", "-v"]  # fmt: skip
    assert rewrite_args(given_args, WANT) == ["-c", "k.cu", "-o", "k.o", "--use_fast_math", "--maxrregcount=64",
                                              "-O3", "-Xptxas", "-v", *WANT]  # fmt: skip


def test_queries_pass_through():
    for query in (["--version"], ["-V"], ["--list-gpu-code"]):
        assert rewrite_args(query, WANT) == query


# Any option but a query (--version, -h, ...: those calls pass through untouched, tested above).
plain = (st.text(alphabet="abcdefghijklmnopqrstuvwxyz_=.,/0123456789+", min_size=1, max_size=12).map(lambda s: "-" + s)
         .filter(lambda a: a not in QUERY_OPTIONS))
arch_option = st.tuples(st.sampled_from(ARCH_OPTIONS), st.sampled_from(["sm_75", "arch=compute_80,code=sm_80", "native"]))


@given(st.lists(st.one_of(plain.map(lambda a: [a]),
                          arch_option.map(lambda o: [o[0], o[1]]),
                          arch_option.map(lambda o: [f"{o[0]}={o[1]}"])), max_size=12))  # fmt: skip
def test_property_no_arch_option_survives_and_the_rest_keeps_its_order(groups):
    args = [a for g in groups for a in g]
    out = rewrite_args(args, WANT)
    assert out[-1:] == WANT
    kept = [g[0] for g in groups if len(g) == 1 and not g[0].startswith(tuple(f"{o}=" for o in ARCH_OPTIONS))
            and g[0] not in ARCH_OPTIONS]  # fmt: skip
    if any(a in ("--version", "-V", "--help", "-h", "--list-gpu-code", "--list-gpu-arch") for a in args):
        assert out == args
    else:
        assert out[:-1] == kept


def test_the_shim_runs_the_real_nvcc_with_the_rewritten_command(tmp_path):
    fake = tmp_path / "nvcc"
    fake.write_text("#!/bin/sh\nprintf '%s\\n' \"$@\" > \"$(dirname \"$0\")/called\"\nexit 7\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    log = tmp_path / "log.jsonl"
    env = {**os.environ, SHIM_ENV_REAL: str(fake), SHIM_ENV_GENCODE: json.dumps(WANT), SHIM_ENV_LOG: str(log)}
    proc = subprocess.run([sys.executable, "-m", "prebuild.tool.builder.nvcc_shim", "-c", "a.cu", "-arch=sm_75"], env=env)
    assert proc.returncode == 7  # the real nvcc's exit status
    assert (tmp_path / "called").read_text().split() == ["-c", "a.cu", *WANT]
    (entry,) = [json.loads(line) for line in log.read_text().splitlines()]
    assert entry == {"given": ["-c", "a.cu", "-arch=sm_75"], "run": ["-c", "a.cu", *WANT]}
