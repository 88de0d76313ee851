"""Everything that talks to the Hugging Face Hub, through huggingface_hub (the hub's own client: endpoints, the CDN,
Xet storage, retries, resuming). It is given the token explicitly (`token=False` when there is none), so it never
falls back to `HF_TOKEN` or a token stored in the home directory; its errors become ModelsErrors that say what to do.
Both majors are supported: 0.x (SGLang 0.5.9's stack) raises requests' exceptions, 1.x (0.5.23's) httpx's, and does
not resume a file across runs (`resumes_partial_files`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import os
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pydantic import ValidationError

from .. import redaction
from ..errors import shown
from ..exit_status import ExitStatus
from ..serving import credentials
from . import ModelsError, hashing
from .lockfile import ModelLock, describe

TOKEN_CREDENTIAL = credentials.HUB_TOKEN_CREDENTIAL  # systemd: LoadCredential=hf-token:/path
TOKEN_ENV_VARS = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
# Failures after which no other file of the model can succeed either.
FATAL = {"gated", "repo_not_found", "revision_not_found", "offline", "disk_full", "token", "network"}


def read_token(token_file: Path | None, environ: dict[str, str] | None = None) -> str | None:
    """The token from --token-file, else systemd's credential hf-token, else None. Never from argv or the environment:
    both are visible to other processes (ps, /proc/PID/environ) and inherited by children."""
    environ = os.environ if environ is None else environ
    path = token_file if token_file is not None else credentials.credential(TOKEN_CREDENTIAL, environ)
    if path is None:
        return None
    if problem := credentials.key_file_problem(path, "--token-file"):
        raise ModelsError("token", problem, ExitStatus.BAD_INPUT)
    if Path(path).exists() and not Path(path).is_file():  # a FIFO or a device would block or never end
        raise ModelsError("token", f"the token file {path} is not a regular file", ExitStatus.BAD_INPUT)
    try:
        token = Path(path).read_text().strip()
    except (OSError, UnicodeDecodeError) as err:
        reason = err.strerror if isinstance(err, OSError) else "not text"
        raise ModelsError("token", f"cannot read the token file {path}: {reason}", ExitStatus.BAD_INPUT) from None
    if not token:
        raise ModelsError(
            "token", f"the token file {path} is empty; put the Hugging Face token in it", ExitStatus.BAD_INPUT
        )
    if not token.isprintable() or any(c.isspace() for c in token):
        raise ModelsError(
            "token", f"the token file {path} must hold one token on one line, nothing else", ExitStatus.BAD_INPUT
        )
    redaction.remember(token)
    return token


def check_client() -> None:
    """huggingface_hub reads its HF_* variables as it is imported; one it cannot read (HF_HUB_ETAG_TIMEOUT=abc)
    is bad input, said once, before anything is asked of the hub."""
    try:
        import huggingface_hub.constants  # noqa: F401 - its module-level reads are the check
    except ValueError as err:
        raise ModelsError(
            "bad_input", f"huggingface_hub cannot read its environment ({shown(str(err))}): check the HF_* variables "
            "(HF_HUB_ETAG_TIMEOUT and HF_HUB_DOWNLOAD_TIMEOUT take whole seconds)", ExitStatus.BAD_INPUT,
        ) from None  # fmt: skip


def ignored_token_variables(environ: dict[str, str] | None = None) -> list[str]:
    environ = os.environ if environ is None else environ
    return [name for name in TOKEN_ENV_VARS if environ.get(name)]


def redact(text: str, token: str | None) -> str:
    """Defence in depth: no message leaves this package with the token, or any other secret, in it (before a
    message is cut short, so no part of one is left)."""
    return redaction.hide(text.replace(token, redaction.HIDDEN) if token else text)


def endpoint() -> str:
    """The hub's address (HF_ENDPOINT picks a mirror), as messages name it: a password in it hidden."""
    from huggingface_hub import constants

    return redaction.shown_url(constants.ENDPOINT)


