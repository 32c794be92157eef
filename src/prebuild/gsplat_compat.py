"""Run gsplat's own Python code (its densification strategies, its helpers, its tests) on
prebuild's kernels, with no gsplat CUDA extension built or loaded.

prebuild's ops have gsplat 1.5.3's names and signatures, so gsplat's Python layers work on
them unchanged once they refer to them::

    import prebuild.gsplat_compat
    prebuild.gsplat_compat.use_prebuild_kernels()
    from gsplat.strategy import DefaultStrategy   # splits Gaussians with prebuild's covariances

Importing this module imports neither gsplat nor torch.
"""

from __future__ import annotations

import importlib
import sys

# gsplat's CUDA-backed functions that prebuild provides (gsplat.cuda._wrapper names).
GSPLAT_OPS = (
    "fully_fused_projection",
    "isect_tiles",
    "isect_offset_encode",
    "rasterize_to_pixels",
    "spherical_harmonics",
    "quat_scale_to_covar_preci",
    "proj",
)
# gsplat's other CUDA-backed functions prebuild provides: (module, name).
_OTHER_OPS = (("gsplat.rendering", "rasterization"), ("gsplat.relocation", "compute_relocation"))
# The gsplat modules that bind those functions by name when imported.
_GSPLAT_MODULES = (
    "gsplat",
    "gsplat.cuda._wrapper",
    "gsplat.rendering",
    "gsplat.relocation",
    "gsplat.strategy.ops",
)


def _refuse_cuda(name: str):
    """Stands in for gsplat's ``_make_lazy_cuda_func``: the op raises when called."""

    def refuse(*args, **kwargs):
        raise RuntimeError(
            f"gsplat's CUDA op {name!r} was called, which prebuild does not provide; "
            "prebuild.gsplat_compat replaced gsplat's CUDA extension (no JIT build happens)"
        )

    return refuse


def _refuse_cuda_object(name: str):
    """Stands in for gsplat's ``_make_lazy_cuda_obj`` (its extension's enums and parameter
    structs, used by the camera models prebuild does not provide): raises at once."""
    raise RuntimeError(
        f"gsplat's CUDA object {name!r} was asked for, which prebuild does not provide; "
        "prebuild.gsplat_compat replaced gsplat's CUDA extension (no JIT build happens)"
    )


# gsplat's lazy loaders of its extension (gsplat.cuda._wrapper names): each would import
# gsplat.cuda._backend, which compiles the extension when it is not built.
_LAZY_LOADERS = {"_make_lazy_cuda_func": _refuse_cuda, "_make_lazy_cuda_obj": _refuse_cuda_object}


def use_prebuild_kernels() -> dict[str, object]:
    """Points every reference gsplat's modules hold to one of its CUDA-backed ops (and to
    ``rasterization`` and MCMC's ``compute_relocation``) at prebuild's function of the same
    name, and makes any other gsplat CUDA op or object raise instead of building gsplat's
    extension (both of gsplat's lazy loaders, in every module that holds them).
    Returns {name: prebuild function}.

    Raises ImportError when gsplat is not installed.
    """
    try:
        wrapper = importlib.import_module("gsplat.cuda._wrapper")
    except ImportError as exc:
        raise ImportError(
            "prebuild.gsplat_compat needs gsplat installed (pip install --no-deps gsplat)"
        ) from exc
    for name in _GSPLAT_MODULES:
        importlib.import_module(name)

    import prebuild

    replacements = {getattr(wrapper, name): getattr(prebuild, name) for name in GSPLAT_OPS}
    for module, name in _OTHER_OPS:
        replacements[getattr(sys.modules[module], name)] = getattr(prebuild, name)
    # The loaders too, wherever a gsplat module bound them (gsplat.relocation imports one).
    for name, refuse in _LAZY_LOADERS.items():
        if getattr(wrapper, name, refuse) is not refuse:
            replacements[getattr(wrapper, name)] = refuse
    for module_name, module in list(sys.modules.items()):
        if module is None or not (module_name == "gsplat" or module_name.startswith("gsplat.")):
            continue
        for attr, value in list(vars(module).items()):
            if callable(value) and value in replacements:
                setattr(module, attr, replacements[value])
    return {name: getattr(prebuild, name) for name in (*GSPLAT_OPS, *(n for _, n in _OTHER_OPS))}
