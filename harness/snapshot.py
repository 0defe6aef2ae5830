"""One read of a candidate: its .cu file and the local files it includes, read once and built from a private copy,
so that the policy's scans, nvcc and the build cache key all see the same bytes.

Until session 18 the scans read the user's files and nvcc opened the same paths again afterwards: a file changed in
between (an editor's save, an agent racing the compile) was built unchecked, and the cache key hashed bytes that
were not the ones built. Now :func:`take_snapshot` reads the candidate and every local file it may include (its
``#include`` lines followed from file to file, resolved as the compiler searches: a quoted name beside the including
file, then kernels/ (nvcc's ``-I``, which gives only :data:`INCLUDE_DIR_FILES`); an angled name in kernels/), each
file once, into memory; the cache key hashes those bytes; the raw scans read them; and :meth:`SourceSnapshot.write`
copies them into a fresh private folder (``mkdtemp``, mode 0700, files read-only) under their own absolute paths,
where the ``-E`` passes and the build read them (``-I`` points into the copy too). Nothing there is read from the
user's folder again.

With the policy on (``confine``), a local file is taken only from the candidate's folder or kernels/ (the folders
its includes may name), by a path that stays inside them once links are followed; a local header that is a link to
a file outside them is refused. An ``#include`` by absolute path (``#include "/home/me/cand/mine.h"``;
scripts/wrong_kernels.py writes one of kernels/attn_abi.h) would make the compiler open the user's file, not the
copy: in the copy that one path, on that line, names the file's copy instead (the rest of the line unchanged; an
include whose path the line does not spell out in one piece is refused). A local file that only a macro names
(``#include HEADER``) is not followed: it is not in the copy, and the compile error says so. The ``-E`` scan refuses
any candidate-owned file read from outside the copy (harness/policy.py ``scan_preprocessed``, given the copy's
folders as the roots), so a macro-made absolute path to the user's file is refused too.

Paths in diagnostics and violations name the user's files (:meth:`SnapshotTree.user_text`); the built library's
line info names the copy's paths.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from harness import KERNELS_DIR
from harness.build_dir import check_nvcc_path, nvcc_unsafe_chars
from harness.errors import InputError
from harness.policy import list_includes
from harness.violations import PolicyViolation

__all__ = ["MAX_LOCAL_FILES", "MAX_SNAPSHOT_BYTES", "MAX_SOURCE_BYTES", "SnapshotTree", "SourceSnapshot",
           "private_copy", "read_source", "take_snapshot"]

#: Largest accepted source file (bytes).
MAX_SOURCE_BYTES = 1024 * 1024
#: The only files nvcc's ``-I`` folder (kernels/) gives a candidate: in the copy, ``-I`` names a folder holding just
#: these (red team, session 24: nvcc's link stub compile, which no -E pass of the policy reads, includes
#: ``<stddef.h>`` with the same ``-I``, so a ``stddef.h`` an agent put in kernels/ got unscanned code into an accepted
#: library; a candidate in kernels/ still reads its own folder's files, beside it, as every candidate does).
INCLUDE_DIR_FILES = ("attn_abi.h",)
#: Most local files (headers beside the candidate or in kernels/) one candidate may include.
MAX_LOCAL_FILES = 256
#: Largest total of the candidate and its local files (bytes).
MAX_SNAPSHOT_BYTES = 16 * 1024 * 1024

_ABSOLUTE = ("an #include by absolute path whose path is not spelled out in one piece on the directive's first line "
             "(a line splice or a comment inside it): the build could not point it at the checked copy of the file; "
             "write it on one line")
_LINK_OUTSIDE = ("a local header that is a link to a file outside the candidate's folder and kernels/ (the compiler "
                 "would read and may echo it): keep the candidate's headers beside it")
_READ_OUTSIDE = ("a file of the candidate's folder or kernels/ named by an absolute path (through a macro): the "
                 "compiler read the file itself, not the checked copy; include it by a path relative to the including "
                 "file")


def _under(path: str, roots: tuple[str, ...]) -> bool:
    """Whether ``path`` (absolute, normalized) is one of ``roots`` or below one (no links followed)."""
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _read_regular(path: Path, limit: int, what: str) -> tuple[bytes, str] | None:
    """``(bytes, real path)`` of the regular file ``path``, or None when it is missing or not a regular file (a
    folder, a FIFO, a device: never opened). InputError when it holds more than ``limit`` bytes."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # replaced after the stat
            return None
        try:
            real = os.readlink(f"/proc/self/fd/{fd}")  # the file actually opened, whatever links were swapped
        except OSError:  # pragma: no cover - no /proc
            real = os.path.realpath(path)
        with os.fdopen(os.dup(fd), "rb") as fh:
            data = fh.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise InputError(f"{what} {path} is larger than the {limit} byte limit")
    return data, real


