"""Recipe files: the schema, and errors that name the file and the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from prebuild.runtime.arch import parse_arch
from prebuild.tool.farm.recipes import (
    GIT,
    PATH,
    REQUIREMENT,
    URL,
    RecipeError,
    load_recipes,
    parse_recipes,
    source_kind,
)

FILE = Path("/recipes/field.toml")

FULL = """
[[project]]
name = "Fused_SSIM"
source = "git+https://github.com/rahul-goel/fused-ssim@1e4c0e2"
env = { FORCE_CUDA = "1", DEBUG = 0, FAST = true }
build-requires = ["jaxtyping>=0.2"]
pythons = ["3.10", "3.12"]
archs = ["8.0", "sm_90"]
ptx = false
first-use = ["from fused_ssim import Ops; Ops.load(False)"]

[project.smoke]
import = "fused_ssim"
gpu = "import fused_ssim"

[[project]]
name = "demo"
source = "./demo"
"""


def test_a_full_recipe_and_a_minimal_one():
    full, minimal = parse_recipes(FULL, FILE).recipes
    assert full.name == "fused-ssim" and full.source_kind == GIT and full.kind is None
    assert full.env == (("DEBUG", "0"), ("FAST", "true"), ("FORCE_CUDA", "1"))
    assert full.build_requires == ("jaxtyping>=0.2",)
    assert full.pythons == ("3.10", "3.12")
    assert full.archs == (parse_arch("sm_80"), parse_arch("sm_90"))
    assert full.ptx is False
    assert full.first_use == ("from fused_ssim import Ops; Ops.load(False)",)
    assert (full.smoke.import_name, full.smoke.gpu) == ("fused_ssim", "import fused_ssim")
    # a relative path is the recipe file's folder's; the import defaults from the name
    assert minimal.source == "/recipes/demo" and minimal.source_kind == PATH
    assert minimal.smoke.import_name == "demo" and minimal.ptx and minimal.pythons == ()
    assert minimal.first_use == ()


@pytest.mark.parametrize(
    ("source", "kind"),
    [
        ("gsplat==1.5.3", REQUIREMENT),
        ("deepspeed[dev]==0.19.8", REQUIREMENT),
        ("git+https://github.com/x/y@v1", GIT),
        ("y @ git+https://github.com/x/y@v1", GIT),
        ("https://files.example/y-1.0.tar.gz", URL),
        ("./y", PATH),
        ("/abs/y-1.0.tar.gz", PATH),
        ("y-1.0.tar.gz", PATH),
    ],
)
def test_source_kinds(source, kind):
    assert source_kind(source) == kind


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ('name = "x"', "key 'source' is required"),
        ('source = "x==1"', "key 'name' is required"),
        ('name = "x"\nsource = "x>=1"', "names no single version: pin it (x==X.Y.Z)"),
        ('name = "x"\nsource = "x"', "names no single version"),
        ('name = "x"\nsource = "x==1.*"', "names no single version"),
        ('name = "x"\nsource = "git+https://github.com/a/x"', "names no revision"),
        ('name = "x"\nsource = "https://example.org/x"', "not a source archive"),
        ('name = "x"\nsource = "x==1"\nkind = "fast"', "key 'kind'"),
        ('name = "x"\nsource = "x==1"\nenv = { "A-B" = "1" }', "key 'env.A-B'"),
        ('name = "x"\nsource = "x==1"\nbuild-requires = "a"', "key 'build-requires'"),
        ('name = "x"\nsource = "x==1"\nbuild-requires = ["a b c"]', "key 'build-requires'"),
        ('name = "x"\nsource = "x==1"\npythons = ["3.9"]', "key 'pythons': '3.9'"),
        ('name = "x"\nsource = "x==1"\npythons = [3.11]', "key 'pythons'"),
        ('name = "x"\nsource = "x==1"\narchs = ["sm_5"]', "key 'archs'"),
        ('name = "x"\nsource = "x==1"\nptx = "yes"', "key 'ptx'"),
        ('name = "x"\nsource = "x==1"\nfirst-use = "import x"', "key 'first-use'"),
        ('name = "x"\nsource = "x==1"\nfirst-use = ["x.load("]', "key 'first-use': --first-use"),
        ('name = "x"\nsource = "x==1"\nsmoke = { run = "1" }', "key 'smoke'"),
        ('name = "x"\nsource = "x==1"\nsmoke = { import = "a b" }', "key 'smoke.import'"),
        ('name = "x"\nsource = "x==1"\nsorce = "y"', "unknown key 'sorce'"),
        (
            'name = "x"\nsource = "x==1"\nkind = "native"\npythons = ["3.11"]',
            "a native project's wheels are abi3",
        ),
    ],
)
def test_a_bad_project_is_refused_naming_file_and_key(body, said):
    with pytest.raises(RecipeError) as caught:
        parse_recipes(f"[[project]]\n{body}\n", FILE)
    message = str(caught.value)
    assert message.startswith(f"{FILE}: project") and said in message, message


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("[[project]\nname=", "not valid TOML"),
        ("", "no [[project]] table"),
        ('[project]\nname = "x"', "no [[project]] table"),
        ('title = "x"\n[[project]]\nname = "x"\nsource = "x==1"', "unknown key 'title'"),
        ('[farm]\ntorch = "2.14"', "[farm]: key 'torch': expected a list"),
        ('[farm]\npython = ["2.7"]', "[farm]: key 'python'"),
        ('[farm]\narchs = ["sm_1"]', "[farm]: key 'archs'"),
        ('[farm]\ngpus = ["h100"]', "[farm]: unknown key 'gpus'"),
    ],
)
def test_a_bad_file_is_refused_naming_it(text, said):
    with pytest.raises(RecipeError, match=f"^{FILE}: .*{said.replace('[', '.').replace(']', '.')}"):
        parse_recipes(text, FILE)


def test_a_folder_is_a_recipe_set_and_a_name_may_appear_once(tmp_path):
    (tmp_path / "a.toml").write_text('[[project]]\nname = "a"\nsource = "a==1"\n')
    (tmp_path / "b.toml").write_text('[[project]]\nname = "b"\nsource = "b==1"\n')
    (tmp_path / "notes.txt").write_text("not a recipe")
    assert [r.name for r in load_recipes([tmp_path]).recipes] == ["a", "b"]
    (tmp_path / "c.toml").write_text('[[project]]\nname = "A"\nsource = "a==2"\n')
    with pytest.raises(RecipeError, match="project 'a': named twice"):
        load_recipes([tmp_path])
    with pytest.raises(RecipeError, match="missing: no such recipe file or folder"):
        load_recipes([tmp_path.parent / "missing"])
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(RecipeError, match="no recipe files"):
        load_recipes([empty])


def test_a_farm_table_gives_the_sets_defaults_once(tmp_path):
    (tmp_path / "a.toml").write_text('[[project]]\nname = "a"\nsource = "a==1"\n')
    (tmp_path / "farm.toml").write_text(
        '[farm]\ntorch = ["2.13", "2.14"]\ncuda = ["13.0"]\npython = ["3.11"]\narchs = ["sm_90"]\n'
    )
    loaded = load_recipes([tmp_path])
    assert [r.name for r in loaded.recipes] == ["a"]
    assert loaded.defaults.torch == ("2.13", "2.14") and loaded.defaults.cuda == ("13.0",)
    assert loaded.defaults.python == ("3.11",) and [a.sm for a in loaded.defaults.archs] == [
        "sm_90"
    ]
    (tmp_path / "more.toml").write_text('[farm]\ntorch = ["2.15"]\n')
    with pytest.raises(RecipeError, match="more.toml: a second \\[farm\\] table"):
        load_recipes([tmp_path])
    with pytest.raises(RecipeError, match="no \\[\\[project\\]\\] in .*: nothing to build"):
        load_recipes([tmp_path / "farm.toml"])
