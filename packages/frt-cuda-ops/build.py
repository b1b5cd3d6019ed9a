#!/usr/bin/env python3
"""Build frt-cuda-ops from source into the `kernels` layout, on the machine it will run on.

    python packages/frt-cuda-ops/build.py [--out DIR] [--archs 9.0[,12.0a...]]

writes ``DIR/build/torch<MM>-cxx11-cu<VV>-<cpu>-<os>/`` (default ``DIR``: this folder) holding
``frt_cuda_ops/__init__.py``, the compiled ``frt_cuda_ops/_C`` extension and ``metadata.json``
(name, import id, ``backend.archs`` as given, and the digest of every file computed as
kernel-builder and ``kernels._rust.Digest.hash_variant`` compute it). The variant's torch and
CUDA versions and ABI are the local torch's; the code is compiled by nvcc with exactly one
``-gencode`` per declared arch (no defaults added by torch), so the declaration is what the
binary holds. ``--archs`` defaults to the visible GPU's capability.

Binaries are built where they run and never committed (``.gitignore``). Without nvcc the build
stops before anything is written: ``error: nvcc not found ...``, exit 2.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

from frt_dist.errors import UsageError  # noqa: E402
from frt_dist.system.hardware import parse_cuda_arch  # noqa: E402
from redigest_packages import compute_digest, render  # noqa: E402 - the digest the bundled packages use

NAME, PYTHON_NAME, VERSION = "frt-cuda-ops", "frt_cuda_ops", 1
SOURCES = ("csrc/kernels.cu", "csrc/ops.cpp")
DEFAULT_NVCC = Path("/usr/local/cuda/bin/nvcc")  # where CUDA toolkits install when nothing else says


def find_nvcc(env=os.environ) -> str | None:
    """nvcc from ``CUDA_HOME``/``CUDA_PATH``, the ``PATH``, or ``/usr/local/cuda``; ``None`` when absent."""
    for home in (env.get("CUDA_HOME"), env.get("CUDA_PATH")):
        if home and os.access(Path(home) / "bin" / "nvcc", os.X_OK):
            return str(Path(home) / "bin" / "nvcc")
    found = shutil.which("nvcc", path=env.get("PATH"))
    if found:
        return found
    return str(DEFAULT_NVCC) if os.access(DEFAULT_NVCC, os.X_OK) else None


def gencode_flags(archs: list[str]) -> list[str]:
    """``["9.0", "12.0a", "8.0+PTX"]`` → one ``-gencode`` each (``+PTX`` adds the PTX too)."""
    flags = []
    for arch in archs:
        parsed = parse_cuda_arch(arch)
        if parsed is None:
            raise UsageError(f"--archs: {arch!r} is not a CUDA arch (expected e.g. 9.0, 12.0a, 8.0+PTX)")
        major, minor, suffix, ptx = parsed
        sm = f"{major}{minor}{suffix}"
        flags.append(f"-gencode=arch=compute_{sm},code=sm_{sm}")
        if ptx:
            flags.append(f"-gencode=arch=compute_{sm},code=compute_{sm}")
    return flags


def variant_name(torch_version: str, cuda: str, cxx11: bool, cpu: str, os_name: str) -> str:
    """The `kernels` variant for a torch build: ``2.11.0+cu130``, ``13.0`` → ``torch211-cxx11-cu130-x86_64-linux``."""
    major, minor = torch_version.split("+")[0].split(".")[:2]
    cmajor, cminor = cuda.split(".")[:2]
    abi = "cxx11" if cxx11 else "cxx98"
    return f"torch{major}{minor}-{abi}-cu{cmajor}{cminor}-{cpu}-{os_name}"


def assemble(out: Path, extension: Path, *, variant: str, archs: list[str]) -> Path:
    """Write ``out/build/<variant>/`` from the Python sources and the compiled ``extension``;
    built beside and renamed into place, so a failed build leaves no half-written variant."""
    target = out / "build" / variant
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{variant}.", dir=target.parent))
    try:
        pkg = staging / PYTHON_NAME
        shutil.copytree(HERE / "torch-ext" / PYTHON_NAME, pkg, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        shutil.copyfile(extension, pkg / f"_C{_ext_suffix(extension)}")
        ext_digest = hashlib.sha256((pkg / f"_C{_ext_suffix(extension)}").read_bytes()).hexdigest()[:12]
        meta = {"name": NAME, "id": f"_{PYTHON_NAME}_{ext_digest}", "version": VERSION, "license": "apache-2.0",
                "python-depends": [], "backend": {"type": "cuda", "archs": list(archs)}}
        meta["digest"] = compute_digest(staging)
        (staging / "metadata.json").write_text(render(meta), encoding="utf-8")
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _ext_suffix(path: Path) -> str:
    """``_C.cpython-312-x86_64-linux-gnu.so`` → ``.cpython-312-x86_64-linux-gnu.so``."""
    return path.name[len("_C"):]


def compile_extension(archs: list[str], workdir: Path, *, nvcc: str) -> Path:
    """Compile ``SOURCES`` with ``torch.utils.cpp_extension`` (BuildExtension, nvcc) into ``workdir``."""
    os.environ.setdefault("CUDA_HOME", str(Path(nvcc).resolve().parent.parent))
    from setuptools import setup  # noqa: PLC0415
    from torch.utils.cpp_extension import BuildExtension, CUDAExtension  # noqa: PLC0415

    ext = CUDAExtension(name="_C", sources=[str(HERE / s) for s in SOURCES],
                        extra_compile_args={"cxx": ["-O3"], "nvcc": ["-O3", "--use_fast_math", *gencode_flags(archs)]})
    setup(name=NAME, ext_modules=[ext], cmdclass={"build_ext": BuildExtension}, script_name="build.py",
          script_args=["-q", "build_ext", "--build-lib", str(workdir / "lib"), "--build-temp", str(workdir / "tmp")])
    [built] = (workdir / "lib").glob("_C*.so")
    return built


def build(out: Path, archs: list[str] | None) -> Path:
    nvcc = find_nvcc()
    if nvcc is None:
        raise UsageError("nvcc not found: frt-cuda-ops is compiled on the machine it runs on, which needs the CUDA toolkit",
                         hints=["install the CUDA toolkit, or set CUDA_HOME to it"])
    import torch  # noqa: PLC0415 - the variant is named after the torch that builds it

    if not torch.version.cuda:
        raise UsageError(f"torch {torch.__version__} is not a CUDA build: the variant needs its CUDA version")
    if not archs:
        if not torch.cuda.is_available():
            raise UsageError("no GPU visible to name the arch: pass --archs (e.g. 9.0)")
        archs = ["{}.{}".format(*torch.cuda.get_device_capability())]
    gencode_flags(archs)  # a bad arch is refused before compiling
    machine = {"AMD64": "x86_64", "arm64": "aarch64"}.get(platform.machine(), platform.machine())
    variant = variant_name(torch.__version__, torch.version.cuda, bool(torch.compiled_with_cxx11_abi()),
                           machine, platform.system().lower())
    with tempfile.TemporaryDirectory(prefix="frt-cuda-ops-build.") as tmp:
        extension = compile_extension(archs, Path(tmp), nvcc=nvcc)
        return assemble(Path(out), extension, variant=variant, archs=archs)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=str(HERE), help="package folder to write build/<variant>/ into (default: this folder)")
    p.add_argument("--archs", help="comma-separated CUDA archs to compile and declare (default: the visible GPU's)")
    args = p.parse_args(argv)
    try:
        target = build(Path(args.out), [a.strip() for a in args.archs.split(",") if a.strip()] if args.archs else None)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        for hint in getattr(exc, "hints", None) or ():
            print(f"hint: {hint}", file=sys.stderr)
        return 2
    print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
