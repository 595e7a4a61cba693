"""Hugging Face model ids: find a model's config files as vLLM and SGLang find them.

Owns :func:`is_hub_id`, :func:`looks_like_path` and :func:`fetch_config_files`. An id
``org/name`` resolves first in the local Hugging Face cache (``HF_HUB_CACHE``, else
``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``; layout
``models--org--name/refs/<revision>`` holding a commit hash and
``snapshots/<commit>/config.json``), then, unless ``HF_HUB_OFFLINE`` is set, by a download
from the Hub (``HF_ENDPOINT``, token from ``HF_TOKEN``) into that same cache, laid out as
``huggingface_hub.hf_hub_download`` - the call the engines make (vLLM
``vllm/transformers_utils/config.py`` ``get_config`` at v0.11; SGLang
``python/sglang/srt/utils/hf_transformers_utils.py`` at v0.5) - lays it out, with one GET
per file where ``hf_hub_download`` makes a HEAD and a GET.

Only config files are fetched, never weights: ``config.json`` and the quantization files vLLM
reads beside it, ``hf_quant_config.json`` (NVIDIA ModelOpt up to 0.29: vLLM's ``get_config``
uses it as ``quantization_config`` when config.json has none) and ``quant_config.json``
(AutoAWQ: read by ``AWQConfig.get_config_filenames`` when ``--quantization awq`` is given).
A missing quantization file is normal, never an error.

``huggingface_hub`` (and the HTTP client under it) is imported inside the functions that need
it, so planning from a preset or a local file loads no HTTP code and stays fast. The token is
registered with :mod:`kvscope.redact` and never put into a message.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvscope.errors import KvscopeError
from kvscope.redact import redact_url, register_secret

CONFIG_FILE = "config.json"
#: Quantization configs vLLM reads beside config.json (see the module docstring).
QUANT_FILES = ("hf_quant_config.json", "quant_config.json")

# The Hub's repo-name rule (huggingface_hub ``validate_repo_id``): letters, digits, "-", "_",
# "."; no "--" or ".." inside, at most 96 characters per part.
_PART = r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9_-])?"
_HUB_ID = re.compile(rf"{_PART}/{_PART}")


def looks_like_path(name: str) -> bool:
    """True for what a user types as a file path: ``/``, ``./``, ``../``, ``~``, ``*.json``."""
    s = name.strip()
    return s.startswith(("/", "./", "../", "~", ".\\", "..\\")) or s.lower().endswith(".json")


def is_hub_id(name: str) -> bool:
    """True when ``name`` has the shape of a Hugging Face model id (``org/name``)."""
    s = name.strip()
    return (
        not looks_like_path(s)
        and _HUB_ID.fullmatch(s) is not None
        and ".." not in s
        and "--" not in s
    )


@dataclass(frozen=True)
class HubFiles:
    """A model's config files on local disk, resolved from a Hub id at one revision."""

    repo_id: str
    revision: str
    config: Path
    #: The quantization files present, as (file name, path), in :data:`QUANT_FILES` order.
    quant_files: tuple[tuple[str, Path], ...]
    #: True when everything came from the local cache (no HTTP request was made).
    from_cache: bool


def cache_dir() -> str:
    """The Hugging Face hub cache folder, read from the environment now, by huggingface_hub's
    rule (constants.py): ``HF_HUB_CACHE``, else ``HUGGINGFACE_HUB_CACHE``, else
    ``HF_HOME``/hub, else ``$XDG_CACHE_HOME/huggingface/hub``, else ``~/.cache/huggingface/hub``.
    """
    env = os.environ
    home = env.get("HF_HOME") or os.path.join(
        env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "huggingface",
    )
    home = os.path.expandvars(os.path.expanduser(home))
    hub = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE") or os.path.join(home, "hub")
    return os.path.expandvars(os.path.expanduser(hub))


def offline() -> bool:
    """True when ``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``) is 1 / true / yes / on."""
    flag = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return flag.strip().upper() in ("1", "ON", "YES", "TRUE")


