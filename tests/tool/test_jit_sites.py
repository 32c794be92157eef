"""jit_sites.first_use_triggers: what runs each first-use compile of a package, read from its
Python as the field's projects write it (each source below is the shape of a real project's,
reduced to what the reading sees)."""

from __future__ import annotations

import pytest

from prebuild.tool.jit_sites import (
    Trigger,
    Unreached,
    first_use_triggers,
    given_trigger,
    source_module,
)

# KNN_CUDA (unlimblue/KNN_CUDA 619617b): load() in a function taking the name, which the
# module calls as it runs.
KNN_CUDA = """\
import os
from torch.utils.cpp_extension import load

def load_cpp_ext(ext_name):
    root_dir = os.path.join(os.path.split(__file__)[0])
    ext = load(name=ext_name, sources=[os.path.join(root_dir, "knn.cu")])
    return ext

_knn = load_cpp_ext("knn")

def knn(ref, query, k):
    return _knn.knn(ref, query, k)
"""

# nvdiffrast 0.3 (nvdiffrast/torch/ops.py): a cached plugin built at the first op, through the
# module's qualified name; ops need arguments, the plugin getter none.
NVDIFFRAST = """\
import torch
import torch.utils.cpp_extension

_cached_plugin = None
def _get_plugin(gl=False):
    global _cached_plugin
    if _cached_plugin is None:
        torch.utils.cpp_extension.load(name="nvdiffrast_plugin", sources=[])
    return _cached_plugin

def get_log_level():
    return _get_plugin().get_log_level()

def rasterize(glctx, pos, tri, resolution):
    return _get_plugin().rasterize_fwd(glctx, pos, tri, resolution)

class RasterizeCudaContext:
    def __init__(self, device=None):
        self.cpp_wrapper = _get_plugin().RasterizeCRStateWrapper(device)
"""

# StyleGAN3 (torch_utils): a helper of one module, called by the _init() of others.
CUSTOM_OPS = """\
import torch.utils.cpp_extension

def get_plugin(module_name, sources, headers=None, source_dir=None, **build_kwargs):
    torch.utils.cpp_extension.load(name=module_name, sources=sources, **build_kwargs)
"""
BIAS_ACT = """\
from .. import custom_ops

_plugin = None
def _init():
    global _plugin
    if _plugin is None:
        _plugin = custom_ops.get_plugin(module_name="bias_act_plugin", sources=["bias_act.cu"])
    return True

def bias_act(x, b=None):
    if _init():
        return x
"""

# gsplat 1.5.3 (gsplat/cuda/_backend.py): the private entry point, imported in parentheses,
# called at module level inside try/except.
GSPLAT = """\
from torch.utils.cpp_extension import (
    _get_build_directory,
    _jit_compile,
)
try:
    from gsplat import csrc as _C
except ImportError:
    _C = _jit_compile("gsplat_cuda", [])
"""


def test_the_field_s_shapes_of_first_use_compiles_are_each_reached():
    triggers, unreached = first_use_triggers(
        {
            "knn_cuda/__init__.py": KNN_CUDA,
            "nvdiffrast/torch/ops.py": NVDIFFRAST,
            "torch_utils/custom_ops.py": CUSTOM_OPS,
            "torch_utils/ops/bias_act.py": BIAS_ACT,
            "gsplat/cuda/_backend.py": GSPLAT,
            "other/module.py": "def f(x):\n    return x\n",
        }
    )
    assert triggers == [
        # imports first, in the order of the files: whatever a call needs is imported
        Trigger("gsplat.cuda._backend", None, "gsplat/cuda/_backend.py:8"),
        Trigger("knn_cuda", None, "knn_cuda/__init__.py:6"),
        # the function holding load(), needing no argument; get_log_level() (which also
        # reaches it) is not called: the nearest function is
        Trigger("nvdiffrast.torch.ops", "_get_plugin", "nvdiffrast/torch/ops.py:8"),
        # get_plugin needs arguments: the nearest caller needing none, in another module
        Trigger("torch_utils.ops.bias_act", "_init", "torch_utils/custom_ops.py:4"),
    ]
    assert unreached == []
    assert [str(t) for t in triggers[1:3]] == [
        "import knn_cuda",
        "nvdiffrast.torch.ops._get_plugin()",
    ]


