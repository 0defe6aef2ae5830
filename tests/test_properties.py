"""Property-based tests (Hypothesis) of attnq's two edges and the files it reads (issue 16's habit).

Whatever the arguments or the file contents, the answer is a result or a plain error the user can act
on, never a crash:

- the CLI (every subcommand but ``serve``, in process through attnq.cli.main): exit 0, 1 (a ``done``
  claim whose goal is not met) or 2 with a message on stderr; never 70 (a bug), never a traceback;
- the MCP tools (in process through the SDK's client): a result, or a tool error ``[code] message``
  whose code is not ``internal_error``, never a bare ``Error executing tool <name>``;
- files: random bytes, encodings, sizes and names as a candidate ``.cu`` (compile_kernel), a bank file
  and a suite file: the result, or the one AttnqError subclass each documents.

Budget: CI has two cores and the whole suite should stay within a few minutes, so every test draws
few examples (``max_examples`` below) with no per-example deadline (nvcc and a loaded machine vary);
in CI (``CI=true``) the examples are derandomized so a run is reproducible. ``HYPOTHESIS_SCALE=20`` multiplies
every budget for a deeper search on a developer's machine.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, Phase, assume, example, given, settings
from hypothesis import strategies as st
from mcp.client import Client

from attnq.cli import EXIT_BUG, main
from harness.build_dir import nvcc_unsafe_chars
from harness.compile import compile_kernel
from harness.config import Settings
from harness.errors import AbiError, CompileError, InputError, PolicyError, QuestionBankError
from harness.scenarios import load_suite
from mcp_server.server import build_server
from questions.bank import load_bank_file
from questions.text import unsafe_char

REPO = Path(__file__).resolve().parent.parent
TINY = REPO / "tests" / "data" / "compile" / "tiny.cu"
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")


def budget(n: int, *, shrink: bool = True) -> Any:
    """Hypothesis settings for a test of ``n`` examples (see the module docstring). ``shrink=False`` (tests
    whose examples cost a server session or an nvcc run, and everything in CI) reports a failing example as
    found: shrinking one can take minutes."""
    ci = os.environ.get("CI") == "true"
    n = max(1, round(n * float(os.environ.get("HYPOTHESIS_SCALE", "1"))))  # e.g. 20 for a deeper local search
    phases = [Phase.explicit, Phase.reuse, Phase.generate] + ([Phase.shrink] if shrink and not ci else [])
    return settings(max_examples=n, deadline=None, database=None, derandomize=ci, phases=phases,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                           HealthCheck.data_too_large])


#: Text a user or a client might send: any printable character, controls, direction overrides, the
#: surrogates Python makes of non-UTF-8 argv bytes, long runs. No '/' in CLI arguments (a random
#: absolute path could make `export` write outside the test's directory) and no NUL (argv cannot hold one).
ODD = ["\x1b[31m", "\u202e", "\u2066", "\x7f", "\t", "\n", "?", "..", "-", "--", "\\", "'", '"', "é", "這", "؟",
       "\ufeff", " " * 3]
#: Text over JSON (MCP): a client's JSON encoder cannot carry lone surrogates, so none here.
TEXT = st.lists(st.one_of(st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="/\x00"),
                                  max_size=12), st.sampled_from(ODD)), max_size=6).map("".join)
#: Text in argv: also the surrogates Python makes of non-UTF-8 bytes, inside otherwise ordinary text.
ARGV_TEXT = st.one_of(TEXT, st.builds(lambda a, s, b: a + s + b, TEXT, st.sampled_from(["\udce9", "\udcff"]),
                                      st.sampled_from(["", "?", " is it bound?", "x.cu", "abc"])))
NUMBERISH = st.sampled_from(["0", "-1", "1", "3", "1e400", "-1e400", "nan", "inf", "1.5", "99999999999999999999",
                             "0x10", ""])

V = ARGV_TEXT  # any value
NUM = st.one_of(NUMBERISH, V)
FILE = st.one_of(V, st.sampled_from(["x.cu", "b.toml", "b.json", "t.jsonl", "-", ".", ".."]))
TRIG = st.one_of(st.sampled_from(["stall", "declared_limit", "declared_done", "suspicious_win", "churn"]), V)
FLAG = None
#: subcommand -> (positional value strategies, {option: value strategy or FLAG}); values are mostly odd text.
SPEC: dict[tuple[str, ...], tuple[list[Any], dict[str, Any]]] = {
    ("compile",): ([FILE], {"--arch": st.one_of(st.sampled_from(["sm_90a", "sm_100a"]), V), "--json": FLAG,
                            "--no-policy": FLAG, "--cache-dir": V}),
    ("scenarios",): ([], {"--suite": st.one_of(st.sampled_from(["quick", "full", "production"]), FILE),
                          "--json": FLAG}),
    ("verify",): ([FILE], {"--suite": V, "--anchors": st.one_of(st.sampled_from(["flash", "cudnn,flash"]), V),
                           "--arch": V, "--gpu": NUM, "--goal": NUM, "--goal-against": V, "--scenario": V,
                           "--scenario-timeout": NUM, "--budget-ms": NUM, "--no-policy": FLAG, "--no-record": FLAG,
                           "--json": FLAG}),
    ("reflect",): ([], {"--trigger": TRIG, "--claim": V, "--campaign": V, "--workspace": V, "--json": FLAG}),
    ("declare",): ([st.sampled_from(["limit", "done"]), V], {"--campaign": V, "--json": FLAG}),
    ("questions", "list"): ([], {"--trigger": TRIG, "--layer": V, "--campaign": V, "--json": FLAG}),
    ("questions", "stats"): ([], {"--horizon": NUM, "--campaign": V, "--json": FLAG}),
    ("questions", "add"): ([V], {"--trigger": TRIG, "--layer": st.one_of(st.just("pipelining"), V),
                                 "--campaign": V, "--json": FLAG}),
    ("questions", "demote"): ([V], {"--reason": V, "--json": FLAG}),
    ("questions", "export"): ([FILE], {"-o": FILE, "--format": st.one_of(st.sampled_from(["toml", "json"]), V)}),
    ("questions", "import"): ([FILE], {}),
    ("questions", "validate"): ([FILE], {"--json": FLAG}),
    ("trace", "export"): ([FILE], {"-o": FILE, "--format": st.one_of(st.sampled_from(["jsonl", "json"]), V),
                                   "--campaign": V}),
    ("trace", "show"): ([], {"--horizon": NUM, "--campaign": V, "--json": FLAG}),
    ("trace", "campaigns"): ([], {"--json": FLAG}),
    ("trace", "use"): ([st.one_of(st.sampled_from(["default", "alpha"]), V)], {"--new": FLAG}),
    ("mcp-config",): ([st.one_of(st.sampled_from(["claude-code", "codex", "command"]), V)], {"--suite": V}),
}


@st.composite
def cli_argv(draw: st.DrawFn) -> list[str]:
    """A subcommand with its positionals and some of its options, mostly well formed, with odd values (so
    most examples reach the command's own code), and now and then a stray token or a missing value."""
    cmd = draw(st.sampled_from(sorted(SPEC)))
    positional, options = SPEC[cmd]
    argv = [*cmd, *(draw(v) for v in positional if draw(st.integers(0, 9)) > 0)]
    for opt in draw(st.lists(st.sampled_from(sorted(options)), max_size=3, unique=True)) if options else []:
        argv.append(opt)
        if options[opt] is not FLAG and draw(st.integers(0, 9)) > 0:
            argv.append(draw(options[opt]))
    if draw(st.integers(0, 9)) == 0:
        argv.insert(draw(st.integers(0, len(argv))), draw(st.one_of(V, NUMBERISH)))
    lead = draw(st.sampled_from([[], [], ["--log-level", "error"], ["--log-level"]]))
    return [*lead, *argv]


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """attnq.cli.main in process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse: --help, usage errors
            code = exc.code if isinstance(exc.code, int) else 2
    return code, out.getvalue(), err.getvalue()


@budget(250)
@given(argv=cli_argv())
def test_cli_never_crashes(argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(argv)
    assert code != EXIT_BUG and "Traceback" not in err, (argv, err)
    assert code in (0, 1, 2), (argv, code, err)
    if code == 2:  # a message: a line on stderr, or with --json the error document on stdout
        assert err.strip() or json.loads(out)["message"].strip(), argv


# -- MCP tools ------------------------------------------------------------------------------------------------------
#: A tool error the agent can act on: ``[code] message`` (the SDK may prefix ``Error executing tool <name>: ``).
CODED = re.compile(r"^(?:Error executing tool [a-z_]+: )?\[(?P<code>[a-z_]+)\] (?=.*\S)", re.DOTALL)


def coded(text: str) -> re.Match[str] | None:
    """The ``[code] message`` match of a tool error's text; None unless the text is also free of control and
    direction-override characters (a message may quote the caller's input, and a client may show it raw)."""
    return CODED.match(text) if not any(unsafe_char(ch) for ch in text if ch != "\n") else None
JSONISH = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), TEXT,
              st.sampled_from(["k.cu", "quick", "full", "stall", "done", "limit", "flash", "cudnn", "summary",
                               "numerics", "../../etc/passwd", "/etc/passwd", "x" * 5000, ""])),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(TEXT, inner, max_size=3)),
    max_leaves=6)