def _quiet_client() -> None:
    # Our own progress replaces huggingface_hub's per-file tqdm bars.
    import logging

    from huggingface_hub.utils import disable_progress_bars

    disable_progress_bars()
    # HF_DEBUG=1 turns the client's log to DEBUG (its requests as curl commands): those lines stay, one each, but a
    # record carrying an exception prints it as its one line, not as a traceback; what failed is this tool's message.
    for handler in logging.getLogger("huggingface_hub").handlers:
        if not any(isinstance(f, _OneLine) for f in handler.filters):
            handler.addFilter(_OneLine())
        if isinstance(handler, logging.StreamHandler) and handler.stream is not sys.stderr:
            # this command's stderr (its secrets hidden), not the one of whoever imported the client first; not
            # setStream, which flushes the one it replaces, perhaps closed (an earlier command's, in this process)
            with handler.lock:
                handler.stream = sys.stderr


class _OneLine:
    """A logging filter: an exception attached to a record becomes ``: Type: message`` on the record's line, and
    what looks secret in the line is hidden (redaction.py)."""

    def filter(self, record) -> bool:
        if record.exc_info and record.exc_info[1] is not None:
            err = record.exc_info[1]
            record.msg, record.args = f"{record.getMessage()}: {type(err).__name__}: {err}", None
        record.msg, record.args = redaction.hide(record.getMessage()), None
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        return True


def gated(repo: str, token: str | None) -> ModelsError:
    where = endpoint()
    if token is None:
        message = (f"{repo} is gated: accept its conditions at {where}/{repo} and give a token of that account "
                   f"with --token-file FILE (under systemd: the credential {TOKEN_CREDENTIAL})")  # fmt: skip
    else:
        message = (f"the token has no access to the gated {repo}: accept its conditions at {where}/{repo} "
                   "with the token's account, or use a token of an account that did")  # fmt: skip
    return ModelsError("gated", message, ExitStatus.BAD_INPUT)


def resumes_partial_files() -> bool:
    """Whether a later run resumes a file that an earlier one left half-downloaded in local_dir: 0.x does, from
    `<etag>.incomplete` with a Range request; 1.x downloads to a process-unique `<etag>.<random>.incomplete` and deletes
    it on failure (huggingface/huggingface_hub#4228), so only within the run. The one version check here."""
    from huggingface_hub import __version__

    return int(__version__.split(".")[0]) < 1


def run_again() -> str:
    """What a fetch cut short tells the user: true for the installed client."""
    if resumes_partial_files():
        return "what arrived is kept: run the same command again to resume"
    return ("run the same command again: files already complete are kept, a file cut short starts again "
            "(huggingface_hub 1.x does not resume a file across runs)")  # fmt: skip


def _transfer_errors() -> tuple[tuple[type, ...], tuple[type, ...]]:
    """(raised before a connection was made, raised when a transfer broke off): httpx's classes
    (huggingface_hub 1.x) and requests' (0.x), of whichever is installed."""
    before, during = [], []
    with contextlib.suppress(ImportError):
        import httpx  # TransportError less ProxyError and UnsupportedProtocol: set-up problems, not the network

        before += [httpx.ConnectError, httpx.ConnectTimeout]
        during += [httpx.NetworkError, httpx.TimeoutException, httpx.RemoteProtocolError]
    with contextlib.suppress(ImportError):
        import requests

        before += [requests.ConnectTimeout]
        during += [requests.ConnectionError, requests.Timeout, requests.exceptions.ChunkedEncodingError]
    return tuple(before), tuple(during)


def _urllib3_reason(err: BaseException) -> BaseException | None:
    """requests wraps urllib3's error (the reason) in a retry error: "...: [Errno 111] Connection refused"."""
    with contextlib.suppress(ImportError):
        import requests

        if isinstance(err, requests.ConnectionError) and err.args:
            return getattr(err.args[0], "reason", None)
    return None


def _not_connected(err: BaseException) -> bool:
    """An error raised before any connection was made (refused, no route, no DNS, connect timeout)."""
    if isinstance(err, _transfer_errors()[0]):
        return True
    with contextlib.suppress(ImportError):
        from urllib3.exceptions import ConnectTimeoutError  # NewConnectionError and NameResolutionError too

        return isinstance(_urllib3_reason(err), ConnectTimeoutError)
    return False


