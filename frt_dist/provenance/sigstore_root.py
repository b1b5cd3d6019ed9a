"""The one Sigstore trusted root and verifier frt checks every bundle with, publisher signatures
(``metadata.json.sigstore``) and receipt signatures (``<receipt>.json.sigstore``) alike, and the one
answer when the ``provenance`` extra is missing.

The root is pinned: ``FRT_SIGSTORE_TRUSTED_ROOT`` when set, else the production
``trusted_root.json`` the installed ``sigstore`` wheel ships; frt never refreshes it over the
network (no TUF, no request to Rekor: the ``Verifier`` is built from the file). ``sigstore`` and
``cryptography`` are imported only when a bundle, a key or a policy is in use.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from .. import settings
from ..errors import SigningUnavailable, UsageError

__all__ = ["EXTRA", "need", "trusted_root_path", "verifier"]

EXTRA = "pip install 'frt-dist[provenance]'"


def need(module: str, what: str, *, hints: tuple[str, ...] = ()):
    """The module ``module`` (``sigstore``, ``cryptography``), or ``SigningUnavailable`` (exit 2)
    saying that ``what`` needs it and which extra installs it (then ``hints``)."""
    import importlib  # noqa: PLC0415

    try:
        return importlib.import_module(module)
    except ImportError:
        raise SigningUnavailable(f"{what} needs the {module.split('.')[0]!r} package, which is not installed",
                                 hints=[EXTRA, *hints]) from None


def trusted_root_path() -> Path:
    """The pinned Sigstore trusted root: ``FRT_SIGSTORE_TRUSTED_ROOT`` when set, else the
    production ``trusted_root.json`` shipped inside the installed ``sigstore`` wheel."""
    env = settings.value("FRT_SIGSTORE_TRUSTED_ROOT")
    if env:
        return Path(env)
    sigstore = need("sigstore", "checking a Sigstore signature")
    p = Path(sigstore.__file__).parent / "_store" / "https%3A%2F%2Ftuf-repo-cdn.sigstore.dev" / "trusted_root.json"
    if not p.is_file():
        raise SigningUnavailable(f"the installed sigstore ships no production trusted root at {p}", hints=[EXTRA])
    return p


def verifier(root: str | os.PathLike | None = None):
    """A ``sigstore`` ``Verifier`` over the trusted root at ``root`` (default: ``trusted_root_path()``),
    built once per file. A root that cannot be read or is not a trusted root is ``UsageError``."""
    return _verifier(str(root if root is not None else trusted_root_path()))


@functools.lru_cache(maxsize=4)
def _verifier(path: str):
    need("sigstore", "checking a Sigstore signature")
    from sigstore.models import TrustedRoot  # noqa: PLC0415
    from sigstore.verify import Verifier  # noqa: PLC0415

    try:
        return Verifier(trusted_root=TrustedRoot.from_file(path))
    except OSError as exc:
        raise UsageError(f"{path}: the Sigstore trusted root cannot be read: {exc.strerror or exc}",
                         hints=["point FRT_SIGSTORE_TRUSTED_ROOT at a trusted_root.json, or unset it to use the "
                                "one the sigstore package ships"]) from None
    except Exception as exc:
        raise UsageError(f"{path}: not a Sigstore trusted root: {exc}") from None