#: Values aimed at one parameter: paths of every shape (the issue's 5000-character name among them).
PATHS = st.one_of(TEXT, st.sampled_from(["k.cu", "", " ", "..", "/", "~/k.cu", "/etc/passwd", "../../etc/passwd",
                                         "k" * 5000 + ".cu", "x.cu/" * 300, "kernels/attn_original.cu", "a\nb.cu",
                                         "é這؟.cu", "-k.cu", "k.CU", "k.cu\t"]))
AIMED = {"path": PATHS, "job_id": st.one_of(TEXT, st.sampled_from(["", "0" * 12, "x" * 10_000])),
         "text": st.one_of(TEXT, st.sampled_from(["Is it bound?", "done", "x" * 100_000, " " * 10])),
         "claim": st.one_of(TEXT, st.just("y" * 100_000)),
         "scenario_ids": st.lists(TEXT, max_size=3), "wait_s": st.floats(-1, 1)}


@st.composite
def tool_calls(draw: st.DrawFn, schemas: dict[str, dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """A few tool calls; each argument is the tool's own parameter or a stray key, with any JSON value (or,
    half the time for the parameters of :data:`AIMED`, a value aimed at that parameter)."""
    calls = []
    for _ in range(draw(st.integers(1, 4))):
        name = draw(st.sampled_from(sorted(schemas)))
        params = sorted(schemas[name].get("properties", {}))
        keys = draw(st.lists(st.one_of(st.sampled_from(params) if params else TEXT, TEXT), max_size=4, unique=True))
        calls.append((name, {k: draw(st.one_of(AIMED[k], JSONISH) if k in AIMED else JSONISH) for k in keys}))
    return calls


@pytest.fixture(scope="module")
def tool_schemas(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    server = build_server(Settings(workspace=tmp_path_factory.mktemp("schemas")))

    async def main_() -> dict[str, dict[str, Any]]:
        async with Client(server) as c:
            return {t.name: t.input_schema for t in (await c.list_tools()).tools}

    return anyio.run(main_)


def test_mcp_tools_answer_with_a_code(tool_schemas: dict[str, dict[str, Any]], tmp_path: Path) -> None:
    @budget(40, shrink=False)
    @given(calls=tool_calls(tool_schemas))
    def prop(calls: list[tuple[str, dict[str, Any]]]) -> None:
        server = build_server(Settings(workspace=tmp_path))

        async def session() -> list[Any]:
            async with Client(server) as c:
                return [await c.call_tool(name, args) for name, args in calls]

        try:
            results = anyio.run(session)
        finally:
            server.attnq_state.close()  # type: ignore[attr-defined]
        for (name, args), r in zip(calls, results, strict=True):
            if not r.is_error:
                assert r.structured_content is not None, (name, args)
                continue
            text = r.content[0].text if r.content else ""
            m = coded(text)
            assert m is not None, (name, args, text)  # never a bare "Error executing tool <name>"
            assert m["code"] != "internal_error" and "Traceback" not in text, (name, args, text)

    prop()


# -- files -----------------------------------------------------------------------------------------------------------
CU_BYTES = st.one_of(
    st.binary(min_size=0, max_size=3000),
    st.sampled_from(["utf-8", "latin-1", "utf-16", "utf-8-sig", "cp1252", "utf-32"]).map(
        lambda enc: TINY.read_text().replace("// ", "// café 這 ").encode(enc, errors="replace")),
    st.integers(0, 2).map(lambda k: [b"", b" \n\t" * 10, b"x" * (1024 * 1024 + 1)][k]),
    st.binary(min_size=1, max_size=200).map(lambda junk: TINY.read_bytes() + b"\n" + junk),
)


@needs_nvcc
def test_compile_any_bytes(tmp_path: Path) -> None:
    """Random bytes, a valid kernel in several encodings, empty/blank/oversized files, a kernel with junk
    appended: a CompileResult or a compile/input/policy/ABI error; nothing else."""
    @budget(6, shrink=False)
    @given(data=CU_BYTES)
    def prop(data: bytes) -> None:
        f = tmp_path / "cand.cu"
        f.write_bytes(data)
        try:
            compile_kernel(f, cache_dir=tmp_path / "build")
        except (InputError, CompileError, PolicyError, AbiError) as err:
            assert err.message.strip()

    prop()


NAME_CHARS = st.characters(blacklist_categories=("Cs",), blacklist_characters="/\x00")


@needs_nvcc
def test_compile_any_file_name(tmp_path: Path) -> None:
    """Odd but legal file names (spaces, quotes, non-Latin, leading dashes) compile like any other, or, for
    the few characters nvcc's shell quoting cannot take, are refused naming them; the build cache is
    bypassed with a unique comment so nvcc really sees each name."""
    @budget(3, shrink=False)
    @given(stem=st.text(NAME_CHARS, min_size=1, max_size=40), salt=st.uuids())
    def prop(stem: str, salt: Any) -> None:
        assume(stem not in (".", "..") and len((stem + ".cu").encode()) <= 255)
        f = tmp_path / f"{stem}.cu"
        f.write_text(TINY.read_text() + f"\n// {salt}\n")
        try:
            res = compile_kernel(f, cache_dir=tmp_path / "build")
            assert Path(res.library).is_file()
        except InputError as err:  # the characters nvcc's shell quoting cannot take, named
            assert nvcc_unsafe_chars(f) and "rename it" in err.message, (stem, err.message)
        finally:
            f.unlink()

    prop()


def test_mcp_paths_of_any_shape(tmp_path: Path) -> None:
    """compile_kernel / verify_kernel with any path string: a coded error (nothing exists in the workspace)."""
    @budget(30, shrink=False)
    @given(path=st.one_of(TEXT, st.text(NAME_CHARS, min_size=200, max_size=6000), st.sampled_from(
        ["", " ", "~", "~/x.cu", "..", "/", "/proc/self/mem", "a" * 300 + ".cu", "x.cu/" * 200, "é.cu"])))
    def prop(path: str) -> None:
        server = build_server(Settings(workspace=tmp_path))

        async def session() -> list[Any]:
            async with Client(server) as c:
                return [await c.call_tool(t, {"path": path}) for t in ("compile_kernel", "verify_kernel")]

        try:
            results = anyio.run(session)
        finally:
            server.attnq_state.close()  # type: ignore[attr-defined]
        for r in results:
            text = r.content[0].text
            m = coded(text)
            assert r.is_error and m is not None and m["code"] in ("input_error", "outside_workspace"), (path, text)

    prop()


TOML_VALUE = st.recursive(st.one_of(st.booleans(), st.integers(-5, 300), st.floats(allow_nan=False), TEXT),
                          lambda inner: st.lists(inner, max_size=3), max_leaves=5)
BANK_DOC = st.one_of(
    st.binary(max_size=400),
    st.lists(st.dictionaries(st.sampled_from(["id", "text", "triggers", "layer", "note", "requires", "x"]),
                             st.one_of(TOML_VALUE, st.sampled_from(["stall", ["stall"], "numerics", "a-b", "Q?"])),
                             max_size=6), max_size=3).map(lambda qs: json.dumps({"questions": qs}).encode()),
)


@budget(60)
@given(data=BANK_DOC, suffix=st.sampled_from([".toml", ".json", ".txt"]))
def test_bank_file_of_any_content(data: bytes, suffix: str, tmp_path: Path) -> None:
    f = tmp_path / f"bank{suffix}"
    f.write_bytes(data)
    try:
        load_bank_file(f)
    except QuestionBankError as err:
        assert err.message.strip()


def _toml_scalar(v: Any) -> str:
    return json.dumps(v, ensure_ascii=True) if not isinstance(v, bool) else str(v).lower()


SUITE_DOC = st.one_of(
    st.binary(max_size=400),
    st.dictionaries(
        st.sampled_from(["name", "description", "scenario", "grid", "include", "extra"]),
        st.one_of(st.integers(-3, 5), TEXT.map(lambda t: t.encode("utf-8", "surrogatepass").decode("utf-8", "replace")),
                  st.sampled_from(["[1, 2]", "{ suite = 'quick', ids = 3 }", "{ suite = 3 }", "{ groups = 'x' }",
                                   ("[{ batch = 1, seqlen_q = 64, seqlen_k = 64, num_heads_q = 1, num_heads_kv = 1, "
                                    "head_dim = 64, causal = false, dtype = 'bf16', group = 'g' }]"),
                                   "[{ batch = -1 }]", "'x'"])),
        max_size=4).map(lambda d: "\n".join(f"{k} = {v if isinstance(v, str) and v[:1] in '[{' + chr(39) else _toml_scalar(v)}"
                                            for k, v in d.items()).encode()),
)


@budget(60)
@given(data=SUITE_DOC)
# found by a deeper search: a valid scenario with a non-string name/description reached Suite(...) unchecked
@example(data=b"scenario=[{batch=1,seqlen_q=6,seqlen_k=6,num_heads_q=1,num_heads_kv=1,head_dim=64,"
              b"causal=false,dtype='bf16',group=''}]\nname=0")
@example(data=b"description=[1]\n[[scenario]]\ngroup='g'\nbatch=1\nseqlen=4\nheads=[4, 4]\nhead_dim=64\ncausal=true")
def test_suite_file_of_any_content(data: bytes, tmp_path: Path) -> None:
    f = tmp_path / "suite.toml"
    f.write_bytes(data)
    try:
        suite = load_suite(f)
        assert suite.scenarios
    except InputError as err:
        assert err.message.strip()

