"""Run by jit_ahead.py as a script, in a child process with the build's variables: a project's
compiles at first use, made now. It runs in the build's Python with the unpacked wheel first on
sys.path, and imports of prebuild only its runtime guard's ``call_key`` (the key the guard
computes again at run time to serve each library).

``python jit_ahead_run.py SPEC OUT``: SPEC (JSON) holds ``root`` (the unpacked wheel),
``prebuild`` (the folder prebuild is imported from) and ``triggers`` ([module, function or
null, call, the module whose import must import it first or "", how to show it, the user's
code or ""], in order): each module is imported, then its function called with no arguments
(``function`` may be ``object.method``; with ``call`` false, a property read); a trigger whose
module the package imports only under a condition of its own that is false here is
``skipped``; the user's code (``--first-use``) is run as a script's.
torch.utils.cpp_extension's ``load``, ``load_inline`` and ``_jit_compile`` (which the other two
go through) are wrapped: the project's call is keyed, ``load`` and ``load_inline`` are told
``verbose=True`` so that ninja's lines reach the build log (the build's progress), and
``_jit_compile`` records what each compile made. OUT (JSON): ``built`` (name, key, file, site of
each library, and the trigger that ran it) and ``failed`` (trigger, error, and the name whose
compile raised, if one did) for the triggers that raised; the next trigger runs regardless.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import sys
import traceback

ENTRIES = ("load", "load_inline", "_jit_compile")


def caller_site(root: str) -> str:
    """``path:line`` of the innermost frame in the project's files (under ``root``), "?" if none
    is: between it and torch may be this file's wrappers, and those of the guards of other
    prebuilt wheels installed here."""
    frame = sys._getframe(1)
    while frame is not None and not frame.f_code.co_filename.startswith(root):
        frame = frame.f_back
    return f"{frame.f_code.co_filename}:{frame.f_lineno}" if frame is not None else "?"


def wrap(
    cpp_extension, root: str, call_key, built: list[dict], failing: list[str], running: list[str]
) -> None:
    """Wrap the module's compile entry points: the project's own call (the outermost) keyed,
    each library torch's compile returns recorded under that key and the trigger ``running``
    (its last)."""
    calls: list[str] = []  # the keys of the entry points running, outermost first

    def wrapped(entry, original):
        parameters = list(inspect.signature(original).parameters)
        place = parameters.index("verbose") if "verbose" in parameters else -1

        def call(*args, **kwargs):
            calls.append(call_key(original, args, kwargs, root))
            if entry != "_jit_compile" and 0 <= len(args) <= place:
                kwargs["verbose"] = True
            try:
                result = original(*args, **kwargs)
            except BaseException:
                if entry == "_jit_compile":  # the compile failed, not the project's code
                    failing.append(kwargs.get("name", args[0] if args else "?"))
                raise
            finally:
                key = calls[0]
                calls.pop()
            if entry == "_jit_compile":
                record(kwargs.get("name", args[0] if args else "?"), key, result)
            return result

        return call

    def record(name: str, key: str, result) -> None:
        if isinstance(result, str) and result.endswith(".so"):  # is_python_module=False
            file = result
        elif getattr(result, "__file__", None):
            file = result.__file__
        else:  # is_standalone: an executable, which no import serves
            return
        site = caller_site(os.path.join(root, ""))
        built.append(
            {
                "name": name,
                "key": key,
                "file": os.path.abspath(file),
                "site": site,
                "trigger": running[-1] if running else "",
            }
        )

    for entry in ENTRIES:
        setattr(cpp_extension, entry, wrapped(entry, getattr(cpp_extension, entry)))


def main(spec_path: str, out_path: str) -> int:
    with open(spec_path, encoding="utf-8") as f:
        spec = json.load(f)
    sys.path.insert(0, spec["root"])
    sys.path.append(spec["prebuild"])
    import torch.utils.cpp_extension as cpp_extension

    from prebuild.runtime.classic_guard import call_key

    built: list[dict] = []
    failed: list[dict] = []
    failing: list[str] = []
    running: list[str] = []  # the trigger that runs
    wrap(cpp_extension, spec["root"], call_key, built, failing, running)
    skipped: list[dict] = []
    for module_name, function, call, only_after, shown, code in spec["triggers"]:
        failing.clear()
        try:
            if only_after:  # a module its package imports only under a condition of its own
                importlib.import_module(only_after)
                if module_name not in sys.modules:
                    skipped.append({"trigger": shown, "importer": only_after})
                    continue
            print(f"prebuild: running `{shown}`" + (" (--first-use)" if code else ""), flush=True)
            running[:] = [shown]
            if code:  # the user's, run as a script's code is
                exec(compile(code, "<--first-use>", "exec"), {"__name__": "__main__"})
                continue
            target = importlib.import_module(module_name)
            for name in function.split(".") if function else ():
                target = getattr(target, name)  # reading a property runs it
            if function and call:
                target()
        except (Exception, SystemExit) as exc:
            traceback.print_exc()
            text = str(exc).strip().splitlines()
            error = f"{type(exc).__name__}: {text[-1] if text else ''}"
            compile_ = failing[-1] if failing else None
            failed.append({"trigger": shown, "error": error, "compile": compile_})
        finally:
            sys.stdout.flush()
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump({"built": built, "failed": failed, "skipped": skipped}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
