"""Suites: built-in files expand to the scenarios the issue asks for, ids are stable, bad files are refused."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from harness.errors import InputError
from harness.scenarios import Scenario, load_suite


def test_full_suite_covers_the_issue_grid() -> None:
    full = load_suite("full")
    assert len(full.scenarios) >= 150
    ids = full.ids()
    assert len(ids) == len(set(ids))
    groups = full.groups()
    for g in ("fa3grid", "hdim96_192", "gqa", "chunked_prefill", "odd", "production", "extremes"):
        assert groups.get(g, 0) > 0, g
    grid = [s for s in full.scenarios if s.group == "fa3grid" and s.dtype == "bf16"]
    # FA3 grid: 6 (batch, seqlen) pairs x head_dim 64/128/256 x causal, 16k tokens, hidden 2048
    assert len(grid) == 36
    assert all(s.batch * s.seqlen_q == 16384 and s.num_heads_q * s.head_dim == 2048 for s in grid)
    assert {s.head_dim for s in full.scenarios} == {64, 96, 128, 192, 256}
    assert {(s.num_heads_q, s.num_heads_kv) for s in full.scenarios if s.group == "gqa"} == {(32, 8), (64, 8), (32, 1)}
    assert all(s.seqlen_q < s.seqlen_k and s.causal for s in full.scenarios if s.group == "chunked_prefill")
    odd = {s.seqlen_q for s in full.scenarios if s.group == "odd"}
    assert {1, 17, 113, 239, 799, 1023, 4224} <= odd
    decode = [s for s in full.scenarios if s.group == "production" and s.seqlen_q in (1, 4)]
    assert decode and max(s.seqlen_k for s in decode) == 32768 and max(s.batch for s in decode) == 128
    assert any(s.batch == 256 and s.seqlen_q == 128 for s in full.scenarios)
    assert any(s.batch == 1 and s.num_heads_q == 1 for s in full.scenarios)
    assert {"bf16", "fp16"} == {s.dtype for s in full.scenarios}


def test_quick_and_production_are_subsets_of_full() -> None:
    full = set(load_suite("full").ids())
    quick = load_suite("quick")
    assert 8 <= len(quick.scenarios) <= 12 and set(quick.ids()) <= full
    prod = load_suite("production")
    assert set(prod.ids()) <= full and set(prod.groups()) == {"production", "chunked_prefill"}


@pytest.mark.parametrize(("sq", "sk"), [(5, 3), (3, 5), (4, 4), (1, 100), (239, 17), (17, 239)])
def test_causal_flops_count_only_visible_pairs(sq: int, sk: int) -> None:
    sc = Scenario(group="t", batch=2, seqlen_q=sq, seqlen_k=sk, num_heads_q=4, num_heads_kv=2, head_dim=64, causal=True)
    visible = sum(1 for i in range(sq) for j in range(sk) if j <= i + sk - sq)  # bottom-right rule, brute force
    assert sc.visible_pairs == visible
    assert sc.flops == 4 * 2 * 4 * visible * 64
    nc = sc.model_copy(update={"causal": False})
    assert nc.flops == 4 * 2 * 4 * sq * sk * 64


def test_ids_are_stable_and_readable() -> None:
    sc = Scenario(group="gqa", batch=4, seqlen_q=4096, seqlen_k=4096, num_heads_q=32, num_heads_kv=8,
                  head_dim=128, causal=True, dtype="bf16")
    assert sc.id == "gqa/b4-s4096-h32x8-d128-causal-bf16"
    assert "gqa/b4-s4096-h32x8-d128-causal-bf16" in load_suite("full").ids()


def test_user_suite_file(tmp_path) -> None:
    p = tmp_path / "mine.toml"
    p.write_text('name = "mine"\n[[grid]]\ngroup = "g"\nbatch = 1\nseqlen = [7, 9]\nheads = [[4, 2]]\n'
                 'head_dim = 64\ncausal = [true, false]\n[[scenario]]\ngroup = "h"\nbatch = 2\nseqlen_q = 3\n'
                 'seqlen_k = 5\nheads = [2, 2]\nhead_dim = 96\ncausal = true\ndtype = "fp16"\n')
    s = load_suite(str(p))
    assert s.name == "mine" and len(s.scenarios) == 5
    assert s.scenarios[-1].id == "h/b2-sq3-sk5-h2-d96-causal-fp16"


#: one valid [[scenario]] table, so a file fails on its top-level keys alone
_ONE = "[[scenario]]\ngroup='g'\nbatch=1\nseqlen=4\nheads=[4, 4]\nhead_dim=64\ncausal=true\n"


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("[[grid]]\ngroup='g'\nbatch=1\nseqlen=4\nheads=[[5, 2]]\nhead_dim=64\ncausal=true\n", "not divisible"),
        ("[[grid]]\ngroup='g'\nbatch=1\nseqlen=4\nheads=[[4, 2]]\nhead_dim=60\ncausal=true\n", "head_dim"),
        ("[[scenario]]\ngroup='g'\nbatch=0\nseqlen=4\nheads=[4, 2]\nhead_dim=64\ncausal=true\n", "invalid scenario"),
        # TOML has its own types: a string or an integer is no bool, a string or a float no int (trial of 2026-12-06)
        ("[[scenario]]\ngroup='g'\nbatch=1\nseqlen=4\nheads=[4, 2]\nhead_dim=64\ncausal='no'\n",
         r"line 7: \[\[scenario\]\] #1: invalid scenario: causal: .*boolean"),
        ("[[scenario]]\ngroup='g'\nbatch=1\nseqlen=4\nheads=[4, 2]\nhead_dim=64\ncausal=1\n", "causal: .*boolean"),
        ("[[scenario]]\ngroup='g'\nbatch='4'\nseqlen=4\nheads=[4, 2]\nhead_dim=64\ncausal=true\n", "batch: .*integer"),
        ("[[scenario]]\ngroup='g'\nbatch=1\nseqlen=4\nheads=[4, 2]\nhead_dim=64.0\ncausal=true\n",
         "head_dim: .*integer"),
        ("name = 'x'\n", "no scenarios"),
        ("bogus = 1\n", "unknown top-level"),
        ("name = 0\n" + _ONE, r"bad\.toml line 1: name must be a string \(in quotes\), not a TOML integer"),
        ("description = [1]\n" + _ONE, r"bad\.toml line 1: description must be a string .* TOML array"),
        ("[include]\nsuite='full'\nids=['nope']\n", "not in suite"),
        ("[[grid]\n", "cannot read"),
        (("[[scenario]]\ngroup='g'\nbatch=1\nseqlen=4\nheads=[4, 4]\nhead_dim=64\ncausal=true\n"
          "[[scenario]]\ngroup='g'\nbatch=1\nseqlen=4\nheads=[4, 4]\nhead_dim=64\ncausal=true\n"), "duplicate"),
    ],
)
def test_bad_suite_files_are_refused_clearly(tmp_path, text: str, needle: str) -> None:
    p = tmp_path / "bad.toml"
    p.write_text(text)
    with pytest.raises(InputError, match=needle):
        load_suite(str(p))


#: a [[scenario]] table with one shape key left to the test
_SHAPE = "[[scenario]]\ngroup='g'\nbatch=1\nseqlen=128\nhead_dim=128\ncausal=false\n{}\n"


@pytest.mark.parametrize(
    ("key", "needle"),
    [
        ("heads = 8", r"line 7: \[\[scenario\]\] #1: heads must be \[num_heads_q, num_heads_kv\].*; got 8$"),
        ("heads = [8]", r"line 7: .*heads must be \[num_heads_q, num_heads_kv\].*; got \[8\]$"),
        ("heads = [8, 8, 8]", r"heads must be .*; got \[8, 8, 8\]$"),
        ("heads = '8'", r"heads must be .*; got '8'$"),
        ("batch_seqlen = 4", r"batch_seqlen must be \[batch, seqlen\].*; got 4$"),
        ("hidden = 1000", r"line 7: .*hidden must be an integer multiple of head_dim; got hidden=1000, head_dim=128"),
    ],
)
def test_a_malformed_shape_key_is_named_with_its_line_and_what_it_must_be(tmp_path, key: str, needle: str) -> None:
    """Found as a new user: `heads = 8` (a natural way to write MHA) was refused as "cannot expand:
    TypeError('cannot unpack non-iterable int object')" at the table's first line; `hidden` that head_dim does
    not divide silently gave floor(hidden / head_dim) heads."""
    p = tmp_path / "bad.toml"
    p.write_text(_SHAPE.format(key))
    with pytest.raises(InputError, match=needle) as err:
        load_suite(str(p))
    assert "Error(" not in err.value.message


def test_hidden_without_head_dim_and_an_empty_grid_axis_are_refused(tmp_path) -> None:
    p = tmp_path / "bad.toml"
    p.write_text("[[scenario]]\ngroup='g'\nbatch=1\nseqlen=128\nhidden=1024\ncausal=false\n")
    with pytest.raises(InputError, match=r"line 5: .*hidden needs head_dim"):
        load_suite(str(p))
    p.write_text("[[grid]]\ngroup='g'\nbatch=[]\nseqlen=[128]\nheads=[[8, 8]]\nhead_dim=[128]\ncausal=[false]\n")
    with pytest.raises(InputError, match=r"line 3: \[\[grid\]\] #1: batch is an empty list"):
        load_suite(str(p))


def test_every_invalid_field_of_a_scenario_is_named_at_once(tmp_path) -> None:
    """Found as a new user: four wrong fields gave "batch: ... (and 3 more)", one fix per run to find the rest."""
    p = tmp_path / "bad.toml"
    p.write_text("[[scenario]]\ngroup='g'\nbatch=1.5\nseqlen=128\nheads=[8, 8]\nhead_dim=128\ndtype='fp32'\n"
                 "softmax_scale='big'\n")
    with pytest.raises(InputError) as err:
        load_suite(str(p))
    msg = err.value.message
    assert "line 3: [[scenario]] #1: invalid scenario: batch: " in msg, msg
    for field in ("causal: Field required", "dtype: Input should be 'bf16' or 'fp16'", "softmax_scale: "):
        assert field in msg, msg
    assert "more)" not in msg, msg


def test_a_suite_that_is_not_utf8_is_refused_at_its_line_and_column(tmp_path) -> None:
    """Found as a new user: a Latin-1 byte gave the codec's "can't decode byte 0xe9 in position 33"."""
    p = tmp_path / "latin1.toml"
    p.write_bytes("# café\n[[scenario]]\ngroup = 'g'\nname = 'caf".encode() + b"\xe9'\n")
    with pytest.raises(InputError, match=r"latin1\.toml: line 4, column 12: byte 0xe9 is not UTF-8 \(save the file"):
        load_suite(str(p))