def _register_token(stored: bool = False) -> None:
    """Mask the Hub token in anything kvscope prints; ``stored`` also reads the token file."""
    register_secret(os.environ.get("HF_TOKEN"))
    register_secret(os.environ.get("HUGGING_FACE_HUB_TOKEN"))
    if stored:
        try:
            from huggingface_hub import get_token

            register_secret(get_token())
        except Exception:  # a broken token file is huggingface_hub's to report, not ours
            pass


def _cached(repo_id: str, filename: str, revision: str) -> Path | bool | None:
    """The cached path of ``filename``, False when the cache records it as absent, else None.

    The lookup of ``huggingface_hub.try_to_load_from_cache`` (file_download.py, v1.x/2.x),
    done here so the cached path imports no huggingface_hub (its download module alone takes
    ~160 ms to import): ``refs/<revision>`` names the commit (a commit hash is
    its own ref), ``.no_exist/<commit>/<file>`` records a file the Hub said is absent.
    """
    repo = Path(cache_dir()) / ("models--" + repo_id.replace("/", "--"))
    try:
        ref = repo / "refs" / revision
        commit = ref.read_text().strip() if ref.is_file() else revision
        if "/" in commit or commit in ("", ".", ".."):
            return None
        if (repo / ".no_exist" / commit / filename).is_file():
            return False
        path = repo / "snapshots" / commit / filename
        return path if path.is_file() else None
    except (OSError, ValueError, UnicodeDecodeError):
        return None


def fetch_config_files(
    repo_id: str, revision: str | None = None, not_found_hint: str | None = None
) -> HubFiles:
    """The config files of Hub model ``repo_id`` at ``revision`` (default ``main``).

    Reads the local cache first; downloads (config files only) when they are not cached and
    the Hub may be reached. Every failure is a one-line :class:`KvscopeError` saying what
    to do; ``not_found_hint`` is appended when the Hub has no such model.
    """
    rev = revision or "main"
    _register_token()
    cached = _cached(repo_id, CONFIG_FILE, rev)
    if isinstance(cached, Path):
        extras = []
        for name in QUANT_FILES:
            path = _cached(repo_id, name, rev)
            if isinstance(path, Path):
                extras.append((name, path))
        return HubFiles(repo_id, rev, cached, tuple(extras), from_cache=True)

    if offline():
        raise _not_cached(repo_id, "HF_HUB_OFFLINE is set")
    _register_token(stored=True)
    config = _download(repo_id, CONFIG_FILE, rev, not_found_hint)
    if config is None:
        raise KvscopeError(
            f"{repo_id} has no config.json at revision {rev} on the Hub.",
            "It is not a transformers checkpoint (GGUF or weights only?): pass a config.json.",
        )
    extras = []
    for name in QUANT_FILES:
        path = _download(repo_id, name, rev, not_found_hint)
        if path is not None:
            extras.append((name, path))
    return HubFiles(repo_id, rev, config, tuple(extras), from_cache=False)


def _not_cached(repo_id: str, why: str) -> KvscopeError:
    return KvscopeError(
        f"{repo_id}: config.json is not in the Hugging Face cache at {cache_dir()} and {why}.",
        f"Run `huggingface-cli download {repo_id} config.json` where there is network, "
        "or pass a config.json.",
    )