def unreachable(err: BaseException, token: str | None) -> ModelsError:
    """The hub (or its CDN) did not answer at all: no other file can succeed either, so the fetch stops."""
    reason = _urllib3_reason(err) or err
    return ModelsError(
        "network",
        f"cannot reach the hub at {endpoint()}: {redact(str(reason), token)[:300]}. Check the network and the "
        "hub's address (HF_ENDPOINT, if set), then run the same command again",
    )


def translate(
    err: BaseException, *, repo: str, revision: str, path: str | None = None, token: str | None = None
) -> ModelsError:
    """A huggingface_hub / httpx / requests / OS error as a ModelsError that says what to do."""
    from huggingface_hub import errors as hf

    if isinstance(err, ModelsError):
        return err
    if isinstance(err, hf.LocalEntryNotFoundError):  # before EntryNotFoundError: it is a subclass
        # hf_hub_download's request for the file's metadata got no answer: its error is the cause.
        cause = err.__cause__ or err.__context__
        if isinstance(cause, (hf.OfflineModeIsEnabled, hf.HfHubHTTPError)):
            return translate(cause, repo=repo, revision=revision, path=path, token=token)
        return unreachable(cause or err, token)
    if isinstance(err, (hf.HfHubHTTPError, hf.EntryNotFoundError, hf.OfflineModeIsEnabled)):
        return _hub_answer(err, repo, revision, path, token)
    what = f"{path} of {repo}" if path else repo
    if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
        return ModelsError(
            "disk_full", f"disk full while writing {err.filename or what}: free space (or move --dir); {run_again()}"
        )
    if _not_connected(err):  # before the interrupted downloads: nothing was downloading
        return unreachable(err, token)
    if closed_under(err):  # every try: another download kept finding the hub gone (or the client closed)
        return ModelsError(
            "interrupted",
            f"download of {what} was cut off: the hub client closed its connections "
            f"{CLOSED_CLIENT_TRIES} times while another download could not connect; {run_again()}",
        )
    if isinstance(err, _transfer_errors()[1]):
        return ModelsError(
            "interrupted",
            f"download of {what} was interrupted ({type(err).__name__}: {redact(str(err), token)[:300]}); "
            f"{run_again()}",
        )
    if isinstance(err, OSError):
        if "Consistency check failed" in str(err):  # huggingface_hub: received size != announced size
            return ModelsError("interrupted", f"download of {what} ended early; {run_again()}")
        target = f" {err.filename}" if err.filename else ""
        return ModelsError("io_error", f"cannot write{target}: {err.strerror or err}")
    return ModelsError("hub_error", f"{type(err).__name__} while fetching {what}: {redact(str(err), token)[:300]}")


def _hub_answer(err: BaseException, repo: str, revision: str, path: str | None, token: str | None) -> ModelsError:
    """What the hub's answer (or the client's offline mode) means: an HTTP error, a file the commit lacks."""
    from huggingface_hub import errors as hf

    where = endpoint()
    if isinstance(err, hf.GatedRepoError):  # before RepositoryNotFoundError: it is a subclass
        return gated(repo, token)
    if isinstance(err, hf.RevisionNotFoundError):
        return ModelsError(
            "revision_not_found",
            f"{repo} has no revision {shown(revision)} on {where}: check the branch, tag or commit. A locked "
            "commit that is gone means the repository's history was rewritten: lock it again and review the change",
            ExitStatus.BAD_INPUT,
        )
    if isinstance(err, hf.RepositoryNotFoundError):
        access = "the token has no access to it" if token else "no token was given (--token-file FILE)"
        return ModelsError(
            "repo_not_found",
            f"repository {repo} not found on {where}: check the name; if it is private, {access}",
            ExitStatus.BAD_INPUT,
        )
    if isinstance(err, hf.EntryNotFoundError):
        return ModelsError("file_not_found", f"{repo} has no file {path} at {revision}; lock it again")
    if isinstance(err, hf.OfflineModeIsEnabled):
        return ModelsError(
            "offline", "HF_HUB_OFFLINE is set in the environment: unset it to reach the hub", ExitStatus.BAD_INPUT
        )
    status = err.response.status_code if err.response is not None else "?"
    detail = err.server_message or str(err).splitlines()[0]
    what = f"{path} of {repo}" if path else repo
    return ModelsError("hub_error", f"{where} answered HTTP {status} for {what}: {redact(detail, token)[:300]}")


