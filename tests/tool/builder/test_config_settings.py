"""`prebuild wheel -C KEY=VALUE`: the settings as pip and pypa/build hand them to a backend, said
back as the options that give them, and the hint for a setup.py asking for an option."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from prebuild.tool.builder.config_settings import (
    as_options,
    parse_config_settings,
    setup_option_hint,
)


def test_settings_are_read_as_pip_reads_them():
    """KEY=VALUE (the value may hold '='), KEY alone for an empty value, a repeated key a list in
    the order given (setuptools reads --build-option's arguments so)."""
    given_ = ["--build-option=--cpp_ext", "verbose", "--build-option=--cuda_ext", "k=a=b"]
    assert parse_config_settings(given_) == {
        "--build-option": ["--cpp_ext", "--cuda_ext"],
        "verbose": "",
        "k": "a=b",
    }
    assert parse_config_settings([]) == {}


@pytest.mark.parametrize("bad", ["=x", ""])
def test_a_setting_with_no_key_is_refused_by_name(bad):
    with pytest.raises(ValueError, match="names no setting: give KEY=VALUE") as error:
        parse_config_settings(["ok=1", bad])
    assert repr(bad) in str(error.value)


keys = st.text(st.characters(blacklist_characters="="), min_size=1, max_size=8)
values = st.text(max_size=8)


@given(st.lists(st.tuples(keys, values), max_size=6))
def test_the_options_said_back_give_the_same_settings(pairs):
    """as_options is what a user types again (in an advice's command): read back, the same."""
    settings = parse_config_settings(f"{k}={v}" for k, v in pairs)
    again = [option.removeprefix("-C") for option in as_options(settings)]
    assert parse_config_settings(again) == settings


def test_a_setup_py_asking_for_an_option_is_told_how_to_give_it():
    """MinkowskiEngine 0.5.4's setup.py, with no BLAS found (its words, as it raises them)."""
    output = (
        "ImportError:  \nBLAS not found from numpy.distutils.system_info.get_info. "
        '\nPlease specify BLAS with: python setup.py install --blas=openblas" '
        "\nfor more information, please visit https://github.com/NVIDIA/MinkowskiEngine/wiki"
    )
    command = "prebuild wheel --arch sm_90 MinkowskiEngine-0.5.4.tar.gz"
    hint = setup_option_hint(output, command)
    assert "asks for --blas=openblas on its command line" in hint
    assert f"{command} -C--global-option=--blas=openblas (setuptools" in hint
    assert "a --build-option on bdist_wheel's only" in hint
    assert setup_option_hint("error: command 'nvcc' failed: python setup.py install", command) == ""
    assert setup_option_hint("ModuleNotFoundError: No module named 'numpy'", command) == ""
