"""The SGLang patch set: read the series, check each patch's state, apply all or nothing.

Patches are applied with GNU patch (-p1, no fuzz), the same tool and flags Nix's
patchPhase uses, so a tree patched here is byte-identical to the Nix build.
"""

from __future__ import annotations

import contextlib
import enum
import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .. import stacks
from ..errors import Eagle3Error, settle
from ..exit_status import ExitStatus, for_signal
from ..source.tree import SGLangTree

PATCH_FLAGS = ["-p1", "--fuzz=0", "--force", "--batch", "--no-backup-if-mismatch", "--reject-file=-"]


class PatchError(Eagle3Error):
    """The patch set cannot be applied or checked; the message says why and what to do."""

    status = ExitStatus.CHECK_FAILED


class TreeNotWritable(PatchError):
    """The SGLang tree cannot be written by this user; nothing was changed."""

    status = ExitStatus.BAD_INPUT


class WrongVersion(PatchError):
    """The tree is another SGLang version than the series is for: the wrong tree was given."""

    status = ExitStatus.BAD_INPUT


class PatchProgramMissing(PatchError):
    """GNU patch is not installed: the host lacks a program (a failed check, as in every command)."""

    status = ExitStatus.CHECK_FAILED


class TreeIncomplete(PatchError):
    """The tree lacks a file the series changes: not a whole install of its SGLang version."""

    status = ExitStatus.BAD_INPUT


class ApplyInterrupted(PatchError):
    """SIGINT/SIGTERM arrived while applying; the tree was left as it was."""

    status = ExitStatus.INTERRUPTED

    def __init__(self, signum: int):
        super().__init__(
            f"interrupted by {signal.Signals(signum).name}; the tree was left unchanged", for_signal(signum)
        )
        self.signum = signum


@dataclass(frozen=True)
class Patch:
    name: str
    path: Path

    @property
    def text(self) -> str:
        return self.path.read_text(errors="replace")

    @property
    def summary(self) -> str:
        """The first line of the patch header."""
        return self.text.splitlines()[0].strip()

    @property
    def header(self) -> str:
        """Everything before the first diff: what, why, upstream reference."""
        return self.text.split("\n--- ", 1)[0].strip()

    @property
    def files(self) -> list[str]:
        """Paths (relative to the tree root, -p1 stripped) this patch changes."""
        return [m.split("/", 1)[1] for m in re.findall(r"^\+\+\+ (\S+)", self.text, re.MULTILINE)]

    @property
    def file_headers(self) -> list[tuple[str, str]]:
        """(old, new) path of each file the patch diffs, -p1 stripped ("/dev/null" kept): a ``--- `` line directly
        followed by ``+++ `` and then ``@@`` (a removed line that reads ``-- x`` is no header)."""
        lines = self.text.splitlines()
        headers = []
        for old, new, hunk in zip(lines, lines[1:], lines[2:], strict=False):
            if old.startswith("--- ") and new.startswith("+++ ") and hunk.startswith("@@"):
                headers.append((_strip_p1(old[4:]), _strip_p1(new[4:])))
        return headers

    @property
    def changed_files(self) -> list[str]:
        """The files this patch changes that must be there before it applies: not those it creates from
        /dev/null, nor those it deletes (gone once it is applied)."""
        return [old for old, new in self.file_headers if "/dev/null" not in (old, new)]

    @property
    def created_files(self) -> list[str]:
        return [new for old, new in self.file_headers if old == "/dev/null"]


def _strip_p1(path: str) -> str:
    """``a/sglang/x.py`` (a tab and a date may follow) -> ``sglang/x.py``; ``/dev/null`` stays."""
    path = path.split("\t")[0].strip()
    return path if path == "/dev/null" else path.split("/", 1)[-1]


@dataclass(frozen=True)
class PatchSeries:
    directory: Path
    sglang_version: str
    patches: tuple[Patch, ...]

    @classmethod
    def load(cls, directory: Path | None = None, version: str | None = None) -> PatchSeries:
        """The series in ``directory``, else the one for SGLang ``version`` (default: the pinned one)."""
        directory = directory or default_series_dir(version)
        series_file = directory / "series"
        if not series_file.is_file():
            raise PatchError(f"no series file in {directory}")
        try:
            names = read_series(series_file)
        except (OSError, UnicodeDecodeError) as err:
            raise PatchError(f"cannot read {series_file}: {err}") from None
        missing = [n for n in names if not (directory / n).is_file()]
        if missing:
            raise PatchError(f"{series_file} lists patches that do not exist: {', '.join(missing)}")
        version = series_version(directory)
        if version is None:
            raise PatchError(f"patch directory {directory} must be named sglang-<version>")
        return cls(directory, version, tuple(Patch(n, directory / n) for n in names))

    @classmethod
    def for_version(cls, version: str | None) -> PatchSeries:
        """SGLang ``version``'s own series when this project has one, else the pinned version's."""
        directory = find_series_dir(version) if version else None
        return cls.load(directory)