def test_what_no_call_without_arguments_reaches_is_said_with_why():
    methods = (
        "import torch.utils.cpp_extension as cext\n"
        "class Backend:\n"
        "    def load(self):\n"
        "        self.C = cext.load(name='b', sources=[])\n"
        "def build(name, sources):\n"
        "    return cext.load_inline(name=name, cpp_sources=sources)\n"
        "def caller(x):\n"
        "    return build('c', x)\n"
    )
    triggers, unreached = first_use_triggers({"pkg/backend.py": methods})
    assert triggers == []
    assert unreached == [
        Unreached(
            "pkg/backend.py:4",
            "inside the method `Backend.load`, of an object its users' code makes (no module "
            "of the package makes one)",
            "from pkg.backend import Backend; Backend(...).load()",
        ),
        Unreached(
            "pkg/backend.py:6",
            "inside `build`, which needs arguments and which no function of the package "
            "that needs none calls",
            "from pkg.backend import build; build(...)",
        ),
    ]


def test_a_class_compiling_as_it_is_made_is_made_where_the_module_makes_it_or_with_no_argument():
    classes = (
        "from torch.utils.cpp_extension import load\n"
        "class Made:\n"
        "    def __init__(self, name):\n"
        "        self.C = load(name=name, sources=[])\n"
        "    def other(self):\n"
        "        return load(name='other', sources=[])\n"
        "MADE = Made('made')\n"
        "class Lazy:\n"
        "    def __init__(self, verbose=False):\n"
        "        self.C = load(name='lazy', sources=[])\n"
        "class Never:\n"
        "    def build(self):\n"
        "        return load(name='never', sources=[])\n"
    )
    triggers, unreached = first_use_triggers({"pkg/ext.py": classes})
    assert triggers == [
        Trigger("pkg.ext", None, "pkg/ext.py:4"),
        # a method needing no argument of an object the module makes
        Trigger("pkg.ext", "MADE.other", "pkg/ext.py:6"),
        Trigger("pkg.ext", "Lazy", "pkg/ext.py:10"),
    ]
    assert [str(t) for t in triggers[1:]] == ["pkg.ext.MADE.other()", "pkg.ext.Lazy()"]
    assert [(u.site, u.example) for u in unreached] == [
        ("pkg/ext.py:13", "from pkg.ext import Never; Never(...).build()")
    ]


# tmol (uw-ipd/tmol): the package's own load(), passing on what it is given with its include
# folders, called at module level of each module that compiles.
TMOL_WRAPPER = """\
import torch.utils.cpp_extension

def load(*args, **kwargs):
    kwargs["extra_include_paths"] = kwargs.get("extra_include_paths", []) + ["include"]
    return torch.utils.cpp_extension.load(*args, **kwargs)
"""
TMOL_USER = """\
from tmol.utils.cpp_extension import load

_compiled = load(name="lj", sources=["lj.cpp"])
"""


def test_a_function_taking_only_keywords_it_passes_on_is_called_with_none():
    """`**kwargs` alone has nothing to pass on when called with none (unlike `*args`, which a
    wrapper needs): the function is its own trigger."""
    plugin = (
        "from torch.utils.cpp_extension import load\n"
        "def get_plugin(**build_kwargs):\n"
        "    return load(name='plugin', sources=['p.cu'], **build_kwargs)\n"
    )
    triggers, unreached = first_use_triggers({"pkg/plugin.py": plugin})
    assert triggers == [Trigger("pkg.plugin", "get_plugin", "pkg/plugin.py:3")]
    assert unreached == []


def test_a_package_helper_called_as_other_modules_run_is_run_by_importing_them():
    """A wrapper taking ``*args, **kwargs`` is not called with none (torch's load would fail):
    the modules importing its module and calling it as they run are imported instead; a
    module calling a function of that name without importing the helper's module is not."""
    triggers, unreached = first_use_triggers(
        {
            "tmol/utils/cpp_extension.py": TMOL_WRAPPER,
            "tmol/score/lj.py": TMOL_USER,
            "tmol/score/elec.py": TMOL_USER.replace('"lj"', '"elec"'),
            "tmol/io.py": "import json\nCONFIG = json.load(open('c.json'))\n",
        }
    )
    site = "tmol/utils/cpp_extension.py:5"
    assert triggers == [
        Trigger("tmol.score.elec", None, site),
        Trigger("tmol.score.lj", None, site),
    ]
    assert unreached == []


# tmol (uw-ipd/tmol a recent main): each module's ops come through a helper of another module
# (`load_ops`), which calls the package's own load() under a switch of its own.
TMOL_LOAD_EXT = """\
def load_ops(module_name, file, sources, ops_name):
    if ensure_compiled_or_jit():
        from tmol.utils.cpp_extension import load, relpaths

        load(module_name, relpaths(file, sources), is_python_module=False)
"""
TMOL_LJLK = """\
from tmol._load_ext import load_ops

_ops = load_ops(__name__, __file__, ["compiled.ops.cpp", "ljlk.cuda.cu"], "tmol_ljlk")
"""


