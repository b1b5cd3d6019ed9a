"""Every environment variable frt reads, declared once: its name, its default and what it means.

Code reads the environment through this module (``value``, ``flag``, ``number``), never through
``os.environ`` with a name of its own, so this table is the whole list (``tests/test_settings.py``
scans the package for reads that bypass it), and ``docs/reference.md``'s environment section is
checked against it (``tests/test_reference_doc.py``). Variables that belong to
another tool (``HF_*``, ``AWS_*``, ``KERNELS_CACHE``, ...) are declared too, with the tool that defines
them as ``owner``: frt reads them to find what that tool would find, and never gives them another
meaning.

Importing this module imports nothing but ``os``; it costs ``frt resolve`` nothing.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import NamedTuple

__all__ = ["Setting", "SETTINGS", "FAMILIES", "declared", "raw", "value", "flag", "number", "family"]


class Setting(NamedTuple):
    """One environment variable: ``default`` is what an unset (or empty) variable means."""

    name: str
    default: str | None
    meaning: str
    owner: str = "frt"  # who defines the variable: frt, or the tool frt reads it for
    topic: str = "general"  # the reference page's group


_S = Setting
SETTINGS: dict[str, Setting] = {s.name: s for s in (
    # where the project and its lock are
    _S("FRT_PROJECT", None, "the project (or node) folder every command and `frt_dist.load` uses, as `--project DIR` does",
       topic="project"),
    _S("FRT_HOME", None, "the project used when the working folder is in none (after `--project` and FRT_PROJECT)",
       topic="project"),
    _S("FRT_LOCK", None, "the lockfile `frt_dist.load`, `frt resolve`, `frt mirror`, `frt publish` and the vLLM plugin read, "
       "instead of the project's `lockfiles/<model>.lock`", topic="project"),
    _S("FRT_MIRROR", None, "a mirror (a folder, or an object-store URL such as s3://bucket/prefix) that loads "
       "and `frt init --from` read locked files from, instead of the Hub", topic="distribution"),
    # the loader's verified store
    _S("FRT_STORE", None, "the verified store's folder (default: the per-user cache folder, "
       "platformdirs' user_cache_dir('frt-dist')/store)", topic="loader"),
    _S("FRT_STORE_REHASH", "0", "1: re-hash every file of a store entry at each load instead of trusting its seal",
       topic="loader"),
    _S("FRT_KERNEL_REV_<REPO>", None, "a revision to load for one package instead of the lock's pin "
       "(REPO upper-cased, every non-alphanumeric character as _); the loaded bytes must still match the lock",
       topic="loader"),
    # object stores
    _S("FRT_STORE_ATTEMPTS", "4", "attempts per object-store request (a whole number >= 1)", topic="distribution"),
    _S("FRT_STORE_TIMEOUT", "20", "seconds an object-store connection or read may stall", topic="distribution"),
    _S("FRT_STORE_DEADLINE", "600", "seconds one whole object-store transfer may take, retries included; a load "
       "through a store's URL takes them for all its fetches together", topic="distribution"),
    _S("FRT_OCI_PLAIN_HTTP", "0", "1: talk plain HTTP to an oci:// registry that is not on loopback (a registry you "
       "trust on a private network); HTTPS otherwise", topic="distribution"),
    _S("FRT_STORE_CLIENT", "auto", "auto: obstore reads a store when the environment alone configures it, else "
       "boto3; boto3: always boto3", topic="distribution"),
    # the Hub
    _S("FRT_HUB_TIMEOUT", "30", "seconds a Hub request may take", topic="distribution"),
    _S("FRT_HUB_DEADLINE", "1800", "seconds all the Hub transfers of one frt command may take together (those in "
       "parallel and retries included)", topic="distribution"),
    _S("FRT_SIGSTORE_TRUSTED_ROOT", None, "a Sigstore trusted_root.json to check Sigstore bundles (publisher "
       "and receipt signatures) against, instead of the one sigstore ships", topic="provenance"),
    # serving through vLLM
    _S("FRT_MODEL", None, "the model whose lock the vLLM plugin routes; unset, the plugin does nothing",
       topic="vllm"),
    _S("FRT_FALLBACK", "refuse", "the vLLM plugin's policy for a band no route serves: refuse or host",
       topic="vllm"),
    _S("FRT_ACCEPT", "certified_fast", "the receipt states the vLLM plugin accepts, comma-separated (supported_correct "
       "accepts certified_fast too, as frt resolve --accept and load(accept=) do)",
       topic="vllm"),
    _S("FRT_LEDGER_DIR", None, "where each vLLM engine process writes its ledger for /metrics (set by the plugin "
       "in the API server when unset); refused when other users can write to it, unless it is sticky", topic="vllm"),
    # the demo
    _S("FRT_DEMO_ROUNDS", "20", "timing rounds per route in `make demo`", topic="demo"),
    _S("FRT_DEMO_MAX_ROUNDS", None, "the most timing rounds `make demo` may take", topic="demo"),
    # read for other tools
    _S("SOURCE_DATE_EPOCH", None, "the SBOM's timestamp (seconds since 1970), for reproducible builds",
       owner="reproducible-builds.org", topic="provenance"),
    _S("CUDA_VISIBLE_DEVICES", None, "which GPUs `--detect` reports", owner="CUDA", topic="system"),
    _S("HF_ENDPOINT", None, "the Hub's address", owner="huggingface_hub", topic="distribution"),
    _S("HF_TOKEN", None, "the Hub token (read by huggingface_hub itself)", owner="huggingface_hub",
       topic="distribution"),
    _S("HF_HUB_OFFLINE", None, "1: no Hub requests; loads use the caches and mirrors only",
       owner="huggingface_hub", topic="distribution"),
    _S("TRANSFORMERS_OFFLINE", None, "read as HF_HUB_OFFLINE", owner="transformers", topic="distribution"),
    _S("HF_HOME", None, "huggingface_hub's folder (its cache is HF_HOME/hub)", owner="huggingface_hub",
       topic="distribution"),
    _S("HF_HUB_CACHE", None, "huggingface_hub's cache folder", owner="huggingface_hub", topic="distribution"),
    _S("HUGGINGFACE_HUB_CACHE", None, "the old name of HF_HUB_CACHE", owner="huggingface_hub",
       topic="distribution"),
    _S("XDG_CACHE_HOME", None, "the user's cache folder (huggingface_hub's default HF_HOME is under it)",
       owner="XDG", topic="distribution"),
    _S("KERNELS_CACHE", None, "the `kernels` package's cache folder", owner="kernels", topic="distribution"),
    _S("DOCKER_CONFIG", None, "the folder whose config.json holds registry credentials for oci:// mirrors "
       "(default ~/.docker)", owner="Docker", topic="distribution"),
    _S("AWS_ENDPOINT_URL", None, "an S3-protocol server's address (scheme://host[:port])", owner="AWS",
       topic="distribution"),
    _S("AWS_ENDPOINT_URL_S3", None, "as AWS_ENDPOINT_URL, for S3 only", owner="AWS", topic="distribution"),
    _S("AWS_REGION", None, "the store's region", owner="AWS", topic="distribution"),
    _S("AWS_DEFAULT_REGION", None, "the store's region when AWS_REGION is unset", owner="AWS", topic="distribution"),
    _S("AWS_CONFIG_FILE", None, "the AWS config file (default ~/.aws/config); [default] settings in it mean boto3 "
       "reads the store", owner="AWS", topic="distribution"),
    _S("AWS_PROFILE", None, "the AWS profile boto3 reads", owner="AWS", topic="distribution"),
    _S("AWS_ACCESS_KEY_ID", None, "the store's key pair (with AWS_SECRET_ACCESS_KEY)", owner="AWS",
       topic="distribution"),
    _S("AWS_SECRET_ACCESS_KEY", None, "the store's key pair (with AWS_ACCESS_KEY_ID)", owner="AWS",
       topic="distribution"),
    _S("AWS_SESSION_TOKEN", None, "a temporary credential's token; when set, only boto3 reads the store",
       owner="AWS", topic="distribution"),
)}

# Variables read as a family by prefix: the store client's choice looks at every AWS_* variable.
FAMILIES: dict[str, str] = {
    "FRT_KERNEL_REV_": "FRT_KERNEL_REV_<REPO>",
    "AWS_": "any other AWS_* variable: boto3 reads it, so a store is then read through boto3",
}


def declared(name: str) -> Setting:
    """The declaration of ``name`` (a ``FRT_KERNEL_REV_<REPO>`` name resolves to its family's)."""
    s = SETTINGS.get(name)
    if s is None and name.startswith("FRT_KERNEL_REV_"):
        s = SETTINGS["FRT_KERNEL_REV_<REPO>"]
    if s is None:
        raise KeyError(f"{name} is not declared in frt_dist.settings")
    return s


def raw(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The variable exactly as set (``None`` when unset): for a variable whose empty value means
    something of its own (``CUDA_VISIBLE_DEVICES=""``: no device)."""
    declared(name)
    return (os.environ if environ is None else environ).get(name)


def value(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The variable's value; its declared default when it is unset or empty."""
    s = declared(name)
    raw = (os.environ if environ is None else environ).get(name)
    return raw if raw not in (None, "") else s.default


def flag(name: str, environ: Mapping[str, str] | None = None) -> bool:
    """A yes/no variable: anything but unset, empty, 0, false, no or off is yes."""
    raw = value(name, environ)
    return (raw or "").strip().lower() not in ("", "0", "false", "no", "off")


def number(name: str, kind: type = float, environ: Mapping[str, str] | None = None):
    """A positive number; ``UsageError`` (exit 2) naming the variable when it is not one."""
    raw = value(name, environ)
    if raw is None:
        return None
    try:
        v = kind(raw)
    except ValueError:
        v = None
    if v is None or not v > 0:
        from .errors import UsageError  # noqa: PLC0415 - only on bad input

        raise UsageError(f"{name}={raw!r}: expected a positive {'whole ' if kind is int else ''}number",
                         hints=[f"unset {name} for its default ({declared(name).default})"])
    return v


def family(prefix: str, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Every variable set whose name starts with ``prefix`` (a family of ``FAMILIES``, or the prefix of
    declared names such as ``FRT_STORE_``), as set: for keying a cache on a tool's whole environment."""
    if prefix not in FAMILIES and not any(n.startswith(prefix) for n in SETTINGS):
        raise KeyError(f"{prefix}* is not declared in frt_dist.settings")
    return {k: v for k, v in (os.environ if environ is None else environ).items() if k.startswith(prefix)}