def read_series(series_file: Path) -> list[str]:
    """Patch file names in order: one per line, '#' starts a comment (quilt's format)."""
    names = [line.split("#", 1)[0].strip() for line in series_file.read_text().splitlines()]
    return [name for name in names if name]


def series_version(directory: Path) -> str | None:
    """``sglang-0.5.23`` -> ``0.5.23``; a Nix store copy (``<hash>-sglang-0.5.23``) counts too."""
    match = re.fullmatch(r"(?:[0-9a-z]{32}-)?sglang-(.+)", directory.name)
    return match.group(1) if match else None


def find_series_dir(version: str | None = None) -> Path | None:
    """Where the series for SGLang ``version`` (default: the pinned one) is, in the copy inside a built wheel or in the
    repo, or None. $SGLANG_EAGLE3_PATCHES (the Nix package's stack's series) is the default, and its version's."""
    candidates = []
    given = os.environ.get("SGLANG_EAGLE3_PATCHES")
    if given and (version is None or series_version(Path(given)) == version):
        candidates.append(Path(given))
    name = f"sglang-{version or stacks.default().version}"
    package = Path(__file__).resolve().parents[1]
    candidates.append(package / "patches" / name)  # wheel (force-include)
    candidates.append(package.parents[2] / "patches" / name)  # repo checkout
    return next((c for c in candidates if (c / "series").is_file()), None)


def default_series_dir(version: str | None = None) -> Path:
    """The series for SGLang ``version`` (default: the pinned one); PatchError when there is none."""
    found = find_series_dir(version)
    if found is None:
        version = version or stacks.default().version
        raise PatchError(
            f"cannot find the patch set for SGLang {version}; set SGLANG_EAGLE3_PATCHES to the patches/sglang-"
            f"{version} directory of this project"
        )
    return found


class PatchState(enum.Enum):
    APPLIED = "applied"
    NOT_APPLIED = "not applied"
    CONFLICT = "conflict"


@dataclass(frozen=True)
class PatchStatus:
    patch: Patch
    state: PatchState
    detail: str = ""  # GNU patch's own words when the patch conflicts


def _run_patch(patch: Patch, directory: Path, *extra: str) -> subprocess.CompletedProcess:
    if shutil.which("patch") is None:
        raise PatchProgramMissing("GNU patch is not installed; install it (Debian/Ubuntu: apt-get install patch)")
    return subprocess.run(
        # GNU patch opens -i from the -d directory: a relative path (``--series patches/...``) would miss.
        ["patch", *PATCH_FLAGS, *extra, "-d", str(directory), "-i", str(patch.path.absolute())],
        capture_output=True,
        text=True,
    )


def status(patch: Patch, tree: SGLangTree) -> PatchStatus:
    """The state of one patch against the tree as it is (no version check)."""
    if _run_patch(patch, tree.root, "--dry-run", "--reverse").returncode == 0:
        return PatchStatus(patch, PatchState.APPLIED)
    forward = _run_patch(patch, tree.root, "--dry-run")
    if forward.returncode == 0:
        return PatchStatus(patch, PatchState.NOT_APPLIED)
    return PatchStatus(patch, PatchState.CONFLICT, (forward.stdout + forward.stderr).strip())


def check_version(series: PatchSeries, tree: SGLangTree) -> None:
    if tree.version != series.sglang_version:
        found = tree.version or "an unknown version"
        want = series.sglang_version
        raise WrongVersion(f"{tree.package} is SGLang {found}, but this patch set is for SGLang {want}; install "
                           f"sglang=={want} there or point --sglang at an SGLang {want} tree")  # fmt: skip


def apply_command(tree: SGLangTree) -> str:
    """The command that applies the series to ``tree``, as hints print it. A pristine release unpacked to be read
    (``--sglang VERSION``) is not patched: the hint names the SGLang that is served instead."""
    if tree.release is not None:
        return f"sglang-eagle3 patch apply --sglang DIR, DIR being the SGLang {tree.version} you serve"
    return f"sglang-eagle3 patch apply --sglang {shlex.quote(str(tree.root))}"