def parse_spec(spec: str) -> tuple[str, str]:
    """'owner/name@rev' -> ('owner/name', 'rev'); no '@' means main."""
    repo, _, revision = spec.partition("@")
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    from .lockfile import REPO_ID

    try:  # the hub client's own rule (a name of at most 96 characters, no '--' or '..'), before anything is asked
        valid = REPO_ID.fullmatch(repo) is not None and validate_repo_id(repo) is None
    except HFValidationError:
        valid = False
    if not valid:
        raise ModelsError(
            "bad_input",
            f"{shown(spec)}: expected REPO[@REVISION], REPO a Hugging Face repository id (owner/name: letters, digits, "
            "-, _ and ., the name at most 96 characters), e.g. AQ-MedAI/Kimi-K25-eagle3@main",
            ExitStatus.BAD_INPUT,
        )
    if spec.endswith("@"):
        raise ModelsError("bad_input", f"{shown(spec)}: the revision after '@' is empty", ExitStatus.BAD_INPUT)
    return repo, revision or "main"


def resolve(repo: str, revision: str, token: str | None, workdir: Path, jobs: int = 8) -> ModelLock:
    """Resolve a revision to its commit and describe every file there: a lock. The hub gives only the git blob id of
    a file stored in git, so those (small) files are downloaded, checked against it, and their sha256 recorded."""
    from huggingface_hub import HfApi

    _quiet_client()
    try:
        info = HfApi().model_info(repo, revision=revision, files_metadata=True, token=token or False)
    except Exception as err:
        raise translate(err, repo=repo, revision=revision, token=token) from None
    commit = _check_answer(info, repo, revision, token)

    def small_file(sibling) -> dict:
        try:
            local = Path(download_file(repo, commit, sibling.rfilename, workdir, token))
        except Exception as err:
            raise translate(err, repo=repo, revision=commit, path=sibling.rfilename, token=token) from None
        sha256, blob_id = hashing.sha256_and_git_blob_id(local)
        size = local.stat().st_size
        if blob_id != sibling.blob_id or size != sibling.size:
            raise ModelsError(
                "mismatch",
                f"{sibling.rfilename} of {repo}@{commit}: downloaded {size} bytes with git blob id {blob_id}, "
                f"the hub lists {sibling.size} bytes and {sibling.blob_id}; try again",
            )
        return dict(path=sibling.rfilename, size=size, sha256=sha256, git_blob_id=blob_id, lfs=False)

    with ThreadPoolExecutor(max(1, jobs)) as pool:
        files = list(pool.map(small_file, [s for s in info.siblings if s.lfs is None]))
    files += [dict(path=s.rfilename, size=s.lfs.size, sha256=s.lfs.sha256, git_blob_id=s.blob_id, lfs=True)
              for s in info.siblings if s.lfs is not None]  # fmt: skip
    try:
        return ModelLock(
            repo=repo, revision=revision, commit=commit, gated=bool(info.gated), private=bool(info.private),
            locked_at=dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z"),
            total_size=sum(f["size"] for f in files), files=sorted(files, key=lambda f: f["path"]),
        )  # fmt: skip
    except ValidationError as err:  # e.g. a file name that would escape the model directory
        raise ModelsError("hub_error", f"{repo}@{commit} cannot be locked: {describe(err)}") from None


