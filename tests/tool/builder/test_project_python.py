"""project_python: the project's own Python that its classic wheel leaves out (the file lists
of raytracing 2932926, BEVDepth d78c7b5 and Pointcept's pointops and their wheels, cut down),
and the extension its code imports from a package where the wheel installs it at the top level
(CenterPoint e26ea57's det3d/ops/iou3d_nms, its import lines)."""

from __future__ import annotations

from prebuild.tool.builder.project_python import (
    left_out_modules,
    left_out_modules_note,
    left_out_note,
    left_out_packages,
    package_import_note,
    package_imports,
    top_level_extensions,
)

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


# CenterPoint's det3d/ops/iou3d_nms: a setup.py built in place (setup.sh runs build_ext
# --inplace) naming its extension iou3d_nms_cuda, which the package's files import from it.
CENTERPOINT = {
    "__init__.py": "from det3d.ops.iou3d_nms import iou3d_nms_cuda\n",
    "iou3d_nms_utils.py": "import torch\n\nfrom . import iou3d_nms_cuda\nimport numpy as np\n",
    "setup.py": "setup(ext_modules=[CUDAExtension('iou3d_nms_cuda', ['src/iou3d.cpp'])])\n",
}
CENTERPOINT_WHEEL = [
    "iou3d_nms_cuda.cpython-311-x86_64-linux-gnu.so",
    "iou3d_nms-0.0.0.dist-info/RECORD",
]


def test_an_extension_the_code_imports_from_its_package_is_named_with_the_places():
    modules = top_level_extensions(CENTERPOINT_WHEEL)
    assert modules == {"iou3d_nms_cuda"}
    found = package_imports(modules, CENTERPOINT)
    assert found == {
        "iou3d_nms_cuda": [
            "__init__.py: from det3d.ops.iou3d_nms import iou3d_nms_cuda",
            "iou3d_nms_utils.py: from . import iou3d_nms_cuda",
        ]
    }
    note = package_import_note("iou3d_nms_cuda", found["iou3d_nms_cuda"])
    assert (
        "(`__init__.py: from det3d.ops.iou3d_nms import iou3d_nms_cuda`; `iou3d_nms_utils" in note
    )
    assert note.endswith("with the wheel installed, import it as `import iou3d_nms_cuda`")
    # the other forms: a submodule of it, a dotted import
    assert package_imports(modules, {"a.py": "from .iou3d_nms_cuda import nms\n"}) == {
        "iou3d_nms_cuda": ["a.py: from .iou3d_nms_cuda import nms"]
    }
    assert package_imports(modules, {"a.py": "import det3d.iou3d_nms_cuda as ext\n"}) == {
        "iou3d_nms_cuda": ["a.py: import det3d.iou3d_nms_cuda as ext"]
    }


def test_an_extension_imported_at_the_top_level_or_inside_its_package_is_left_alone():
    modules = top_level_extensions(CENTERPOINT_WHEEL)
    # GRNet's chamfer_dist: `import chamfer`; torch-ngp's raymarching: a fallback in a try
    assert package_imports(modules, {"a.py": "import iou3d_nms_cuda\n"}) == {}
    fallback = (
        "try:\n    from . import iou3d_nms_cuda\nexcept ImportError:\n    import iou3d_nms_cuda\n"
    )
    assert package_imports(modules, {"a.py": fallback}) == {}
    assert package_imports(modules, {"a.py": "from iou3d_nms_cuda import nms\n"}) == {}
    # diff-gaussian-rasterization: its _C lives in its package in the wheel: not top-level
    assert (
        top_level_extensions(["diff_gaussian_rasterization/_C.cpython-311-x86_64-linux-gnu.so"])
        == set()
    )
    # another module of the same name, a file that does not parse, a mere mention
    assert (
        package_imports(modules, {"a.py": "from . import other\n", "b.py": "iou3d_nms_cuda(\n"})
        == {}
    )


# DCNv2_latest (jinfagang/DCNv2_latest): `_ext` built at the top level, its wrappers beside
# setup.py, which names no py_modules (its __init__.py left out here: with it, the folder is a
# package of a larger checkout, below).
DCNV2 = {
    "setup.py": "setup(packages=find_packages(), ext_modules=[CUDAExtension('_ext', srcs)])\n",
    "dcn_v2.py": "import torch\nimport _ext as _backend\n",
    "dcn_v2_onnx.py": "import _ext as _backend\n",
    "testcpu.py": "import _ext\nfrom dcn_v2 import DCN\n",
    "unit_test.py": "import _ext\n",  # Swin's window_process has one
    "src/helper.py": "import _ext\n",
}


def test_the_python_beside_setup_py_importing_its_extension_is_named():
    modules = top_level_extensions(["_ext.cpython-311-x86_64-linux-gnu.so"])
    assert left_out_modules(modules, DCNV2) == ["dcn_v2.py", "dcn_v2_onnx.py"]
    note = left_out_modules_note(["dcn_v2.py", "dcn_v2_onnx.py"], ["_ext"])
    assert note.startswith(
        "the wheel holds _ext and none of the Python beside its setup.py that imports it "
        "(dcn_v2.py, dcn_v2_onnx.py): its setup.py names no py_modules"
    )
    # CenterPoint's: imported from its package (package_imports says that), not at the top
    assert (
        left_out_modules(
            top_level_extensions(CENTERPOINT_WHEEL),
            {**CENTERPOINT, "nms.py": "from . import iou3d_nms_cuda\n"},
        )
        == []
    )
    # another backend's project: its configuration names what it ships
    assert left_out_modules(modules, {"dcn_v2.py": "import _ext\n"}) == []
    # a package of a larger checkout (torch-ngp's raymarching: `from .raymarching import *`),
    # whose Python is imported from there, the extension from the wheel
    assert left_out_modules(modules, {**DCNV2, "__init__.py": "from .dcn_v2 import *\n"}) == []