def read_source(path: str | Path) -> tuple[Path, bytes]:
    """The candidate's resolved path and bytes, read once. InputError when it is missing, not a regular file, not
    ``.cu``, larger than :data:`MAX_SOURCE_BYTES`, empty, holds NUL bytes, or has a path nvcc cannot build."""
    p = Path(path).expanduser()
    if not p.exists():
        raise InputError(f"{path}: no such file")
    if not p.is_file():
        raise InputError(f"{path}: not a regular file")
    if p.suffix != ".cu":
        raise InputError(f"{path}: a candidate must be one .cu file (got {p.suffix or 'no suffix'})")
    if (size := p.stat().st_size) > MAX_SOURCE_BYTES:
        raise InputError(f"{path}: {size} bytes is larger than the {MAX_SOURCE_BYTES} byte (1 MiB) limit")
    resolved = p.resolve()
    check_nvcc_path(resolved, "the candidate")
    try:
        got = _read_regular(resolved, MAX_SOURCE_BYTES, "the candidate")
    except InputError:
        raise InputError(f"{path}: larger than the {MAX_SOURCE_BYTES} byte (1 MiB) limit") from None
    if got is None:
        raise InputError(f"{path}: not a regular file")
    data = got[0]
    if not data.strip():
        raise InputError(f"{path}: the file is empty")
    if b"\0" in data:
        raise InputError(f"{path}: contains NUL bytes, so it is not CUDA source text (a binary file?)")
    return resolved, data


@dataclass(frozen=True)
class SourceSnapshot:
    """The candidate as read once: ``source`` (its resolved path) and ``data``; ``headers``: each local file it may
    include, by the absolute path the compiler would open (lexically normalized), and its bytes; ``include_dirs``
    (nvcc's ``-I`` folders); ``roots``: the folders local files may come from when ``confined`` (the candidate's and
    kernels/); ``refused``: local includes the snapshot would not take (a link out of the roots, an absolute path it
    cannot point at the copy), for the policy to report; ``redirects``: per file, ``(line, spelled include)`` of each
    absolute include the copy points at the file's copy (:meth:`write`)."""

    source: Path
    data: bytes
    headers: dict[Path, bytes]
    include_dirs: tuple[Path, ...]
    roots: tuple[str, ...]
    confined: bool
    refused: tuple[PolicyViolation, ...] = field(default=())
    redirects: dict[Path, list[tuple[int, str]]] = field(default_factory=dict)

    def files(self) -> list[tuple[Path, bytes]]:
        """``(user path, bytes)`` of the candidate, then of its local files in path order."""
        return [(self.source, self.data), *sorted(self.headers.items())]

    def text(self, path: str) -> str | None:
        """The snapshot's text of the user's file ``path`` (None when it is not in the snapshot)."""
        p = Path(os.path.normpath(path))
        data = self.data if p == self.source else self.headers.get(p)
        return None if data is None else data.decode("utf-8", errors="replace")

    def locate(self, including: Path, delim: str, name: str) -> list[Path]:
        """Where the compiler looks for ``#include <delim>name`` of the file ``including`` (absolute paths, lexically
        normalized, in search order): beside it for a quoted name, then in :attr:`include_dirs` for the names of
        :data:`INCLUDE_DIR_FILES`."""
        if name.startswith("/"):
            return [Path(os.path.normpath(name))]
        dirs = ([including.parent] if delim == '"' else [])
        if os.path.normpath(name) in INCLUDE_DIR_FILES:  # the -I folder of the copy holds only these
            dirs += list(self.include_dirs)
        return [Path(os.path.normpath(d / name)) for d in dirs]

    def write(self, dest: Path) -> SnapshotTree:
        """Copy every file under ``dest`` + its absolute path (read-only; no link followed, none replaced), each
        absolute include pointed at the included file's copy (:attr:`redirects`), make the mirrored include
        folders, and beside them the folders ``-I`` names in the copy (:meth:`SnapshotTree.include_copy`), each
        holding only the copies of its :data:`INCLUDE_DIR_FILES`; returns the copy."""
        for user, data in self.files():
            if user in self.redirects:
                lines = data.split(b"\n")
                for line, spelled in self.redirects[user]:
                    copy = spelled[0] + str(dest) + os.path.normpath(spelled[1:-1]) + spelled[-1]
                    lines[line - 1] = lines[line - 1].replace(spelled.encode(), copy.encode(), 1)
                data = b"\n".join(lines)
            p = dest / user.relative_to("/")
            p.parent.mkdir(parents=True, exist_ok=True)
            _write_new(p, data)
        for i, d in enumerate(self.include_dirs):
            (dest / d.relative_to("/")).mkdir(parents=True, exist_ok=True)
            only = SnapshotTree.include_copy(dest, i)
            only.mkdir(parents=True)
            for name in INCLUDE_DIR_FILES:
                if (data := self.headers.get(d / name)) is not None:
                    _write_new(only / name, data)
        return SnapshotTree(root=dest, snapshot=self)