def test_unknown_suite_name() -> None:
    with pytest.raises(InputError, match="unknown suite"):
        load_suite("nonexistent")


def test_cli_scenarios_json() -> None:
    out = subprocess.run([sys.executable, "-m", "attnq", "scenarios", "--suite", "quick", "--json"],
                         capture_output=True, text=True, check=True)
    data = json.loads(out.stdout)
    assert data["name"] == "quick" and len(data["scenarios"]) == len(load_suite("quick").scenarios)
    assert all(r["flops"] > 0 for r in data["scenarios"])
    bad = subprocess.run([sys.executable, "-m", "attnq", "scenarios", "--suite", "nope"], capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown suite" in bad.stderr and "Traceback" not in bad.stderr


def test_an_include_names_a_file_beside_the_including_one(tmp_path, monkeypatch) -> None:
    """`[include] suite = "other.toml"` was looked up in the working directory, so `attnq mcp-config --suite
    /abs/mine.toml` wrote a suite the server, started elsewhere, could not load (review of 2026-12-06)."""
    (tmp_path / "suites").mkdir()
    (tmp_path / "suites" / "other.toml").write_text(_ONE)
    (tmp_path / "suites" / "mine.toml").write_text('[include]\nsuite = "other.toml"\ngroups = ["g"]\n')
    monkeypatch.chdir(tmp_path)  # neither file is in the working directory
    assert load_suite(tmp_path / "suites" / "mine.toml").ids() == load_suite(tmp_path / "suites" / "other.toml").ids()
    (tmp_path / "suites" / "bad.toml").write_text('[include]\nsuite = "missing.toml"\ngroups = ["g"]\n')
    with pytest.raises(InputError, match=r"suite file 'missing.toml' not found \(looked beside bad.toml"):
        load_suite(tmp_path / "suites" / "bad.toml")