def test_a_helper_two_calls_from_the_compile_is_run_by_the_modules_calling_it_as_they_run():
    """Every module reached through functions needing arguments is found, not only the
    nearest: genbonded calls the package's load() as it runs, ljlk and elec call load_ops,
    which calls it."""
    triggers, unreached = first_use_triggers(
        {
            "tmol/utils/cpp_extension.py": TMOL_WRAPPER,
            "tmol/_load_ext.py": TMOL_LOAD_EXT,
            "tmol/score/ljlk/compiled.py": TMOL_LJLK,
            "tmol/score/elec/compiled.py": TMOL_LJLK.replace("ljlk", "elec"),
            "tmol/score/genbonded/compiled.py": TMOL_USER,
            # its tests' own extensions: not made ahead of time, said
            "tmol/tests/score/ljlk/compiled.py": TMOL_LJLK,
            "tmol/tests/utility/test_heap.py": TMOL_USER,
        }
    )
    site = "tmol/utils/cpp_extension.py:5"
    assert triggers == [
        Trigger("tmol.score.genbonded.compiled", None, site),
        Trigger("tmol.score.elec.compiled", None, site),
        Trigger("tmol.score.ljlk.compiled", None, site),
    ]
    assert unreached == [
        Unreached(
            site,
            "in the package's tests (2 modules: tmol.tests.utility.test_heap, "
            "tmol.tests.score.ljlk.compiled), which its users do not run: not made ahead of time",
        )
    ]


def test_a_static_or_class_method_needing_no_argument_is_called_on_its_class():
    """A singleton's loader (`Ops.get()` caching the module on the class): no object needed."""
    singleton = (
        "from torch.utils.cpp_extension import load\n"
        "class Ops:\n"
        "    _C = None\n"
        "    @classmethod\n"
        "    def get(cls):\n"
        "        if cls._C is None:\n"
        "            cls._C = load(name='ops', sources=[])\n"
        "        return cls._C\n"
        "    @staticmethod\n"
        "    def build():\n"
        "        return load(name='static', sources=[])\n"
        "    @staticmethod\n"
        "    def named(name):\n"
        "        return load(name=name, sources=[])\n"
    )
    triggers, unreached = first_use_triggers({"pkg/ops.py": singleton})
    assert triggers == [
        Trigger("pkg.ops", "Ops.get", "pkg/ops.py:7"),
        Trigger("pkg.ops", "Ops.build", "pkg/ops.py:11"),
    ]
    assert [str(t) for t in triggers] == ["pkg.ops.Ops.get()", "pkg.ops.Ops.build()"]
    # one needing arguments: the call its users make is for them to give (--first-use)
    assert unreached == [
        Unreached(
            "pkg/ops.py:14",
            "inside the method `Ops.named`, which needs arguments",
            "from pkg.ops import Ops; Ops.named(...)",
        )
    ]


# ColBERT (stanford-futuredata/ColBERT 501c29d): each class compiles its CPU ops in a class
# method taking whether a GPU is used, called from its __init__ with the config's answer.
COLBERT = """\
from torch.utils.cpp_extension import load

class StridedTensor:
    def __init__(self, packed_tensor, lengths, use_gpu=True):
        StridedTensor.try_load_torch_extensions(use_gpu)

    @classmethod
    def try_load_torch_extensions(cls, use_gpu):
        if hasattr(cls, "loaded_extensions") or use_gpu:
            return
        segmented_lookup_cpp = load(name="segmented_lookup_cpp", sources=["x.cpp"])
        cls.segmented_lookup = segmented_lookup_cpp.segmented_lookup_cpp
"""


def test_a_class_method_needing_an_argument_is_said_with_the_call_its_users_make():
    triggers, unreached = first_use_triggers({"colbert/search/strided_tensor.py": COLBERT})
    assert triggers == []
    assert unreached == [
        Unreached(
            "colbert/search/strided_tensor.py:11",
            "inside the method `StridedTensor.try_load_torch_extensions`, which needs arguments",
            "from colbert.search.strided_tensor import StridedTensor; "
            "StridedTensor.try_load_torch_extensions(...)",
        )
    ]