def _write_new(path: Path, data: bytes) -> None:
    """Create ``path`` (read-only, mode 0400) holding ``data``: never through a link, never over a file."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o400)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def take_snapshot(path: str | Path, *, confine: bool = True,
                  include_dirs: tuple[Path, ...] = (KERNELS_DIR,)) -> SourceSnapshot:
    """Read the candidate at ``path`` and every local file it may include, each once (see the module doc).

    Args:
        path: the candidate's .cu file (checked by :func:`read_source`).
        confine: take local files only from the candidate's folder and ``include_dirs``, never through a link
            out of them (the policy is on); off, any file an include names is taken, as the compiler would read
            it. Either way an absolute include of a file taken is pointed at its copy (:attr:`~SourceSnapshot.redirects`).
        include_dirs: nvcc's ``-I`` folders (kernels/).
    Raises InputError for a bad candidate file, more than :data:`MAX_LOCAL_FILES` local files or more than
    :data:`MAX_SNAPSHOT_BYTES` in all.
    """
    source, data = read_source(path)
    inc = tuple(Path(os.path.realpath(d)) for d in include_dirs)
    roots = tuple(dict.fromkeys((str(source.parent), *map(str, inc))))
    snap = SourceSnapshot(source=source, data=data, headers={}, include_dirs=inc, roots=roots, confined=confine)
    refused: list[PolicyViolation] = []
    total, todo = len(data), [(source, data)]
    while todo:
        cur, body = todo.pop()
        physical = body.split(b"\n")
        for line, delim, name in list_includes(body.decode("utf-8", errors="replace")):
            taken, why = _take(snap, cur, delim, name)
            if why:
                refused.append(PolicyViolation(kind="header", name=name, reason=why, file=str(cur), line=line))
                continue
            if taken is None:
                continue
            if name.startswith("/"):  # the compiler would open the user's file: point this include at the copy
                spelled = delim + name + (">" if delim == "<" else '"')
                if spelled.encode() not in physical[line - 1]:
                    refused.append(PolicyViolation(kind="header", name=name, reason=_ABSOLUTE, file=str(cur),
                                                   line=line))
                    continue
                snap.redirects.setdefault(cur, []).append((line, spelled))
            if taken[1] is not None:
                total += len(taken[1])
                if len(snap.headers) > MAX_LOCAL_FILES or total > MAX_SNAPSHOT_BYTES:
                    raise InputError(f"{source}: includes more than {MAX_LOCAL_FILES} local files or "
                                     f"{MAX_SNAPSHOT_BYTES} bytes in all (local files are its own headers and "
                                     "kernels/'s)")
                todo.append((taken[0], taken[1]))
    return SourceSnapshot(source=source, data=data, headers=dict(sorted(snap.headers.items())), include_dirs=inc,
                          roots=roots, confined=confine, refused=tuple(refused), redirects=snap.redirects)


def _take(snap: SourceSnapshot, cur: Path, delim: str, name: str) -> tuple[tuple[Path, bytes | None] | None, str]:
    """Find ``#include <delim>name`` of the file ``cur`` as the compiler would and take it into ``snap.headers``.

    Returns ``((path, bytes), "")`` for a file newly taken, ``((path, None), "")`` for one taken before (or the
    candidate itself), ``(None, "")`` when it is not a local file (not found, or outside the roots when confined:
    the raw scan judges that spelling; nothing is read), ``(None, reason)`` when it is refused.
    """
    for cand in snap.locate(cur, delim, name):
        if snap.confined and not _under(str(cand), snap.roots):
            continue
        if cand == snap.source or cand in snap.headers:
            return (cand, None), ""
        got = _read_regular(cand, MAX_SNAPSHOT_BYTES, f"{snap.source}: the local header")
        if got is None:
            continue  # not there (or not a file): the compiler searches on
        if snap.confined and not _under(os.path.realpath(got[1]), snap.roots):
            return None, _LINK_OUTSIDE
        snap.headers[cand] = got[0]
        return (cand, got[0]), ""
    return None, ""


@dataclass(frozen=True)
class SnapshotTree:
    """A :class:`SourceSnapshot` written under ``root`` (:meth:`SourceSnapshot.write`): what nvcc reads."""

    root: Path
    snapshot: SourceSnapshot

    def path(self, user: Path | str) -> Path:
        """The copy of the user's file or folder ``user``."""
        return self.root / Path(user).relative_to("/")

    @property
    def source(self) -> Path:
        """The copy of the candidate."""
        return self.path(self.snapshot.source)

    @property
    def roots(self) -> tuple[str, ...]:
        """The copies of the folders the candidate's own files may come from (for ``scan_preprocessed``), and the
        folders ``-I`` names in the copy (:meth:`include_copy`)."""
        return tuple(str(self.path(r)) for r in self.snapshot.roots) + tuple(
            str(self.include_copy(self.root, i)) for i in range(len(self.snapshot.include_dirs)))

    @staticmethod
    def include_copy(root: Path, index: int) -> Path:
        """The folder that stands for the snapshot's ``index``-th ``-I`` folder in the copy under ``root``: only its
        :data:`INCLUDE_DIR_FILES` are there, so no tool nvcc starts with that ``-I`` (the link stub's compile among
        them) can find another file of kernels/ by name."""
        return root / ".include" / str(index)

    def flags(self, flags: list[str]) -> list[str]:
        """``flags`` with each ``-I`` folder of the snapshot replaced by :meth:`include_copy`."""
        inc = [str(d) for d in self.snapshot.include_dirs]
        return [str(self.include_copy(self.root, inc.index(os.path.realpath(f))))
                if i and flags[i - 1] == "-I" and os.path.realpath(f) in inc else f for i, f in enumerate(flags)]

    def owned(self, base: Callable[[str], bool]) -> Callable[[str], bool]:
        """``base`` (harness.nvcc_passes.owned_predicate), and True for every file of the copy wherever it lies."""
        root = str(self.root)
        return lambda p: _under(os.path.normpath(p), (root,)) or base(p)

    def user_text(self, text: str) -> str:
        """``text`` (diagnostics, paths) with the copy's paths turned back into the user's."""
        for i, d in enumerate(self.snapshot.include_dirs):
            text = text.replace(str(self.include_copy(self.root, i)), str(d))
        return text.replace(str(self.root), "")

    def user_violations(self, violations: list[PolicyViolation]) -> list[PolicyViolation]:
        """``violations`` of the ``-E`` scans with the user's paths; a file of the candidate's folder or kernels/ read
        from outside the copy (an absolute path made by a macro) is named as such."""
        out = []
        for v in violations:
            upd = {"file": self.user_text(v.file) if v.file else v.file, "name": self.user_text(v.name)}
            if v.kind == "header" and v.name.startswith("/") and not v.name.startswith(str(self.root)) \
                    and _under(os.path.realpath(v.name), self.snapshot.roots):
                upd["reason"] = _READ_OUTSIDE
            out.append(v.model_copy(update=upd))
        return out

    def missing_local(self, missing: str, including: str | None) -> str | None:
        """A hint when the compiler could not open ``missing`` (included from the user's file ``including``) but the
        user's folders hold it: the snapshot did not follow that include (a macro names it)."""
        where = Path(including) if including else self.snapshot.source
        for cand in self.snapshot.locate(where, '"', missing):
            if (not self.snapshot.confined or _under(str(cand), self.snapshot.roots)) and cand.is_file() \
                    and cand not in self.snapshot.headers:
                return (f"{cand} exists, but only the files that #include lines name literally are copied for the "
                        f"build (harness/snapshot.py): include it as #include \"{missing}\", not through a macro")
        return None


