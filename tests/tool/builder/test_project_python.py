"""project_python: the project's own Python that its classic wheel leaves out (the file lists
of raytracing 2932926, BEVDepth d78c7b5 and Pointcept's pointops and their wheels, cut down)."""

from __future__ import annotations

from prebuild.tool.builder.project_python import left_out_note, left_out_packages

RAYTRACING = ["setup.py", "raytracing/__init__.py", "raytracing/api.py", "tests/test_rt.py"]
BEVDEPTH = [
    "setup.py",
    "bevdepth/ops/voxel_pooling_train/__init__.py",
    "bevdepth/ops/voxel_pooling_train/voxel_pooling_train.py",
    "bevdepth/exps/base_exp.py",
    "scripts/gen_info.py",
]


def test_a_package_the_wheel_leaves_out_is_named():
    assert left_out_packages(RAYTRACING, ["_raytracing.cpython-311-x86_64-linux-gnu.so"]) == [
        "raytracing"
    ]
    # a folder without __init__.py whose extensions the wheel holds and none of its Python
    bev = ["bevdepth/ops/voxel_pooling_train/voxel_pooling_train_ext.cpython-311-x86_64.so"]
    assert left_out_packages(BEVDEPTH, bev) == ["bevdepth"]
    note = left_out_note(["bevdepth"])
    assert note.startswith("the wheel holds none of the project's Python in bevdepth/: ")
    assert note.endswith("its setup.py needs packages=find_packages() (or the package named)")


def test_a_wheel_with_the_package_or_a_folder_that_is_no_package_is_left_alone():
    shipped = ["raytracing/__init__.py", "raytracing/api.py", "_raytracing.so"]
    assert left_out_packages(RAYTRACING, shipped) == []
    # scripts/ and a folder of Python with no __init__.py and nothing in the wheel: not a
    # package a user imports
    assert left_out_packages(["setup.py", "utils/plot.py", "scripts/x.py"], ["_C.so"]) == []


# Pointcept's libs/pointops: its setup.py ships functions/ as the package pointops
# (package_dir), and its src/ holds the C++ sources beside an empty __init__.py.
POINTOPS = [
    "setup.py",
    "__init__.py",
    "functions/__init__.py",
    "functions/query.py",
    "functions/utils.py",
    "src/__init__.py",
]
POINTOPS_WHEEL = [
    "pointops/__init__.py",
    "pointops/query.py",
    "pointops/utils.py",
    "pointops/_C.cpython-311-x86_64-linux-gnu.so",
]


def test_a_folder_shipped_under_another_name_or_with_no_code_is_left_alone():
    empty = frozenset({"src/__init__.py"})
    assert left_out_packages(POINTOPS, POINTOPS_WHEEL, empty) == []
    # the same src/ with code in it, and functions/ with a module the wheel lacks: both named
    assert left_out_packages(POINTOPS, POINTOPS_WHEEL) == ["src"]
    more = [*POINTOPS, "functions/sampling.py"]
    assert left_out_packages(more, POINTOPS_WHEEL, empty) == ["functions"]


def test_a_project_built_by_another_backend_is_left_alone():
    """xlstm 2.0.6 (scikit-build-core) ships what its configuration names; its experiments/,
    a package of scripts, is no setup.py's omission."""
    xlstm = ["xlstm/__init__.py", "experiments/__init__.py", "experiments/main.py"]
    wheel = ["xlstm/__init__.py", "xlstm/_slstm.cpython-311-x86_64-linux-gnu.so"]
    assert left_out_packages(xlstm, wheel) == []
    assert left_out_packages(["setup.py", *xlstm], wheel) == ["experiments"]