def _download(repo_id: str, filename: str, rev: str, not_found_hint: str | None) -> Path | None:
    """``filename`` downloaded into the cache, or None when the Hub says it does not exist.

    One GET per file (:func:`_get_into_cache`), where ``hf_hub_download`` makes a HEAD for
    the metadata and then a GET. huggingface_hub retries a timed-out request with a 60 s
    timeout, several times; a hung Hub would hold ``kvscope plan`` for minutes. The call runs
    on a daemon thread instead, given ``HF_HUB_ETAG_TIMEOUT + HF_HUB_DOWNLOAD_TIMEOUT``
    seconds (10 + 10 by default) per file.
    """
    from huggingface_hub import constants
    from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError

    # Its retry warnings would break the one-line error contract on stderr.
    logging.getLogger("huggingface_hub").setLevel(logging.CRITICAL)
    box: list[Path | BaseException | None] = []
    where = cache_dir()
    limit = float(constants.HF_HUB_ETAG_TIMEOUT + constants.HF_HUB_DOWNLOAD_TIMEOUT)

    def fetch() -> None:
        try:
            box.append(_get_into_cache(repo_id, filename, rev, where, limit))
        except BaseException as err:  # handed to the waiting thread below
            box.append(err)

    worker = threading.Thread(target=fetch, name="kvscope-hub", daemon=True)
    worker.start()
    worker.join(limit)
    if not box:
        raise _not_cached(
            repo_id,
            f"the Hub ({_endpoint()}) gave no {filename} within {limit:g} s (unreachable or "
            "too slow; the limit is HF_HUB_ETAG_TIMEOUT + HF_HUB_DOWNLOAD_TIMEOUT)",
        )
    got = box[0]
    if got is None or isinstance(got, Path):
        return got
    # The Hub's 404 for a file is RemoteEntryNotFoundError (EntryNotFoundError before 1.0);
    # LocalEntryNotFoundError, also an EntryNotFoundError, means "could not reach it".
    if isinstance(got, EntryNotFoundError) and not isinstance(got, LocalEntryNotFoundError):
        return None
    if not isinstance(got, Exception):
        raise got
    raise _hub_error(got, repo_id, rev, not_found_hint) from None


def _get_into_cache(
    repo_id: str, filename: str, rev: str, where: str, timeout: float
) -> Path | None:
    """One GET of ``filename`` stored the way ``hf_hub_download`` stores it; None on a 404.

    The Hub answers ``/resolve/`` with the file and the headers ``hf_hub_download`` reads
    from its HEAD request (``X-Repo-Commit``, ``ETag``), so the GET alone fills the cache:
    ``blobs/<etag>``, ``snapshots/<commit>/<file>`` linked to it, ``refs/<revision>`` naming
    the commit; a file the Hub does not have is recorded as ``.no_exist/<commit>/<file>``,
    which later lookups read as "absent" without asking again. The layout is written through
    huggingface_hub's own helpers (``repo_folder_name``, ``_create_symlink``,
    ``_chmod_and_move``, ``_cache_commit_hash_for_specific_revision`` in
    ``huggingface_hub/file_download.py``, unchanged from 0.24 to 2.x); authentication,
    endpoint and user agent come from its ``build_hf_headers`` and ``get_session``.
    """
    import tempfile

    from huggingface_hub import constants, file_download, hf_hub_url
    from huggingface_hub.errors import EntryNotFoundError

    # Public in huggingface_hub.utils since 0.11, re-exported without __all__ (mypy's view).
    from huggingface_hub.utils import (  # type: ignore[attr-defined]
        build_hf_headers,
        get_session,
        hf_raise_for_status,
    )

    url = hf_hub_url(repo_id, filename, revision=rev, endpoint=constants.ENDPOINT)
    session: Any = get_session()
    # requests (huggingface_hub < 1.0) and httpx (>= 1.0) spell "follow redirects" apart.
    follow = {"allow_redirects": True} if hasattr(session, "mount") else {"follow_redirects": True}
    response = session.get(url, headers=build_hf_headers(), timeout=timeout, **follow)
    storage = Path(where) / file_download.repo_folder_name(repo_id=repo_id, repo_type="model")
    commit = response.headers.get(constants.HUGGINGFACE_HEADER_X_REPO_COMMIT)
    try:
        hf_raise_for_status(response)
    except EntryNotFoundError:
        if commit:
            absent = storage / ".no_exist" / commit / filename
            absent.parent.mkdir(parents=True, exist_ok=True)
            absent.touch()
            _record_ref(file_download, storage, rev, commit)
        raise
    etag = file_download._normalize_etag(
        response.headers.get(constants.HUGGINGFACE_HEADER_X_LINKED_ETAG)
        or response.headers.get("ETag")
    )
    if not commit or not etag:
        raise OSError(f"the Hub's answer for {filename} lacks X-Repo-Commit or ETag")
    blob = storage / "blobs" / etag
    pointer = storage / "snapshots" / commit / filename
    blob.parent.mkdir(parents=True, exist_ok=True)
    pointer.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=blob.parent, delete=False) as tmp:
        tmp.write(response.content)
    file_download._chmod_and_move(Path(tmp.name), blob)
    file_download._create_symlink(str(blob), str(pointer), new_blob=True)
    _record_ref(file_download, storage, rev, commit)
    return Path(pointer)