def text_if_built(data: bytes | None, built_sha256: str | None) -> str | None:
    """``data``, a candidate file read again for the campaign store after its verification, as text (undecodable bytes
    replaced), or None when it is not what was built: its sha256 is not ``built_sha256`` (the verdict's or the
    compile result's ``source_sha256``), because the file changed while the run went on or another file of that name
    was read (red team, session 24: the store archived an edited file under the old file's verdict). With
    ``built_sha256`` None (nothing was built: a compile error) ``data`` is kept."""
    if data is None or (built_sha256 and hashlib.sha256(data).hexdigest() != built_sha256):
        return None
    return data.decode("utf-8", errors="replace")


@contextlib.contextmanager
def private_copy(snapshot: SourceSnapshot, parent: Path, prefix: str) -> Iterator[SnapshotTree]:
    """The snapshot written into a new private folder under ``parent`` (named ``prefix`` + random; mode 0700),
    removed when the block ends. nvcc splits an ``-I`` value at commas, and the copy's kernels/ is one: where
    ``parent`` holds a comma the system's temp folder is used instead (InputError when that holds one too)."""
    for base in (Path(parent), Path(tempfile.gettempdir()).resolve()):
        if "," not in str(base) and not nvcc_unsafe_chars(base, is_file=False):
            break
    else:
        raise InputError(f"nvcc cannot take the build folder {parent} in an -I option (a comma or a quote in its "
                         "path), nor the temp folder: set TMPDIR to a plain folder")
    root = Path(tempfile.mkdtemp(prefix=prefix, dir=base))
    try:
        yield snapshot.write(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
