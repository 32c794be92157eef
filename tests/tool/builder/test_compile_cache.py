"""The compile cache (prebuild.tool.builder.compile_cache) without a build: the spec, the
server's environment, sccache's counts, the launcher, the storage checks, a real sccache server
caching a small g++ compile, and the fixed-name workspaces. The builds through it are in
test_cache_builds.py."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from prebuild.tool.builder import compile_cache as cc
from prebuild.tool.builder.compile_cache import (
    CacheSpec,
    CacheSpecError,
    CacheStats,
    check_storage,
    parse_cache_spec,
    server_env,
    stable_workspace,
)

# What `sccache --show-stats --stats-format json` printed here (sccache 0.16.0) after a warm
# nvcc call of another arch than a cached one and two g++ compiles, one of them a hit (trimmed).
STATS_JSON = {
    "stats": {
        "compile_requests": 3,
        "cache_hits": {
            "counts": {"C/C++": 1, "CUDA (Device code)": 1},
            "adv_counts": {"c++ [gcc]": 1, "cuda [cudafe++]": 1},
        },
        "cache_misses": {
            "counts": {"C/C++": 1, "CUDA": 1, "PTX": 1, "CUBIN": 1},
            "adv_counts": {"c++ [gcc]": 1, "cuda [nvcc]": 1, "ptx [cicc]": 1, "cubin [ptxas]": 1},
        },
        "cache_errors": {"counts": {}, "adv_counts": {}},
        "cache_read_errors": 0,
        "cache_write_errors": 0,
    },
    "cache_location": 'Local disk: "/tmp/cache"',
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- the spec ---


@pytest.mark.parametrize("text", [None, "", "  ", "off", "OFF", "none", "0"])
def test_no_cache_when_absent_or_off(text):
    assert parse_cache_spec(text) is None


def test_a_directory_is_made_absolute(tmp_path):
    assert parse_cache_spec("cache", cwd=tmp_path) == CacheSpec("dir", str(tmp_path / "cache"))
    assert parse_cache_spec("~/x").location == str(Path.home() / "x")


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:6379",
        "redis://cache.lab:6380/2",
        "rediss://host:6380",
        "redis://user:secret@host:1/0",
        "redis://host",
    ],
)
def test_redis_urls(url):
    assert parse_cache_spec(url) == CacheSpec("redis", url)


def test_sccache_means_its_own_settings():
    spec = parse_cache_spec("sccache")
    assert spec.kind == "sccache" and "SCCACHE_" in str(spec)


@pytest.mark.parametrize(
    "text, says",
    [
        ("s3://bucket/prefix", "--cache sccache"),
        ("gha://x", "SCCACHE_GHA_ENABLED"),
        ("redis://:6379", "no host"),
        ("redis://host:99999", "port"),
        ("redis://host:0", "port"),
        ("redis://host:6379/cache", "database"),
        ("redis://host:6379/0?x=1", "nothing may follow"),
        ("redis:host:6379", "redis://HOST:PORT"),
    ],
)
def test_unreadable_specs_say_what_is_wrong(text, says):
    with pytest.raises(CacheSpecError, match=None) as info:
        parse_cache_spec(text)
    assert says in str(info.value) and text in str(info.value)


@given(
    st.text(
        alphabet=st.characters(blacklist_characters="\x00:", blacklist_categories=("Cs",)),
        min_size=1,
    )
)
def test_anything_without_a_scheme_is_a_directory(text):
    if text.strip().lower() in ("", *cc.OFF, "sccache"):
        return
    try:
        spec = parse_cache_spec(text, cwd=Path("/work"))
    except CacheSpecError as exc:  # only ~user of no such user
        assert text.strip().startswith("~") and "no user's home directory" in str(exc)
        return
    assert spec.kind == "dir" and Path(spec.location).is_absolute()


# --- the server's environment ---


def test_a_directory_cache_uses_nothing_of_the_users_sccache(tmp_path):
    user = {
        "PATH": "/bin",
        "SCCACHE_BUCKET": "theirs",
        "SCCACHE_DIR": "/theirs",
        "SCCACHE_SERVER_PORT": "4226",
        "SCCACHE_DIRECT": "false",
    }
    env = server_env(
        CacheSpec("dir", "/cache"), user, tmp_path / "s.sock", tmp_path / "conf", tmp_path / "log"
    )
    assert env["PATH"] == "/bin" and env["SCCACHE_DIR"] == "/cache"
    assert "SCCACHE_BUCKET" not in env and "SCCACHE_SERVER_PORT" not in env
    assert env["SCCACHE_CONF"] == str(tmp_path / "conf")  # not ~/.config/sccache/config
    assert env["SCCACHE_SERVER_UDS"] == str(tmp_path / "s.sock")
    assert (
        env["SCCACHE_NO_DAEMON"] == env["SCCACHE_START_SERVER"] == "1"
        and env["SCCACHE_IDLE_TIMEOUT"] == "0"
    )
    assert env["SCCACHE_DIRECT"] == "true"


def test_redis_and_sccache_specs(tmp_path):
    user = {
        "SCCACHE_BUCKET": "theirs",
        "SCCACHE_SERVER_UDS": "/their.sock",
        "SCCACHE_DIRECT": "false",
    }
    redis = server_env(
        CacheSpec("redis", "redis://h:1"), user, tmp_path / "s", tmp_path / "c", tmp_path / "l"
    )
    assert redis["SCCACHE_REDIS_ENDPOINT"] == "redis://h:1" and "SCCACHE_BUCKET" not in redis
    own = server_env(CacheSpec("sccache", ""), user, tmp_path / "s", tmp_path / "c", tmp_path / "l")
    assert (
        own["SCCACHE_BUCKET"] == "theirs" and own["SCCACHE_DIRECT"] == "false"
    )  # as the user set them
    assert own["SCCACHE_SERVER_UDS"] == str(tmp_path / "s") and "SCCACHE_CONF" not in own


# --- sccache's counts ---


def test_counts_per_compiler_call():
    stats = CacheStats.from_json(STATS_JSON)
    assert stats.compiles == 3 and stats.from_cache == 1  # two g++ calls and one nvcc call
    assert stats.summary() == (
        "1 of 3 compiles from the cache (host C++ 1 of 2; nvcc 0 of 1; 1 of nvcc's 3 steps "
        "reused (the host side of other archs' compiles))"
    )


def test_errors_are_counted_and_said():
    data = json.loads(json.dumps(STATS_JSON))
    data["stats"]["cache_write_errors"] = 2
    stats = CacheStats.from_json(data)
    assert stats.errors == 2 and stats.summary().endswith(
        "; 2 cache errors (those compiles ran uncached)"
    )
    assert CacheStats.from_json({"stats": {}}).summary() == "0 of 0 compiles from the cache"


def test_calls_sccache_cannot_cache_are_said_with_why():
    """sccache's not_cached reasons (gsplat's nvcc calls were all "multiple input files" before
    the shim joined their -diag-suppress values, and the summary said nothing of them)."""
    data = json.loads(json.dumps(STATS_JSON))
    data["stats"]["not_cached"] = {"multiple input files": 20, "-E": 1}
    assert (
        CacheStats.from_json(data)
        .summary()
        .endswith("; 21 calls sccache cannot cache (-E: 1, multiple input files: 20)")
    )


# --- the launcher ---


def test_the_launcher_goes_through_sccache_until_the_cache_is_off(tmp_path):
    fake = tmp_path / "sccache"  # prints what it was called with and the socket it was given
    fake.write_text('#!/bin/sh\necho "sccache $SCCACHE_SERVER_UDS $*"\n')
    fake.chmod(0o755)
    flag = tmp_path / "disabled"
    launcher = tmp_path / "launcher"
    launcher.write_text(cc.launcher_script(fake, tmp_path / "my socket", flag))
    launcher.chmod(0o755)

    def run():
        argv = [str(launcher), "echo", "a b", "c"]
        return subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip()

    assert run() == f"sccache {tmp_path / 'my socket'} echo a b c"
    flag.touch()
    assert run() == "a b c"  # the compiler itself


def launcher_with(tmp_path: Path, sccache_body: str) -> tuple[Path, Path]:
    fake = tmp_path / "sccache"
    fake.write_text("#!/bin/sh\n" + sccache_body)
    fake.chmod(0o755)
    flag = tmp_path / "work" / "disabled"
    flag.parent.mkdir()
    launcher = tmp_path / "launcher"
    launcher.write_text(cc.launcher_script(fake, tmp_path / "socket", flag))
    launcher.chmod(0o755)
    return launcher, flag


def test_a_compile_waiting_on_the_server_when_the_cache_is_turned_off_runs_again_directly(
    tmp_path,
):
    """CI, 2026-11-28: Redis was killed during an nvcc compile, the build stopped the server,
    and sccache's client failed the compile ("Failed to send data to or receive data from
    server"): the wheel was lost. The cache turned off under a compile: it runs again, directly,
    and only the compiler's own output is seen."""
    launcher, flag = launcher_with(
        tmp_path,
        f'touch "{tmp_path / "work" / "disabled"}"\n'
        'echo "sccache: error: failed to execute compile" >&2\n'
        "echo 'sccache: caused by: Failed to send data to or receive data from server' >&2\n"
        "exit 2\n",
    )
    proc = subprocess.run(
        [str(launcher), "sh", "-c", "echo compiled $0; echo warning: w >&2", "a.cu"],
        capture_output=True,
        text=True,
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "compiled a.cu\n", "warning: w\n")
    assert flag.exists()
    assert sorted(p.name for p in flag.parent.iterdir()) == ["disabled"]  # no output file left