def _record_ref(file_download: Any, storage: Path, rev: str, commit: str) -> None:
    """``refs/<rev>`` names ``commit`` (a commit hash is its own ref and gets none)."""
    if rev != commit:
        file_download._cache_commit_hash_for_specific_revision(str(storage), rev, commit)


def _endpoint() -> str:
    """The Hub address huggingface_hub uses (HF_ENDPOINT), without any credentials in it."""
    from huggingface_hub import constants

    return redact_url(str(constants.ENDPOINT))


def _chain(err: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    cur: BaseException | None = err
    while cur is not None and cur not in out:
        out.append(cur)
        cur = cur.__cause__ or cur.__context__
    return out


def _status(err: BaseException) -> int | None:
    response: Any = getattr(err, "response", None)
    code = getattr(response, "status_code", None)
    return code if isinstance(code, int) else None


def _hub_error(err: Exception, repo_id: str, rev: str, not_found_hint: str | None) -> KvscopeError:
    """One line for a huggingface_hub failure; the exception's own text is never shown."""
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    token_hint = (
        "Set HF_TOKEN to a token of an account that was granted access on huggingface.co "
        "(or run `huggingface-cli login`), or pass a config.json."
    )
    has_token = bool(os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN"))
    if isinstance(err, GatedRepoError):
        what = "the token in HF_TOKEN has no access" if has_token else "it needs a token"
        return KvscopeError(f"{repo_id} is a gated model: {what}.", token_hint)
    if isinstance(err, RevisionNotFoundError):
        return KvscopeError(
            f"{repo_id} has no revision '{rev}' on the Hub.",
            "Pass --revision as a branch, tag or commit hash that exists (default: main).",
        )
    if isinstance(err, RepositoryNotFoundError):
        if _status(err) in (401, 403) and not has_token:
            return KvscopeError(
                f"no such model on the Hub, or a private one: {repo_id}.",
                "Check the spelling; if it is private it needs a token: " + token_hint,
            )
        return KvscopeError(
            f"no such model on the Hub: {repo_id}.",
            "Check the spelling" + (f"; {not_found_hint}" if not_found_hint else "."),
        )
    if isinstance(err, OfflineModeIsEnabled):
        return _not_cached(repo_id, "HF_HUB_OFFLINE is set")
    if isinstance(err, HfHubHTTPError) and _status(err) in (401, 403):
        return KvscopeError(f"{repo_id}: the Hub refused access (HTTP {_status(err)}).", token_hint)
    chain = _chain(err)
    if any("Timeout" in type(e).__name__ for e in chain):
        return _not_cached(
            repo_id, f"the Hub ({_endpoint()}) did not answer in time (HF_HUB_ETAG_TIMEOUT)"
        )
    for e in chain:
        code = _status(e)
        if code is not None:
            return KvscopeError(
                f"{repo_id}: the Hub ({_endpoint()}) answered HTTP {code}.",
                "Retry later, or pass a config.json.",
            )
    # The HTTP client's own transport errors (httpx ConnectError / NetworkError, requests
    # ConnectionError), which the single GET meets unwrapped.
    unreachable = ("ConnectError", "ConnectionError", "NetworkError", "ProtocolError")
    if isinstance(err, LocalEntryNotFoundError | OSError) or any(
        type(e).__name__.endswith(unreachable) for e in chain
    ):
        return _not_cached(repo_id, f"the Hub ({_endpoint()}) cannot be reached")
    if isinstance(err, ValueError):  # HFValidationError: not a valid repo id after all
        return KvscopeError(f"'{repo_id}' is not a valid Hugging Face model id.")
    raise err
