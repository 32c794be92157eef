"""PEP 825 variant wheels, the pure part: labels that spell the archs (and back), the nvidia
properties and CUDA lower bound, the documents (read back by variantlib, the reference
reader), file names with and without a label, and what cannot be described."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from packaging.version import Version
from variantlib.variant_dist_info import VariantDistInfo
from variantlib.variants_json import VariantsJson

from prebuild.runtime.arch import Arch, parse_arch_list
from prebuild.tool.index_keys import index_key_of
from prebuild.tool.variant_wheels import (
    VariantError,
    WheelArchs,
    archs_of,
    built_variant_problem,
    cuda_lower_bound,
    merge_documents,
    parse_filename,
    parse_label,
    properties,
    split_filename,
    variant_filename,
    variant_label,
    variants_document,
    variants_filename,
)

A = parse_arch_list


def test_labels_spell_the_archs():
    assert variant_label(WheelArchs(A("sm_90"))) == "sm90"
    assert variant_label(WheelArchs(A("sm_80,sm_90"))) == "sm80.90"
    assert variant_label(WheelArchs(A("sm_90"), A("sm_90"))) == "sm90.ptx"
    assert variant_label(WheelArchs(A("sm_100f"))) == "sm100f"
    assert (
        variant_label(WheelArchs(A("sm_75,sm_80,sm_86,sm_89,sm_90"))) == "sm75.80.86.89.90"
    )  # 16: the most


def test_what_a_label_cannot_say_is_refused_with_the_fix():
    with pytest.raises(VariantError, match="16 characters.*fewer archs"):
        variant_label(WheelArchs(A("sm_75,sm_80,sm_86,sm_89,sm_90,sm_100")))
    with pytest.raises(VariantError, match="sm_90a.*exact GPU only.*without --variants"):
        variant_label(WheelArchs(A("sm_90a")))
    with pytest.raises(VariantError, match="only PTX of the newest"):
        variant_label(WheelArchs(A("sm_80,sm_90"), A("sm_80")))


archs_sets = st.lists(
    st.sampled_from(A("sm_75,sm_80,sm_86,sm_89,sm_90,sm_100,sm_120,sm_100f")),
    min_size=1,
    max_size=3,
    unique=True,
)


@given(archs_sets, st.booleans())
def test_a_label_parses_back_to_its_archs(sass, ptx):
    archs = WheelArchs(tuple(sorted(sass)), (max(sass),) if ptx else ())
    try:
        label = variant_label(archs)
    except VariantError:
        return  # too long for 16 characters: refused, never truncated
    assert parse_label(label) == archs
    # and so does the wheel's name, through the one reader of wheel names' index keys
    key = index_key_of(variant_filename("prebuild-0.1.0+cu130-cp310-abi3-linux_x86_64.whl", label))
    assert key is not None and (key.sass, key.ptx, key.cuda_tag) == (
        archs.sass,
        archs.ptx,
        "cu130",
    )


@pytest.mark.parametrize("label", ["sm", "80", "sm80.ptx.ptx", "SM80", "sm8x", "sm80-90", "x" * 17])
def test_labels_that_are_not_prebuilds_are_refused(label):
    with pytest.raises(VariantError):
        parse_label(label)


def test_a_classic_variant_wheel_whose_libraries_hold_other_archs_than_its_label_is_refused():
    """A classic project can ask nvcc for an arch-specific variant itself (hopper_ext, and
    FlashAttention 3, ask for sm_90a); prebuild keeps it, and the library holds sm_90a alone.
    The variant 'sm90' (sm_arch 90_real) would promise more than that code runs on (with
    sm_100a: a 10.3 GPU too), and `prebuild inspect` refuses such a wheel."""
    assert built_variant_problem("sm90", WheelArchs(A("sm_90"))) is None
    assert built_variant_problem("sm90.ptx", WheelArchs(A("sm_90"), A("sm_90"))) is None
    assert built_variant_problem("sm100", WheelArchs(A("sm_100a"))) == (
        "the libraries hold SASS sm_100a, no PTX: sm_100a is arch-specific code, which runs on "
        "a 10.0 GPU only, and a variant's sm_arch property cannot say 'only'"
    )
    for label, built in (("sm90", "sm_90a"), ("sm90", "sm_90,sm_90a")):
        problem = built_variant_problem(label, WheelArchs(A(built)))
        assert problem is not None and "runs on a 9.0 GPU only" in problem, (label, problem)
    # other archs than the label's, all describable: said plainly
    assert built_variant_problem("sm90", WheelArchs(A("sm_80,sm_90"))) == (
        "the variant 'sm90' names SASS sm_90, no PTX, and the libraries hold SASS sm_80, sm_90, no PTX"
    )
    assert built_variant_problem("sm90.ptx", WheelArchs(A("sm_90"))) == (
        "the variant 'sm90.ptx' names SASS sm_90, PTX compute_90, and the libraries hold SASS "
        "sm_90, no PTX"
    )


def test_properties_and_the_cuda_lower_bound():
    sass_only = WheelArchs(A("sm_80,sm_90"))
    with_ptx = WheelArchs(A("sm_80,sm_90"), A("sm_90"))
    # SASS of CUDA 13.x runs on any 13 driver (minor version compatibility); PTX needs its own
    assert cuda_lower_bound(Version("13.2"), sass_only) == "13.0"
    assert cuda_lower_bound(Version("13.2"), with_ptx) == "13.2"
    assert properties(with_ptx, "13.2") == {
        "nvidia": {
            "cuda_version_lower_bound": ["13.2"],
            "sm_arch": ["80_real", "90_real", "90_virtual"],
        }
    }
    assert archs_of(properties(with_ptx, "13.2")) == with_ptx


def test_the_documents_read_back_with_variantlib():
    sm80 = properties(WheelArchs(A("sm_80")), "13.0")
    sm90 = properties(WheelArchs(A("sm_90")), "13.0")
    own = variants_document({"sm90": sm90})
    info = VariantDistInfo(json.dumps(own), expected_label="sm90")  # a wheel's variant.json
    assert info.variant_label == "sm90"
    assert {p.to_str() for p in info.variant_desc.properties} == {
        "nvidia :: sm_arch :: 90_real",
        "nvidia :: cuda_version_lower_bound :: 13.0",
    }
    index = merge_documents(
        [variants_document({"sm80": sm80}), own, own]
    )  # the index's: every wheel's entry once
    assert set(VariantsJson(index).variants) == {"sm80", "sm90"}
    assert (
        index["providers"]["nvidia"]["plugin-api"]
        == "nvidia_variant_provider.plugin:NvidiaVariantPlugin"
    )


def test_one_label_for_two_builds_is_a_clash():
    with pytest.raises(VariantError, match="sm90"):
        merge_documents(
            [
                variants_document({"sm90": properties(WheelArchs(A("sm_90")), "13.0")}),
                variants_document({"sm90": properties(WheelArchs(A("sm_90")), "12.0")}),
            ]
        )
    with pytest.raises(VariantError, match="null"):
        variants_document({"null": {}})


def test_file_names_with_and_without_a_label():
    plain = "prebuild-0.1.0+cu130-cp310-abi3-linux_x86_64.whl"
    labelled = variant_filename(plain, "sm80.90.ptx")
    assert labelled == "prebuild-0.1.0+cu130-cp310-abi3-linux_x86_64-sm80.90.ptx.whl"
    assert split_filename(labelled) == (plain, "sm80.90.ptx") and split_filename(plain) == (
        plain,
        None,
    )
    with_build = "x-1.0-1-py3-none-any.whl"
    assert split_filename(with_build) == (with_build, None)
    assert split_filename("x-1.0-1-py3-none-any-sm90.whl") == (with_build, "sm90")
    name, version, build, tags, label = parse_filename(labelled)
    assert (name, str(version), label) == ("prebuild", "0.1.0+cu130", "sm80.90.ptx")
    assert (
        variants_filename("fused-ssim", "1.0+pt214.cu130")
        == "fused_ssim-1.0+pt214.cu130-variants.json"
    )
    with pytest.raises(VariantError):
        variant_filename(plain, "null")


def test_arch_values_that_are_neither_real_nor_virtual_are_refused():
    with pytest.raises(VariantError, match="neither"):
        archs_of({"nvidia": {"sm_arch": ["90_fake"]}})
    assert archs_of({}) == WheelArchs((), ())
    assert isinstance(parse_label("sm90").sass[0], Arch)


def test_variant_wheels_are_listed_only_in_the_index_of_every_wheel():
    """The per-key indexes are for pip, which cannot read a variant label; the index of
    every wheel leaves the per-arch wheel out, whose higher local version would win there."""
    from prebuild.tool.index import ALL, WheelInfo, group_by_index

    names = [
        "demo-0.1.0+cu130-cp310-abi3-linux_x86_64-sm90.whl",
        "demo-0.1.0+cu130-cp310-abi3-linux_x86_64.whl",
        "demo-0.1.0+cu130.sm80-cp310-abi3-linux_x86_64.whl",
    ]
    indexes = group_by_index([WheelInfo(n, "0" * 64) for n in names])
    assert sorted(indexes) == [ALL, "cu130-sm80"]
    assert [w.filename for w in indexes["cu130-sm80"]] == [names[2]]
    assert [w.filename for w in indexes[ALL]] == sorted(names[:2])