def _check_answer(info, repo: str, revision: str, token: str | None) -> str:
    """The commit of the hub's model_info, checked: the one asked for (if one was), sizes and blob ids, access."""
    commit = info.sha
    if not commit or not re.fullmatch(r"[0-9a-f]{40}", commit) or info.siblings is None:
        raise ModelsError("hub_error", f"{endpoint()} returned no commit or file list for {repo}@{revision}")
    if re.fullmatch(r"[0-9a-f]{40}", revision) and commit != revision:
        raise ModelsError("hub_error", f"{endpoint()} resolved commit {revision} of {repo} to {commit}")
    if (info.gated or info.private) and token is None:
        raise gated(repo, token)
    for s in info.siblings:
        if s.size is None or s.blob_id is None:
            raise ModelsError("hub_error", f"{endpoint()} gave no size or blob id for {s.rfilename} of {repo}")
    return commit


def _client_dir(local_dir: Path) -> Path:
    """Where huggingface_hub keeps a local_dir download's `.incomplete` and `.metadata` files."""
    return local_dir / ".cache" / "huggingface" / "download"


def download_file(repo: str, commit: str, path: str, local_dir: Path, token: str | None) -> str:
    """One file at the commit into local_dir, resuming from huggingface_hub's `.incomplete` file there; tried again
    when the client's shared connection was closed under it (closed_under)."""
    from huggingface_hub import hf_hub_download

    _quiet_client()
    for attempt in range(1, CLOSED_CLIENT_TRIES + 1):
        _drop_torn_metadata(_client_dir(local_dir) / f"{path}.metadata")
        try:
            return hf_hub_download(repo, path, revision=commit, local_dir=local_dir, token=token or False)
        except (AttributeError, RuntimeError) as err:
            if not closed_under(err) or attempt == CLOSED_CLIENT_TRIES:
                raise
    raise AssertionError("unreachable")  # the last try returned or raised


CLOSED_CLIENT_TRIES = 3


def closed_under(err: BaseException) -> bool:
    """huggingface_hub 1.x shares one httpx client between the download threads and closes it when any request
    cannot connect (utils/_http.py, _http_backoff_base: close_session() on httpx.ConnectError). A request another
    thread makes meanwhile gets no client (AttributeError on None) or the closed one (httpx's RuntimeError). That
    says nothing of its own file: the next try gets a new client, and a hub that is really gone is then
    unreachable() for that file too, which stops the fetch."""
    if isinstance(err, AttributeError):
        return err.obj is None and err.name in ("request", "stream")
    return isinstance(err, RuntimeError) and "client has been closed" in str(err)


def _drop_torn_metadata(metadata: Path) -> None:
    """Remove a metadata file (commit, etag and timestamp, a line each) that a killed fetch left half-written:
    huggingface_hub 0.36 fails on one with UnboundLocalError (huggingface/huggingface_hub#3609; fixed only in 1.x,
    which SGLang 0.5.9's transformers does not allow). Without it the client re-checks or downloads the file again."""
    try:
        commit, etag, timestamp = metadata.read_text().splitlines()[:3]
        float(timestamp)
        if commit and etag:
            return
    except FileNotFoundError:
        return
    except (OSError, ValueError, UnicodeDecodeError):  # ValueError: fewer than 3 lines too
        pass
    metadata.unlink(missing_ok=True)


def resumable_bytes(local_dir: Path) -> int:
    """Bytes of local_dir's partial download that the client will resume; with huggingface_hub 1.x
    none, and what a killed run left there (never reused, never deleted by the client) is removed."""
    if resumes_partial_files():
        return partial_bytes(local_dir)
    for root, _, files in os.walk(_client_dir(local_dir)):
        for name in files:
            if name.endswith(".incomplete"):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(root, name))
    return 0


def partial_bytes(local_dir: Path) -> int:
    """Bytes huggingface_hub has written so far under local_dir (its `.incomplete` files), for progress only; runs
    while downloads finish and their directories are removed: os.walk skips what vanished."""
    total = 0
    for root, _, files in os.walk(_client_dir(local_dir)):
        for name in files:
            if name.endswith(".incomplete"):
                with contextlib.suppress(OSError):
                    total += os.stat(os.path.join(root, name)).st_size
    return total
