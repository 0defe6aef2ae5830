"""The scenario fields beyond the shape (softmax_scale, inputs, layout, repeats, fresh_process, name):
loaded from suite files, refused with the file and line when wrong, expanded in grids; the suites that
use them (full's bugs, layouts and values groups; the bugs suite)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.errors import InputError
from harness.inputs import (
    Constant,
    HeadTagged,
    HighDims,
    Large,
    Normal,
    Rising,
    Uniform,
)
from harness.memory import GIB, estimate_peak_bytes
from harness.scenarios import SUITES_DIR, Scenario, load_suite, original_refusals

SHAPE = 'group = "g"\nbatch = 2\nseqlen = 130\nheads = [4, 2]\nhead_dim = 64\ncausal = true\n'


def _suite(tmp_path: Path, *tables: str, name: str = "t", shape: str = SHAPE) -> Path:
    p = tmp_path / f"{name}.toml"
    p.write_text(f'name = "{name}"\n' + "".join(f"\n[[scenario]]\n{shape}{t}" for t in tables))
    return p


def _one(tmp_path: Path, extra: str, shape: str = SHAPE) -> Scenario:
    (sc,) = load_suite(str(_suite(tmp_path, extra, shape=shape))).scenarios
    return sc


def test_softmax_scale_is_loaded_and_named_in_the_id(tmp_path) -> None:
    sc = _one(tmp_path, "softmax_scale = 0.125\n")
    assert sc.softmax_scale == 0.125 and sc.scale == 0.125
    assert sc.id == "g/b2-s130-h4x2-d64-causal-bf16-sc0.125"
    assert _one(tmp_path, "").scale == pytest.approx(1 / 8) and _one(tmp_path, "").id == "g/b2-s130-h4x2-d64-causal-bf16"


@pytest.mark.parametrize(("text", "want"), [
    ('inputs.q = { dist = "normal", mean = 4.0, std = 0.5 }\n', ("q", Normal(mean=4.0, std=0.5))),
    ('inputs.k = { dist = "uniform", lo = -2.0, hi = 3.0 }\n', ("k", Uniform(dist="uniform", lo=-2.0, hi=3.0))),
    ('inputs.v = { dist = "constant", value = 60000.0 }\n', ("v", Constant(dist="constant", value=60000.0))),
    ('inputs.v = { dist = "large", magnitude = 1.3e5 }\n', ("v", Large(dist="large", magnitude=1.3e5))),
    ('inputs.v = "head_tagged"\n', ("v", HeadTagged(dist="head_tagged"))),
    ('inputs = { q = { dist = "high_dims", from_dim = 32 } }\n', ("q", HighDims(dist="high_dims", from_dim=32))),
    ('inputs.q = { dist = "constant", value = 1.0 }\ninputs.k = { dist = "rising", span = 30.0 }\n',
     ("k", Rising(dist="rising", span=30.0))),
])
def test_every_input_distribution_loads(tmp_path, text: str, want: tuple[str, object]) -> None:
    sc = _one(tmp_path, text)
    assert getattr(sc.inputs, want[0]) == want[1]
    assert re.fullmatch(r"g/b2-s130-h4x2-d64-causal-bf16-x[0-9a-f]{8}", sc.id)  # extra fields, no name: a hash


@pytest.mark.parametrize(("text", "strides"), [
    ('layout = { k = "head_major" }\n', {"k": (2 * 130 * 64, 64, 130 * 64), "v": (130 * 2 * 64, 2 * 64, 64)}),
    ('layout = { q = { kind = "padded", pad = 16 } }\n', {"q": (130 * 4 * 80, 4 * 80, 80)}),
    ('layout = { k = "broadcast", v = "broadcast" }\n', {"k": (130 * 64, 64, 0), "v": (130 * 64, 64, 0)}),
    ('layout = "cache"\n', {"k": ((130 + 256) * 2 * 64, 2 * 64, 64)}),
    ('layout = { v = { kind = "cache", capacity = 200, fill = "inf" } }\n', {"v": (200 * 2 * 64, 128, 64)}),
    ('layout = "packed_qkv"\n', {n: (130 * 8 * 64, 8 * 64, 64) for n in "qkv"}),
    ('layout = "head_major"\n', {"o": (4 * 130 * 64, 64, 130 * 64)}),
])
def test_every_layout_loads_with_its_strides(tmp_path, text: str, strides: dict) -> None:
    from harness.layouts import strides as layout_strides

    sc = _one(tmp_path, text)
    got = layout_strides(sc)
    for name, want in strides.items():
        assert got[name] == want, name


def test_repeats_fresh_process_and_name(tmp_path) -> None:
    sc = _one(tmp_path, 'repeats = 20\nfresh_process = true\nname = "b14-race"\n')
    assert sc.repeats == 20 and sc.fresh_process
    assert sc.id == "g/b2-s130-h4x2-d64-causal-bf16-b14-race"  # a name stands for the extra fields
    assert _one(tmp_path, "").repeats == 2 and not _one(tmp_path, "").fresh_process


def test_grids_expand_over_the_new_fields(tmp_path) -> None:
    p = tmp_path / "g.toml"
    p.write_text('[[grid]]\ngroup = "g"\nname = "scale"\nbatch = 1\nseqlen = [17, 31]\nheads = [[2, 2]]\nhead_dim = 64\n'
                 'causal = false\nsoftmax_scale = [0.25, 0.5, 1.0]\ninputs.v = { dist = "head_tagged", step = 5.0 }\n'
                 '[[grid]]\ngroup = "h"\nbatch = 1\nseqlen = 64\nheads = [[4, 2]]\nhead_dim = 64\ncausal = true\n'
                 'layout = ["dense", "packed_qkv", "head_major"]\n')
    s = load_suite(str(p))
    assert len(s.scenarios) == 2 * 3 + 3 and len(set(s.ids())) == 9
    assert {x.softmax_scale for x in s.scenarios if x.group == "g"} == {0.25, 0.5, 1.0}
    assert all(x.inputs.v == HeadTagged(dist="head_tagged", step=5.0) for x in s.scenarios if x.group == "g")
    assert "g/b1-s17-h2-d64-noncausal-bf16-scale-sc0.5" in s.ids()
    assert [x.layout.packed_qkv for x in s.scenarios if x.group == "h"] == [False, True, False]


def _refused(tmp_path: Path, text: str) -> str:
    p = tmp_path / "bad.toml"
    p.write_text(text)
    with pytest.raises(InputError) as info:
        load_suite(str(p))
    return str(info.value)


def test_unknown_keys_are_refused_with_file_line_and_a_suggestion(tmp_path) -> None:
    text = f'name = "bad"\n[[scenario]]\n{SHAPE}\n[[scenario]]\n{SHAPE}softmax_scal = 0.125\n'
    msg = _refused(tmp_path, text)
    assert msg.startswith("suite bad.toml line 17: [[scenario]] #2: unknown key 'softmax_scal'")
    assert "did you mean 'softmax_scale'?" in msg
    msg = _refused(tmp_path, f'[[scenario]]\n{SHAPE}layout = {{ k = {{ kind = "cache", capacty = 300 }} }}\n')
    assert "line 8:" in msg and "layout.k: unknown key 'capacty'" in msg
    msg = _refused(tmp_path, f'[[scenario]]\n{SHAPE}\ninputs.q = {{ dist = "constant", valu = 1 }}\n')
    assert "line 9:" in msg and "inputs.q: unknown key 'valu'" in msg
    msg = _refused(tmp_path, f'[[scenario]]\n{SHAPE}\n[include]\nsuite = "full"\nid = ["x"]\n')
    assert "line 11: [include]: unknown key 'id' (did you mean 'ids'?)" in msg
    assert "line 1: unknown top-level key 'grids'" in _refused(tmp_path, "grids = 1\n")


@pytest.mark.parametrize(("extra", "needle"), [
    ("softmax_scale = 0.0\n", "softmax_scale: Input should be greater than 0"),
    ("softmax_scale = [0.5]\n", "softmax_scale = [0.5]: a list expands only in a [[grid]] table"),
    ('softmax_scale = "0.5"\n', "softmax_scale: Input should be a valid number"),
    ("repeats = 1\n", "repeats: Input should be greater than or equal to 2"),
    ("repeats = 101\n", "repeats: Input should be less than or equal to 100"),
    ('name = "has space"\n', "name: String should match pattern"),
    ('inputs.v = { dist = "gauss" }\n', "does not match any of the expected tags"),
    ('inputs.q = { dist = "uniform", lo = 1.0, hi = 0.0 }\n', "uniform needs lo < hi"),
    ('dtype = "fp16"\ninputs.v = { dist = "large", magnitude = 1.3e5 }\n', "exceed fp16's largest finite value"),
    ('inputs.k = { dist = "rising" }\n', "'rising' needs q with a nonzero mean"),
    ('inputs.q = { dist = "constant", value = 1.0 }\ninputs.v = { dist = "rising" }\n', "'rising' applies to k only"),
    ('inputs.q = { dist = "high_dims", from_dim = 64 }\n', "leaves no dim of head_dim=64"),
    ('layout = { q = "broadcast" }\n', "layout.q: 'broadcast' applies to k and v only"),
    ('layout = { k = { kind = "cache", capacity = 130 } }\n', "capacity=130 must exceed seqlen_k=130"),
    ('layout = { k = { kind = "dense", capacity = 300 } }\n', "capacity applies to kind 'cache' only"),
    ('layout = { o = { kind = "padded", fill = "inf" } }\n', "an output's padding always holds poison"),
    ('layout = "diagonal"\n', "unknown layout 'diagonal'"),
])
def test_bad_values_are_refused_with_their_line(tmp_path, extra: str, needle: str) -> None:
    msg = _refused(tmp_path, f'[[scenario]]\n{SHAPE}{extra}')
    assert needle in msg and re.match(r"suite bad\.toml line \d+: \[\[scenario\]\] #1: ", msg), msg


def test_packed_qkv_needs_equal_lengths(tmp_path) -> None:
    text = '[[scenario]]\ngroup = "g"\nbatch = 1\nseqlen_q = 3\nseqlen_k = 5\nheads = [2, 2]\nhead_dim = 64\ncausal = true\n' \
           'layout = "packed_qkv"\n'
    assert "packed_qkv needs seqlen_q == seqlen_k" in _refused(tmp_path, text)


@pytest.mark.parametrize(("fields", "needle"), [
    ('group = "g"\nbatch = 1\nseqlen = 8\nheads = [1, 1]\nhead_dim = 48\ncausal = false\n',
     "head_dim=48: the original kernel supports only 64, 96, 128, 192, 256"),
    ('group = "g"\nbatch = 65536\nseqlen = 4\nheads = [8, 8]\nhead_dim = 64\ncausal = false\n',
     "batch=65536: the original kernel puts batch in gridDim.z (at most 65535)"),
    ('group = "g"\nbatch = 1\nseqlen = 3\nheads = [71280, 71280]\nhead_dim = 128\ncausal = false\n',
     "num_heads_q=71280: the original kernel puts heads in gridDim.y"),
])
def test_what_the_original_cannot_run_is_refused_at_load(tmp_path, fields: str, needle: str) -> None:
    msg = _refused(tmp_path, f"[[scenario]]\n{fields}")
    assert needle in msg and "every candidate would fail this scenario" in msg and " line " in msg


def test_duplicates_name_the_fix(tmp_path) -> None:
    msg = _refused(tmp_path, f'[[scenario]]\n{SHAPE}name = "a"\nrepeats = 3\n[[scenario]]\n{SHAPE}name = "a"\n')
    assert "duplicate scenario ids ['g/b2-s130-h4x2-d64-causal-bf16-a']" in msg and "distinct `name`s" in msg


def test_original_refusals_accept_every_scenario_of_the_builtin_suites() -> None:
    for name in ("quick", "full", "production", "bugs"):
        assert all(not original_refusals(s) for s in load_suite(name).scenarios)


def test_full_has_the_bug_layout_and_value_groups() -> None:
    full = load_suite("full")
    groups = full.groups()
    assert len(full.scenarios) >= 182 and groups["bugs"] >= 80 and groups["layouts"] >= 5 and groups["values"] >= 5
    bugs = [s for s in full.scenarios if s.group == "bugs"]
    assert all(s.name and re.match(r"b\d\d-", s.name) for s in bugs)
    # every report number used by a name is introduced by a comment naming a public report
    text = (SUITES_DIR / "full.toml").read_text()
    for num in sorted({s.name[:3] for s in bugs}):
        comment = next((line for line in text.splitlines() if line.startswith(f"# {num} ")), "")
        assert re.search(r"(issues|pull)/\d+|flash-attention-minimal", comment), num
    # the fields the bug reports need are all used
    assert any(s.softmax_scale for s in bugs) and any(s.repeats > 2 for s in bugs) and any(s.fresh_process for s in bugs)
    dists = {type(getattr(s.inputs, t)).__name__ for s in full.scenarios if s.inputs for t in "qkv" if getattr(s.inputs, t)}
    assert dists >= {"Normal", "Uniform", "Constant", "Large", "HeadTagged", "HighDims", "Rising"}
    kinds = {getattr(s.layout, t).kind for s in full.scenarios if s.layout for t in "qkvo"}
    assert kinds == {"dense", "padded", "head_major", "broadcast", "cache"}
    assert any(s.layout.packed_qkv for s in full.scenarios if s.layout)
    # small scenarios, and every one fits an H200 by the memory guard's estimate
    assert sum(1 for s in bugs if s.flops > 1e11) <= 3
    assert max(estimate_peak_bytes(s).total for s in full.scenarios) < 16 * GIB
    bug_suite = load_suite("bugs")
    assert bug_suite.ids() == [s.id for s in bugs]


def test_suites_keep_the_order_of_the_file(tmp_path) -> None:
    p = tmp_path / "o.toml"
    p.write_text(f'[[scenario]]\n{SHAPE}name = "first"\n[[grid]]\n{SHAPE}name = "second"\n[[scenario]]\n{SHAPE}name = "third"\n')
    assert [s.name for s in load_suite(str(p)).scenarios] == ["first", "second", "third"]


def test_the_documented_examples_load(tmp_path) -> None:
    """Every example of README's scenario block and of docs/checks.md's "Scenario fields" tables is a valid
    scenario (with a shape the example does not fix)."""
    from harness import REPO_ROOT

    readme = (REPO_ROOT / "README.md").read_text()
    block = re.search(r"```toml\n(.*?)```", readme, re.DOTALL)
    assert block and len(load_suite(str(_write(tmp_path, "readme", block.group(1)))).scenarios) == 1
    doc = (REPO_ROOT / "docs" / "checks.md").read_text()
    section = doc[doc.index("## Scenario fields"):doc.index("## How many timed samples")]
    examples = re.findall(r"^\| `([a-z_]+)`(?: \([a-z]+\))? \| `([^`]+)` \|", section, re.MULTILINE)
    new_fields = {"softmax_scale", "inputs", "layout", "repeats", "fresh_process", "name"}
    checked = 0
    for key, example in examples:
        if example.startswith("{"):  # a distribution: a value of inputs.q / inputs.k
            tensor = "k" if "rising" in example else "q"
            extra = f"inputs.{tensor} = {example}\n" + ('inputs.q = { dist = "constant", value = 1.0 }\n'
                                                       if tensor == "k" else "")
        elif example.startswith(("layout", "inputs")) or key in new_fields:
            extra = example + "\n"
        else:
            continue
        sc = _one(tmp_path, extra.replace("capacity = 64", "capacity = 200"),  # the shape has 130 keys
                  shape=SHAPE.replace("head_dim = 64", "head_dim = 128"))
        checked += 1
        assert sc.id.startswith("g/b2-s130-h4x2-d128-causal-bf16"), example
    assert checked >= 6 + 7 + 6


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / f"{name}.toml"
    p.write_text(text)
    return p


def test_scenarios_travel_to_the_worker_and_the_sanitizer_unchanged() -> None:
    """The parent sends scenarios as JSON (WorkerJob, SanitizeJob): every field survives the round trip."""
    from harness.sanitize import SanitizeJob
    from harness.worker import WorkerJob

    full = load_suite("full").scenarios
    job = WorkerJob(candidate_lib="c.so", original_lib="o.so", scenarios=full, seed=1)
    back = WorkerJob.model_validate_json(job.model_dump_json())
    assert back.scenarios == full and [s.id for s in back.scenarios] == [s.id for s in full]
    sjob = SanitizeJob(candidate_lib="c.so", scenarios=full[-50:])
    assert SanitizeJob.model_validate_json(sjob.model_dump_json()).scenarios == full[-50:]


# -- a newcomer's mistakes (session 16's trial: a helper wrote bug reports as scenarios from the docs) ---------------
@pytest.mark.parametrize(("extra", "needle"), [
    ('inputs.q = { dist = "large", magnitude = 1e30 }\ninputs.k = { dist = "large", magnitude = 1e30 }\n',
     "logits can reach 6.4e+61 (head_dim 64 x max|q| 1e+30 x max|k| 1e+30)"),
    ('inputs.q = { dist = "constant", value = 1e20 }\ninputs.k = { dist = "constant", value = 1e20 }\n', "logits can reach"),
    ('inputs.v = { dist = "constant", value = 3e36 }\n', "an unnormalized P V row can reach 3.9e+38 (seqlen_k 130"),
])
def test_values_whose_products_overflow_fp32_are_refused_at_the_inputs_line(tmp_path, extra: str, needle: str) -> None:
    msg = _refused(tmp_path, f'[[scenario]]\n{SHAPE}{extra}')
    assert needle in msg and "every kernel overflow" in msg and msg.startswith("suite bad.toml line 8: "), msg


def test_large_but_representable_products_still_load(tmp_path) -> None:
    sc = _one(tmp_path, 'inputs.q = { dist = "large", magnitude = 1.3e5 }\ninputs.k = { dist = "large", magnitude = 1.3e5 }\n'
                        'inputs.v = { dist = "large", magnitude = 1e30 }\n')
    assert sc.inputs is not None and sc.inputs.v.magnitude == 1e30  # 130 keys x 1e30: far inside fp32


def test_a_key_in_a_sub_table_is_named_at_its_own_line(tmp_path) -> None:
    text = f'[[scenario]]\n{SHAPE}\n[[scenario]]\n{SHAPE}\n[scenario.inputs.v]\ndist = "head_tagged"\nstpe = 2.0\n'
    msg = _refused(tmp_path, text)
    assert msg.startswith("suite bad.toml line 19: [[scenario]] #2: ") and "inputs.v: unknown key 'stpe'" in msg, msg
    # a check over several fields points at the key it names, also when written as a shorthand (heads = [...])
    msg = _refused(tmp_path, f'[[scenario]]\n{SHAPE.replace("heads = [4, 2]", "heads = [7, 2]")}')
    assert msg.startswith("suite bad.toml line 5: ") and "num_heads_q=7 not divisible" in msg, msg


def test_a_list_in_a_scenario_table_says_that_lists_expand_in_grids(tmp_path) -> None:
    msg = _refused(tmp_path, f'[[scenario]]\n{SHAPE.replace("seqlen = 130", "seqlen = [128, 256]")}')
    assert msg.startswith("suite bad.toml line 4: ") and "a list expands only in a [[grid]] table" in msg, msg


def test_an_include_that_selects_nothing_or_names_a_missing_file_is_refused(tmp_path) -> None:
    msg = _refused(tmp_path, f'[include]\nsuite = "bugs"\n\n[[scenario]]\n{SHAPE}')
    assert msg.startswith("suite bad.toml line 2: [include]: selects nothing from suite bugs") and "groups = [...]" in msg
    msg = _refused(tmp_path, '[include]\n')
    assert "selects nothing from suite full" in msg and "fa3grid" in msg
    msg = _refused(tmp_path, '[include]\nsuite = "nothere.toml"\ngroups = ["g"]\n')
    assert "line 2: [include]: suite file 'nothere.toml' not found" in msg and str(tmp_path / "nothere.toml") in msg


def test_a_bare_cache_beside_the_other_cache_table_is_the_same_cache(tmp_path) -> None:
    sc = _one(tmp_path, 'layout = { k = { kind = "cache", capacity = 4096, fill = "inf" }, v = "cache" }\n')
    assert sc.layout is not None and sc.layout.v == sc.layout.k and sc.layout.v.capacity == 4096
    sc = _one(tmp_path, 'layout = { k = "cache", v = { kind = "cache", capacity = 300 } }\n')
    assert sc.layout is not None and sc.layout.k.capacity == 300
    sc = _one(tmp_path, 'layout = { k = "cache", v = "cache" }\n')  # both bare: each the default
    assert sc.layout is not None and sc.layout.k.capacity is None and sc.layout.v.capacity is None
