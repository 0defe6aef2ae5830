"""What a newcomer read in ``--help`` and the README (fresh clone, no GPU) and found wrong or missing, each as
the kind of defect, not the instance:

- a flag whose default comes from an ``ATTNQ_*`` variable names that variable in every command's help
  (``verify --arch`` said "default sm_90a" while ``ATTNQ_ARCH`` decides it; ``evolve --arch`` said nothing);
- a numeric default is shown where the help gives none elsewhere (``verify --scenario-timeout``);
- the scenario id is spelled out (``attnq scenarios --help``, README) and the spelling matches every id of the
  built-in suites, and the GFLOP column's count is the one the README states;
- an empty campaign's ``attnq evolve status`` says how to start a run, as ``evolve report`` and ``export`` do.

The parser is inspected in process (attnq.cli.build_parser); commands run through tests.test_cli_edges.attnq."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from attnq.cli import build_parser
from attnq.commands.scenarios import DESCRIPTION
from harness.scenarios import list_suites, load_suite
from tests.test_cli_edges import attnq, refused

REPO = Path(__file__).resolve().parent.parent

#: option -> the ATTNQ_* variable its default comes from (harness/config.py Settings)
ENV_DEFAULTS = {"--arch": "ATTNQ_ARCH", "--gpu": "ATTNQ_GPU", "--goal": "ATTNQ_GOAL_SPEEDUP",
                "--goal-speedup": "ATTNQ_GOAL_SPEEDUP", "--goal-against": "ATTNQ_GOAL_ANCHOR",
                "--goal-anchor": "ATTNQ_GOAL_ANCHOR"}

#: the id spelling the help and README give
ID_RE = re.compile(r"^[a-z0-9_]+/b\d+-(s\d+|sq\d+-sk\d+)-h\d+(x\d+)?-d\d+-(causal|noncausal)-(bf16|fp16)"
                   r"(-[A-Za-z0-9_.+-]+)?$")


def _commands(parser: argparse.ArgumentParser, prefix: str = "") -> dict[str, argparse.ArgumentParser]:
    """Every (sub)command parser by its name, nested ones as 'questions list'."""
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found[prefix + name] = sub
                found.update(_commands(sub, prefix + name + " "))
    return found


def test_every_flag_set_by_an_env_variable_names_it() -> None:
    missing = []
    for name, sub in _commands(build_parser()).items():
        for action in sub._actions:
            for opt in action.option_strings:
                var = ENV_DEFAULTS.get(opt)
                if var and var not in (action.help or ""):
                    missing.append(f"attnq {name} {opt}: {action.help!r}")
    assert not missing, missing


def test_verify_shows_its_numeric_defaults() -> None:
    (verify,) = [p for n, p in _commands(build_parser()).items() if n == "verify"]
    for action in verify._actions:
        if isinstance(action.default, (int, float)) and not isinstance(action.default, bool) and action.help:
            assert f"{action.default:g}" in action.help, (action.option_strings, action.help)


def test_scenario_ids_are_spelled_as_documented() -> None:
    readme = (REPO / "README.md").read_text()
    assert "gqa/b4-s4096-h32x8-d128-causal-bf16" in readme
    for part in ("b<batch>", "sq<seqlen_q>-sk<seqlen_k>", "h<num_heads_q>", "x<num_heads_kv>", "d<head_dim>",
                 "-sc<softmax_scale>", "-x<hash>"):
        assert part in DESCRIPTION, part
    ids = [s.id for name in list_suites() for s in load_suite(name).scenarios]
    assert "gqa/b4-s4096-h32x8-d128-causal-bf16" in ids
    assert ids and all(ID_RE.match(i) for i in ids), [i for i in ids if not ID_RE.match(i)][:5]
    assert attnq("scenarios", "--help", cwd=REPO).stdout.count("<head_dim>") == 1


def test_the_gflop_column_counts_as_the_readme_says() -> None:
    full = {s.id: s for s in load_suite("full").scenarios}
    dense = full["fa3grid/b8-s2048-h16-d128-noncausal-bf16"]
    causal = full["fa3grid/b8-s2048-h16-d128-causal-bf16"]
    assert dense.flops == 4 * 8 * 16 * 128 * 2048 * 2048
    assert causal.flops == 4 * 8 * 16 * 128 * (2048 * 2049 // 2)  # only the visible (query, key) pairs


def test_evolve_status_of_an_empty_campaign_says_how_to_start(tmp_path: Path) -> None:
    assert attnq("reflect", cwd=tmp_path).returncode == 0  # a store with the default campaign, no evolve run
    for action in ("status", "report"):
        assert "attnq evolve --from" in refused(attnq("evolve", action, cwd=tmp_path)), action


@pytest.mark.parametrize(("args", "says"), [
    (("verify", "--goal", "abc", "k.cu"), "argument --goal: invalid float value: 'abc'"),
    (("verfy",), "invalid choice: 'verfy'"),
    (("declare", "bogus"), "argument kind: invalid choice: 'bogus'"),
    (("scenarios", "--no-such-flag"), "unrecognized arguments: --no-such-flag"),
    (("serve", "--gpu", "x"), "argument --gpu: invalid int value: 'x'"),
])
def test_a_typo_in_the_arguments_is_one_line_naming_the_help(tmp_path: Path, args: tuple[str, ...], says: str) -> None:
    """argparse's errors printed the whole usage block first (3-13 lines for ``--goal abc``): now one line, the
    command's name, what was wrong and where its help is, exit 2."""
    text = refused(attnq(*args, cwd=tmp_path))
    assert len(text.splitlines()) == 1, text
    assert says in text and text.endswith("--help`)") and text.startswith("attnq"), text