def test_a_compile_that_fails_with_the_cache_on_fails_with_its_output_and_status(tmp_path):
    launcher, flag = launcher_with(tmp_path, "echo \"out $*\"; echo 'error: bad' >&2; exit 3\n")
    proc = subprocess.run([str(launcher), "cc", "x.c"], capture_output=True, text=True)
    assert (proc.returncode, proc.stdout, proc.stderr) == (3, "out cc x.c\n", "error: bad\n")
    assert not flag.exists()
    assert list(flag.parent.iterdir()) == []


# --- the storage checks ---


def test_a_directory_that_cannot_be_made_is_said(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    problem = check_storage(CacheSpec("dir", str(blocker / "cache")))
    assert problem is not None and str(blocker / "cache") in problem
    assert check_storage(CacheSpec("dir", str(tmp_path / "new" / "cache"))) is None
    assert (tmp_path / "new" / "cache").is_dir() and not any((tmp_path / "new" / "cache").iterdir())


def test_a_redis_nobody_listens_at_is_said():
    port = free_port()
    problem = check_storage(CacheSpec("redis", f"redis://127.0.0.1:{port}"))
    assert problem == f"nothing answers at 127.0.0.1:{port} (Connection refused)"


# --- a real server ---


def compile_through(launcher: Path, source: Path, out: Path) -> None:
    subprocess.run(
        [str(launcher), "g++", "-O1", "-c", str(source), "-o", str(out)],
        check=True,
        capture_output=True,
        cwd=source.parent,
    )


def test_a_private_server_caches_and_reports(tmp_path):
    source = tmp_path / "a.cpp"
    source.write_text("int answer() { return 42; }\n")
    warnings = []
    with cc.compile_cache(
        CacheSpec("dir", str(tmp_path / "cache")), tmp_path / "work", warnings.append
    ) as cache:
        assert cache.launcher is not None and cache.socket.exists()
        compile_through(cache.launcher, source, tmp_path / "a1.o")
        compile_through(cache.launcher, source, tmp_path / "a2.o")
        server = cache._server
    assert server.poll() is not None  # stopped with the build
    assert warnings == [] and cache.report.active
    assert (cache.report.stats.compiles, cache.report.stats.from_cache) == (2, 1)
    assert (tmp_path / "a1.o").read_bytes() == (tmp_path / "a2.o").read_bytes()
    assert cache.report.lines() == [
        f"Compile cache {tmp_path / 'cache'}: 1 of 2 compiles from the cache (host C++ 1 of 2)."
    ]
    assert any((tmp_path / "cache").rglob("*")), "nothing was written to the cache directory"


def test_sccache_spec_takes_the_users_own_settings(tmp_path, monkeypatch):
    """``--cache sccache``: sccache's storage as the user configured it (here SCCACHE_DIR), on
    the build's own server all the same."""
    source = tmp_path / "a.cpp"
    source.write_text("int answer() { return 42; }\n")
    theirs = tmp_path / "their-sccache"
    monkeypatch.setenv("SCCACHE_DIR", str(theirs))
    with cc.compile_cache(CacheSpec("sccache", ""), tmp_path / "work") as cache:
        compile_through(cache.launcher, source, tmp_path / "a.o")
    assert cache.report.lines() == [
        "Compile cache sccache's own settings (SCCACHE_*): 0 of 1 compiles from the "
        "cache (host C++ 0 of 1)."
    ]
    assert any(p.is_file() for p in theirs.rglob("*")), "nothing in the user's cache directory"


def test_a_cache_turned_off_mid_build_compiles_directly(tmp_path):
    source = tmp_path / "a.cpp"
    source.write_text("int answer() { return 42; }\n")
    warnings = []
    with cc.compile_cache(
        CacheSpec("dir", str(tmp_path / "cache")), tmp_path / "work", warnings.append
    ) as cache:
        compile_through(cache.launcher, source, tmp_path / "a1.o")
        cache.disable("a test")
        assert cache._server is None  # stopped at once
        compile_through(cache.launcher, source, tmp_path / "a2.o")
    assert warnings == [
        "the cache stopped working (a test): the rest of the build compiled without it"
    ]
    assert (tmp_path / "a2.o").is_file()
    assert cache.report.lines()[1] == f"  {warnings[0]}"


def test_a_compile_the_server_holds_when_the_cache_is_turned_off_still_compiles(tmp_path):
    """The server is stopped while it finds out what the compiler is (nvcc's first compile of a
    build, slow on a loaded machine): sccache's client fails ("Failed to read response
    header", CI 2026-11-28, Redis gone), and the launcher compiles again, directly."""
    source = tmp_path / "a.cpp"
    source.write_text("int answer() { return 42; }\n")
    slow = tmp_path / "bin" / "g++"  # every call, the server's probes too, waits a second
    slow.parent.mkdir()
    slow.write_text(f'#!/bin/sh\nsleep 1\nexec {shutil.which("g++")} "$@"\n')
    slow.chmod(0o755)
    with cc.compile_cache(CacheSpec("dir", str(tmp_path / "cache")), tmp_path / "work") as cache:
        compile = subprocess.Popen(
            [str(cache.launcher), str(slow), "-c", str(source), "-o", str(tmp_path / "a.o")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(0.4)
        cache.disable("a test")
        out, err = compile.communicate(timeout=60)
    assert compile.returncode == 0 and (out, err) == ("", ""), err
    assert (tmp_path / "a.o").is_file()


def test_a_cache_that_fails_to_write_is_turned_off_with_the_reason(tmp_path, monkeypatch):
    """A cache directory gone (a full or broken disk reads the same to sccache: a write error):
    the watcher sees the error count, says so once, and the build goes on without the cache."""
    monkeypatch.setattr(cc, "WATCH_INTERVAL", 0.1)
    warnings = []
    cache_dir = tmp_path / "cache"
    with cc.compile_cache(
        CacheSpec("dir", str(cache_dir)), tmp_path / "work", warnings.append
    ) as cache:
        for n in range(2):
            source = tmp_path / f"a{n}.cpp"
            source.write_text(f"int answer{n}() {{ return {n}; }}\n")
            compile_through(cache.launcher, source, tmp_path / f"a{n}.o")
            if n == 0:
                shutil.rmtree(cache_dir)
                cache_dir.write_text("not a directory any more")
        deadline = time.monotonic() + 10
        while not cache.disabled_flag.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    assert len(warnings) == 1 and warnings[0].startswith(
        "the cache stopped working (the cache failed 1 time(s)"
    )
    assert (tmp_path / "a1.o").is_file()


def test_no_sccache_means_no_cache_and_says_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setattr(cc, "find_sccache", lambda: None)
    warnings = []
    with cc.compile_cache(
        CacheSpec("dir", str(tmp_path / "c")), tmp_path / "work", warnings.append
    ) as cache:
        assert cache.launcher is None
    assert warnings == [f"sccache is not installed: {cc.INSTALL_HINT}"]
    assert cache.report.lines() == [
        f"Compile cache {tmp_path / 'c'}: not used ({warnings[0]}); everything was compiled."
    ]


def test_a_redis_nobody_answers_at_means_no_server(tmp_path):
    warnings = []
    spec = CacheSpec("redis", f"redis://127.0.0.1:{free_port()}")
    with cc.compile_cache(spec, tmp_path / "work", warnings.append) as cache:
        assert cache.launcher is None and cache._server is None
    assert len(warnings) == 1 and "nothing answers at 127.0.0.1" in warnings[0]


def test_no_spec_no_cache(tmp_path):
    with cc.compile_cache(None, tmp_path) as cache:
        assert cache is None
    assert not (tmp_path / "compile-cache").exists()


# --- the fixed-name workspaces ---


def test_stable_workspaces_are_fixed_free_and_emptied(tmp_path, monkeypatch):
    monkeypatch.setattr(cc.tempfile, "gettempdir", lambda: str(tmp_path))
    with stable_workspace() as first:
        (first / "left").write_text("x")
        with stable_workspace() as second:  # a build beside it
            assert second != first and second.parent == first.parent
        assert first == tmp_path / cc.STABLE_ROOT / "0"
    assert not first.exists() and not second.exists()
    with stable_workspace() as again:
        assert again == first and not any(again.iterdir())
    assert oct((tmp_path / cc.STABLE_ROOT).stat().st_mode & 0o7777) == "0o1777"


def test_every_slot_busy_gives_a_private_workspace(tmp_path, monkeypatch):
    monkeypatch.setattr(cc.tempfile, "gettempdir", lambda: str(tmp_path))
    monkeypatch.setattr(cc, "SLOTS", 1)
    with stable_workspace() as first, stable_workspace() as second:
        assert first.name == "0" and second.name.startswith("prebuild-wheel-")
    assert not second.exists()


def test_the_launcher_env_reaches_setup_py_builds(tmp_path):
    from prebuild.tool.builder import flags

    options = flags.BuildOptions(archs=(), ptx=False, launcher=tmp_path / "launcher")
    assert flags.BuildOptions.from_env(options.to_env()).launcher == tmp_path / "launcher"
    assert flags.BuildOptions.from_env({}).launcher is None
    assert os.environ.get(flags.LAUNCHER_ENV) is None


def test_a_source_build_with_prebuild_cache_compiles_through_a_cache_of_its_own(
    tmp_path, monkeypatch, capsys
):
    """setup.py under pip or cibuildwheel (PREBUILD_CACHE in the environment, no launcher from
    prebuild wheel): its own server for the compile, whose summary is printed; under prebuild
    wheel (a launcher given, PREBUILD_CACHE=off) none."""
    from prebuild.tool.builder import flags, setuptools_ext

    seen = []

    def compile_libraries(project, options, on_progress=None):
        seen.append(options.launcher)
        if options.launcher is not None:  # a real compile through the launcher
            source = tmp_path / "a.cpp"
            source.write_text("int answer() { return 42; }\n")
            compile_through(options.launcher, source, tmp_path / "a.o")
        return "compiled"

    monkeypatch.setattr(setuptools_ext, "compile_libraries", compile_libraries)
    options = flags.BuildOptions(archs=(), ptx=False, build_dir=tmp_path / "objects")
    monkeypatch.setenv("PREBUILD_CACHE", str(tmp_path / "cache"))
    assert setuptools_ext.compile_through_cache(None, options) == "compiled"
    assert (
        seen[0] == tmp_path / "objects" / "compile-cache" / "launcher"
    )  # the build dir holds its log
    assert (
        f"prebuild: Compile cache {tmp_path / 'cache'}: 0 of 1 compiles from the cache"
        in capsys.readouterr().err
    )
    # What prebuild wheel hands its setup.py: its own launcher, and PREBUILD_CACHE=off.
    given = flags.BuildOptions(archs=(), ptx=False, launcher=tmp_path / "theirs")
    monkeypatch.setenv("PREBUILD_CACHE", given.to_env()["PREBUILD_CACHE"])
    seen.clear()
    monkeypatch.setattr(
        setuptools_ext, "compile_libraries", lambda p, o, on_progress=None: seen.append(o.launcher)
    )
    setuptools_ext.compile_through_cache(None, given)
    assert seen == [tmp_path / "theirs"] and "Compile cache" not in capsys.readouterr().err
    monkeypatch.setenv("PREBUILD_CACHE", "ftp://nowhere")
    with pytest.raises(SystemExit, match="is not a cache prebuild starts itself"):
        setuptools_ext.compile_through_cache(None, flags.BuildOptions(archs=(), ptx=False))
