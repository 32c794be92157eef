"""Run by jit_ahead.py as a script, in a child process with the build's variables: a project's
compiles at first use, made now. Standard library and torch only (it runs in the build's
Python with the unpacked wheel first on sys.path, and imports nothing of prebuild's).

``python jit_ahead_run.py SPEC OUT``: SPEC (JSON) holds ``root`` (the unpacked wheel) and
``triggers`` ([module, function or null], in order); each is imported, then its function
called with no arguments. torch.utils.cpp_extension's ``_jit_compile``, which ``load`` and
``load_inline`` go through, is wrapped to record what each compile made; ``load`` and
``load_inline`` are told ``verbose=True`` so that ninja's lines reach the build log (the
build's progress). OUT (JSON): ``built`` (name, file, site of each library) and
``failed`` (trigger, error, and the name whose compile raised, if one did) for the triggers
that raised; the next trigger runs regardless.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import sys
import traceback

VERBOSED = ("load", "load_inline")


def caller_site(torch_file: str) -> str:
    """``path:line`` of the first frame outside torch.utils.cpp_extension and this file."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename in (torch_file, __file__):
        frame = frame.f_back
    return f"{frame.f_code.co_filename}:{frame.f_lineno}" if frame is not None else "?"


def wrap(cpp_extension, built: list[dict], failing: list[str]) -> None:
    compile_ = cpp_extension._jit_compile

    def recording(name, *args, **kwargs):
        try:
            result = compile_(name, *args, **kwargs)
        except BaseException:
            failing.append(name)  # the compile itself failed, not the project's code around it
            raise
        if isinstance(result, str) and result.endswith(".so"):  # is_python_module=False
            file = result
        elif getattr(result, "__file__", None):
            file = result.__file__
        else:  # is_standalone: an executable, which no import serves
            return result
        built.append(
            {
                "name": name,
                "file": os.path.abspath(file),
                "site": caller_site(cpp_extension.__file__),
            }
        )
        return result

    cpp_extension._jit_compile = recording
    for entry in VERBOSED:
        original = getattr(cpp_extension, entry)
        place = list(inspect.signature(original).parameters).index("verbose")

        def verbose(*args, __original=original, __place=place, **kwargs):
            if len(args) <= __place:
                kwargs["verbose"] = True
            return __original(*args, **kwargs)

        setattr(cpp_extension, entry, verbose)


def main(spec_path: str, out_path: str) -> int:
    with open(spec_path, encoding="utf-8") as f:
        spec = json.load(f)
    sys.path.insert(0, spec["root"])
    import torch.utils.cpp_extension as cpp_extension

    built: list[dict] = []
    failed: list[dict] = []
    failing: list[str] = []
    wrap(cpp_extension, built, failing)
    for module_name, function in spec["triggers"]:
        shown = f"{module_name}.{function}()" if function else f"import {module_name}"
        print(f"prebuild: running `{shown}`", flush=True)
        failing.clear()
        try:
            module = importlib.import_module(module_name)
            if function:
                getattr(module, function)()
        except (Exception, SystemExit) as exc:
            traceback.print_exc()
            text = str(exc).strip().splitlines()
            error = f"{type(exc).__name__}: {text[-1] if text else ''}"
            failed.append(
                {"trigger": shown, "error": error, "compile": failing[-1] if failing else None}
            )
        sys.stdout.flush()
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump({"built": built, "failed": failed}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
