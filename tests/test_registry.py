"""The one name registry: lookups, registration, and the same "did you mean" sentence everywhere."""

import pytest

from workbench.registry import Registry, UnknownNameError, close_matches, did_you_mean, lookup_in


def test_lookup_register_and_errors():
    r = Registry("SimConfig.policy", {"colocated": 1, "chunked": 2})
    assert r["chunked"] == 2 and "chunked" in r and 3 not in r and r.names() == ["chunked", "colocated"]

    @r.register("disaggregated")
    def run():
        return 3

    assert r.lookup("disaggregated") is run and len(r) == 3 and dict(r)["colocated"] == 1
    with pytest.raises(UnknownNameError) as e:
        r["disagregated"]
    assert str(e.value) == ("SimConfig.policy='disagregated' is unknown; choose one of ['chunked', 'colocated', "
                            "'disaggregated']. Did you mean 'disaggregated'?")
    assert isinstance(e.value, ValueError) and isinstance(e.value, KeyError)
    with pytest.raises(ValueError, match="registered twice"):
        r.register("chunked", 4)
    with pytest.raises(UnknownNameError, match=r"choose one of .*\.$"):
        r["zzzz"]  # nothing close: no suggestion


def test_case_insensitive_registry_and_plain_dicts():
    r = Registry("dtype", {"BF16": 1}, case_sensitive=False)
    assert r["bf16"] == r["Bf16"] == 1 and "BF16" in r
    assert lookup_in({"h200": 5}, "H200", "hardware preset", lower=True) == 5
    with pytest.raises(UnknownNameError, match="hardware preset='h20' .*Did you mean 'h200'"):
        lookup_in({"h200": 5}, "h20", "hardware preset", lower=True)


@pytest.mark.parametrize("value,options,want", [
    ("GPTQ", ["rtn", "awq", "gptq"], "gptq"), ("heuristc", ["static", "heuristic"], "heuristic"),
    ("smollm2-135M-typo", ["smollm2-135m"], "smollm2-135m"), ("xyz", ["rtn", "awq"], None),
])
def test_close_matches(value, options, want):
    assert close_matches(value, options) == ([want] if want else [])
    assert did_you_mean(value, options) == (f" Did you mean {want!r}?" if want else "")


def _make_draft_typo():
    from workbench.spec.drafts import make_draft

    make_draft(None, "int44")


@pytest.mark.parametrize("make,suggestion", [
    (lambda: __import__("workbench.quant", fromlist=["QuantConfig"]).QuantConfig(method="gptqq"), "gptq"),
    (lambda: __import__("workbench.spec", fromlist=["SpecConfig"]).SpecConfig(policy="heuristc"), "heuristic"),
    (lambda: __import__("workbench.pd", fromlist=["SimConfig"]).SimConfig(policy="chunkd"), "chunked"),
    (lambda: __import__("workbench.pd", fromlist=["HardwareSpec"]).HardwareSpec.from_name("h100"), "h100-sxm"),
    (lambda: __import__("workbench.pd", fromlist=["ModelSpec"]).ModelSpec.from_name("qwen2-7"), "qwen2-7b"),
    (_make_draft_typo, "int4"),
    (lambda: __import__("workbench.models", fromlist=["load_model"]).load_model("smollm2-135"), "smollm2-135m"),
])
def test_every_named_variant_speaks_the_same_sentence(make, suggestion):
    # before: five helpers in four styles ("(did you mean 'x'?)", " Did you mean 'x'?", "Did you mean the
    # built-in 'x'?", or none when the typo's first dash-part differed)
    with pytest.raises(ValueError, match=rf"Did you mean '{suggestion}'\?"):
        make()