def test_code_the_user_gives_is_a_trigger_where_it_is_python():
    trigger = given_trigger("from pkg import Ops\nOps.load(False)\n")
    assert (trigger.code, str(trigger)) == (
        "from pkg import Ops\nOps.load(False)\n",
        "from pkg import Ops; Ops.load(False)",
    )
    with pytest.raises(ValueError, match=r"--first-use 'Ops.load\(' is not Python: .* \(line 1\)"):
        given_trigger("Ops.load(")
    with pytest.raises(ValueError, match="--first-use was given no code"):
        given_trigger("  ")


# optimum-quanto 0.2.7: a class of one module compiles in a property, read at the first op;
# other modules make one object of it each, at module level.
QUANTO_EXTENSION = """\
from torch.utils.cpp_extension import load

class Extension(object):
    def __init__(self, name, root_dir, sources, extra_cflags=None):
        self.name, self.sources, self._lib = name, sources, None

    @property
    def lib(self):
        if self._lib is None:
            self._lib = load(name=self.name, sources=self.sources)
        return self._lib
"""
QUANTO_CUDA = """\
import os
from ..extension import Extension, register_extension

ext = Extension("quanto_cuda", root_dir=os.path.dirname(__file__), sources=["unpack.cu"])
register_extension(ext)

def unpack_cuda(t, bits):
    return ext.lib.unpack(t, bits)
"""


def test_a_property_compiling_is_read_of_each_object_the_package_makes():
    triggers, unreached = first_use_triggers(
        {
            "optimum/quanto/library/extensions/extension.py": QUANTO_EXTENSION,
            "optimum/quanto/library/extensions/cuda/__init__.py": QUANTO_CUDA,
            "optimum/quanto/library/extensions/cpp/__init__.py": QUANTO_CUDA.replace(
                "quanto_cuda", "quanto_cpp"
            ),
        }
    )
    site = "optimum/quanto/library/extensions/extension.py:10"
    assert triggers == [
        Trigger("optimum.quanto.library.extensions.cpp", "ext.lib", site, call=False),
        Trigger("optimum.quanto.library.extensions.cuda", "ext.lib", site, call=False),
    ]
    assert str(triggers[1]) == "optimum.quanto.library.extensions.cuda.ext.lib"
    assert unreached == []


def test_a_module_its_package_imports_only_under_a_condition_runs_only_where_it_is_imported():
    """optimum-quanto's extensions package imports its CUDA, HIP and Metal modules each under
    its own condition, its C++ one always: their compiles run only where importing the
    package imports their module (the HIP and Metal ones, never on a CUDA machine)."""
    package = (
        "import torch\n"
        "from .cpp import *\n"
        "if torch.cuda.is_available():\n"
        "    if torch.version.cuda:\n"
        "        from .cuda import *\n"
        "    elif torch.version.hip:\n"
        "        from .hip import *\n"
        "if torch.backends.mps.is_available():\n"
        "    from . import mps\n"
    )
    sources = {"optimum/quanto/library/extensions/extension.py": QUANTO_EXTENSION}
    sources["optimum/quanto/library/extensions/__init__.py"] = package
    for platform in ("cpp", "cuda", "hip", "mps"):
        sources[f"optimum/quanto/library/extensions/{platform}/__init__.py"] = QUANTO_CUDA
    triggers, _ = first_use_triggers(sources)
    extensions = "optimum.quanto.library.extensions"
    assert {t.module.rpartition(".")[2]: t.only_after for t in triggers} == {
        "cpp": "",  # imported unconditionally: run as it is
        "cuda": extensions,
        "hip": extensions,
        "mps": extensions,
    }


def test_aliases_and_files_that_are_not_python_are_read_or_left():
    aliased = (
        "from torch.utils import cpp_extension as ce\n"
        "from torch.utils.cpp_extension import load as jit_load\n"
        "A = ce.load(name='a', sources=[])\n"
        "if True:\n"
        "    def lazy():\n"
        "        return jit_load(name='b', sources=[])\n"
        "def load(x):\n"  # a function of the project's own named load: not torch's
        "    return x\n"
    )
    deep = "X = " + " + ".join(["1"] * 5000) + "\n"  # generated code: too deep to walk
    triggers, unreached = first_use_triggers(
        {
            "src/pkg/__init__.py": aliased,
            "pkg/broken.py": "def (:\n",
            "pkg/plain.py": "load(1)\n",
            "pkg/generated.py": deep,
        }
    )
    assert triggers == [
        Trigger("pkg", None, "src/pkg/__init__.py:3"),
        Trigger("pkg", "lazy", "src/pkg/__init__.py:6"),
    ]
    assert unreached == []
    assert source_module("pkg/sub/__init__.py") == "pkg.sub"
    assert source_module("top.py") == "top"