def verify(series: PatchSeries, tree: SGLangTree) -> list[PatchStatus]:
    """The state of every patch in the series, checked against the tree as it is."""
    check_version(series, tree)
    missing, created = [], set()  # a file an earlier patch of the series creates need not be there yet
    for patch in series.patches:
        missing += [
            (patch, rel) for rel in patch.changed_files if rel not in created and not (tree.root / rel).is_file()
        ]
        created.update(patch.created_files)
    if missing:  # GNU patch would only say "can't find file to patch" after the patch's whole header
        patch, rel = missing[0]
        more = f" (and {len(missing) - 1} more file(s) the series changes)" if len(missing) > 1 else ""
        raise TreeIncomplete(
            f"{tree.root} lacks {rel}, which {patch.name} changes{more}: not a whole SGLang {series.sglang_version} "
            f"install. Reinstall it (pip install --force-reinstall --no-deps sglang=={series.sglang_version}) or "
            "point --sglang at the directory that holds the whole sglang/ package"
        )
    return [status(patch, tree) for patch in series.patches]


@dataclass(frozen=True)
class ApplyResult:
    applied: list[Patch]  # newly applied by this call
    already: list[Patch]  # were applied before


def apply(series: PatchSeries, tree: SGLangTree) -> ApplyResult:
    """Apply every patch not yet applied, all or nothing: in series order to a staging copy of the files they touch,
    and only when every one applies are the originals replaced; on a conflict PatchError, the tree as it was."""
    statuses = verify(series, tree)
    conflicts = [s for s in statuses if s.state is PatchState.CONFLICT]
    if conflicts:
        raise PatchError(
            "not applying anything, the tree was left unchanged: "
            + "; ".join(f"{s.patch.name} conflicts with {tree.root}:\n{s.detail}" for s in conflicts)
        )
    pending = [s.patch for s in statuses if s.state is PatchState.NOT_APPLIED]
    already = [s.patch for s in statuses if s.state is PatchState.APPLIED]
    if not pending:
        return ApplyResult([], already)

    touched = sorted({f for p in pending for f in p.files})
    check_writable(tree, touched)
    remove_stale_staging(tree)
    with _signals_deferred() as received:
        # Stage inside the tree's root so the final os.replace never crosses filesystems.
        # The name carries our pid, so a later run can tell a killed run's leftovers.
        staging = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{os.getpid()}-", dir=tree.root))
        try:
            for rel in touched:
                source = tree.root / rel
                if source.exists():
                    (staging / rel).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(source, staging / rel)
            for patch in pending:
                result = _run_patch(patch, staging)
                if received:
                    raise ApplyInterrupted(received[0])
                if result.returncode != 0:
                    raise PatchError(
                        f"not applying anything, the tree was left unchanged: {patch.name} "
                        f"failed after the patches before it:\n{(result.stdout + result.stderr).strip()}"
                    )
            if received:
                raise ApplyInterrupted(received[0])
            # From here on a signal waits until every file is in place: all or nothing.
            for rel in touched:
                target = tree.root / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(staging / rel, target)
            settle()  # done: a signal from now on (the report is left) does not change the outcome
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return ApplyResult(pending, already)


STAGING_PREFIX = ".sglang-eagle3-staging-"


def check_writable(tree: SGLangTree, touched: list[str]) -> None:
    """Every directory apply writes to (the root for staging, each patched file's) must be writable."""
    for directory in sorted({tree.root, *((tree.root / rel).parent for rel in touched)}):
        existing = next(d for d in (directory, *directory.parents) if d.exists())
        if not os.access(existing, os.W_OK | os.X_OK):
            raise TreeNotWritable(
                f"cannot write to {existing} (user {os.getuid()}); nothing was changed. Run as the owner "
                f"of that SGLang install (e.g. with sudo), or patch a writable copy with --sglang DIR"
            )


def remove_stale_staging(tree: SGLangTree) -> None:
    """Staging directories of runs that were killed (their pid is gone) are removed."""
    for leftover in tree.root.glob(f"{STAGING_PREFIX}*"):
        pid = leftover.name.removeprefix(STAGING_PREFIX).split("-", 1)[0]
        if not pid.isdigit() or not _pid_alive(int(pid)):
            shutil.rmtree(leftover, ignore_errors=True)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return pid != 0


@contextlib.contextmanager
def _signals_deferred():
    """SIGINT/SIGTERM are noted, not acted on, inside the block: the caller checks and cleans up."""
    received: list[int] = []
    try:
        previous = {s: signal.signal(s, lambda signum, _frame: received.append(signum))
                    for s in (signal.SIGINT, signal.SIGTERM)}  # fmt: skip
    except ValueError:  # not the main thread: signals stay as they are
        previous = {}
    try:
        yield received
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
