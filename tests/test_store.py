"""The verified store: what is imported is what was verified.

Every attack here is first shown to work against a plain import of the same
directory (``kernels.get_local_kernel``), so a test cannot pass because its
attack silently did nothing.
"""

from __future__ import annotations

import errno
import hashlib
import importlib
import importlib.util
import json
import marshal
import os
import py_compile
import re
import shutil
import stat
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from frt_dist import KernelUnavailable, loader
from frt_dist.distribution.mirror import mirror_lock
from frt_dist.loader import core, importer, store
from helpers.factories import CPU, NORM_SRC, SCALE_SRC, sha256_b64, tiny_project
from helpers.paths import ROOT, TESTS

SCALE = "t-org/scale"
MID = "_frt_test_scale_v1"
MiB = 1 << 20
GOOD_INIT = 'from .helpers import FLAVOUR, scale, scale_out\n'
GOOD_HELPERS = SCALE_SRC + '\nFLAVOUR = "good"\n'


def evil_source(mark: Path, *, init: bool = False) -> str:
    """Code that leaves a trace in ``mark`` when it runs, and says it is evil."""
    body = f'import pathlib\npathlib.Path({str(mark)!r}).open("a").write("ran\\n")\nFLAVOUR = "evil"\n'
    if init:
        return body + "from .helpers import scale, scale_out\n"
    return body + "\n\ndef scale(x, w):\n    return -1\n\n\ndef scale_out(x, w, out):\n    return out\n"


@pytest.fixture(autouse=True)
def fresh(monkeypatch, tmp_path):
    loader._forget_all()
    for var in ("FRT_MIRROR", "FRT_LOCK", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_ENDPOINT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("KERNELS_CACHE", str(tmp_path / "kcache"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hfcache"))
    monkeypatch.setenv("FRT_STORE", str(tmp_path / "store"))
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    yield
    loader._forget_all()


def _project(tmp_path, module=None, name="proj", **scale):
    module = module if module is not None else {"__init__.py": GOOD_INIT, "helpers.py": GOOD_HELPERS}
    return tiny_project(tmp_path, name, packages={"scale": {"name": "scale", "module": module, **scale},
                                                  "norm": {"name": "norm", "source": NORM_SRC}})


@pytest.fixture
def proj(tmp_path):
    tp = _project(tmp_path)
    return tp, tp.lock()


def _source_vdir(tp) -> Path:
    return tp.root / "packages" / "scale" / "build" / "torch-cpu"


def _mirrored(lock, tmp_path) -> tuple[Path, Path]:
    """(mirror, the variant directory in it)."""
    mirror = tmp_path / "mirror"
    mirror_lock(lock, mirror, variants=["torch-cpu"])
    snap = lock.packages[SCALE].snapshot
    return mirror, mirror / "kernels--t-org--scale" / "snapshots" / snap / "build" / "torch-cpu"


def _refusal(fn, *a, **k) -> KernelUnavailable:
    with pytest.raises(KernelUnavailable) as ei:
        fn(*a, **k)
    return ei.value


def _entries(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if re.fullmatch(r"[0-9a-f]{64}", p.name))


def _plain_import(vdir: Path):
    """The attack's control: `kernels` importing the directory in place, then forgotten again."""
    import kernels
    import kernels.importer

    try:
        module = kernels.get_local_kernel(vdir)
        return module.FLAVOUR
    finally:
        for key in [k for k in sys.modules if k == MID or k.startswith(MID + ".")]:
            sys.modules.pop(key, None)
        kernels.importer._loaded_kernels.pop(vdir, None)


# ---------------------------------------------------------------------------
# bytecode beside the verified sources


def _plant_pyc(source: Path, evil: str, kind: str, work: Path) -> Path:
    """A pyc for ``source`` that Python would take instead of it."""
    pyc = Path(importlib.util.cache_from_source(str(source)))
    pyc.parent.mkdir(exist_ok=True)
    if kind == "unchecked-hash":
        src = work / f"evil-{source.name}"
        src.write_text(evil)
        py_compile.compile(str(src), cfile=str(pyc), dfile=str(source), doraise=True,
                           invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    else:  # a timestamp pyc carrying the verified source's mtime and size
        st = os.stat(source)
        code = compile(evil, str(source), "exec")
        pyc.write_bytes(importlib.util.MAGIC_NUMBER + (0).to_bytes(4, "little")
                        + (int(st.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little")
                        + (st.st_size & 0xFFFFFFFF).to_bytes(4, "little") + marshal.dumps(code))
    return pyc


@pytest.mark.parametrize("where", ["path", "mirror"])
@pytest.mark.parametrize("kind", ["unchecked-hash", "timestamp"])
def test_planted_bytecode_never_runs(proj, tmp_path, kind, where):
    tp, lock = proj
    mirror, vdir = _mirrored(lock, tmp_path) if where == "mirror" else (None, _source_vdir(tp))
    mark = tmp_path / "evil-ran"
    for rel, init in (("scale/__init__.py", True), ("scale/helpers.py", False)):
        _plant_pyc(vdir / rel, evil_source(mark, init=init), kind, tmp_path)
    assert _plain_import(vdir) == "evil" and mark.exists()  # the attack works on a plain import
    mark.unlink()

    got = loader.load_locked(lock, SCALE, mirror=mirror, hardware=CPU)
    assert (got.source, got.module.FLAVOUR, got.module.scale(2, 3)) == (where, "good", 6)
    assert not mark.exists()
    assert isinstance(sys.modules[MID + ".helpers"].__loader__, importer.VerifiedSourceLoader)
    entry = Path(got.store_path)
    assert sorted(str(p.relative_to(entry)) for p in entry.rglob("*")) == [
        "metadata.json", "scale", "scale/__init__.py", "scale/helpers.py"]  # no __pycache__ copied


def test_the_loader_writes_no_bytecode_anywhere(proj, monkeypatch):
    tp, lock = proj
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    got = loader.load_locked(lock, SCALE, hardware=CPU)
    assert got.module.FLAVOUR == "good"
    assert not list(Path(got.store_path).rglob("__pycache__"))
    assert not list(_source_vdir(tp).rglob("__pycache__"))


# ---------------------------------------------------------------------------
# a swap after the check


def test_a_file_swapped_between_check_and_import_never_runs(proj, tmp_path):
    tp, lock = proj
    mark = tmp_path / "evil-ran"
    ready = loader.prepare_locked(lock, SCALE, hardware=CPU)  # every check passed; nothing imported yet
    assert isinstance(ready, loader.Ready) and MID not in sys.modules
    helpers = _source_vdir(tp) / "scale" / "helpers.py"
    helpers.write_text(evil_source(mark))
    (_source_vdir(tp) / "scale" / "__init__.py").write_text(evil_source(mark, init=True))
    got = ready.load()
    assert (got.module.FLAVOUR, got.module.scale(2, 3)) == ("good", 6) and not mark.exists()
    # the next load sees the swapped source and refuses it: the store does not hide drift
    loader._forget_all()
    exc = _refusal(loader.load_locked, lock, SCALE, hardware=CPU)
    assert sorted((r["kind"], r["path"]) for r in exc.reasons) == [
        ("mismatched", "build/torch-cpu/scale/__init__.py"), ("mismatched", "build/torch-cpu/scale/helpers.py")]
    assert not mark.exists() and MID not in sys.modules
    assert _plain_import(_source_vdir(tp)) == "evil"  # control: the swapped bytes do run in place


def test_a_swapped_metadata_cannot_change_the_module_id(proj):
    tp, lock = proj
    meta = _source_vdir(tp) / "metadata.json"
    doc = json.loads(meta.read_text())
    ready = loader.prepare_locked(lock, SCALE, hardware=CPU)
    meta.write_text(json.dumps(dict(doc, id="_frt_evil_id")))
    got = ready.load()
    assert got.module_id == MID and sys.modules[MID] is got.module and "_frt_evil_id" not in sys.modules
    assert json.loads((Path(got.store_path) / "metadata.json").read_text())["id"] == MID
    loader._forget_all()
    exc = _refusal(loader.load_locked, lock, SCALE, hardware=CPU)
    assert [(r["kind"], r["path"]) for r in exc.reasons] == [("mismatched", "build/torch-cpu/metadata.json")]
    assert "_frt_evil_id" not in sys.modules


def test_without_a_lock_the_metadata_checked_is_the_metadata_read(proj, tmp_path, monkeypatch):
    """No lockfile: the metadata's own digests decide; a metadata swapped after it was read
    (here: same id, another license) is refused, not stored."""
    tp, lock = proj
    mirror, vdir = _mirrored(lock, tmp_path)
    meta = vdir / "metadata.json"
    swapped = json.dumps(dict(json.loads(meta.read_text()), license="mit")).encode()
    real = core._self_declared

    def read_then_swap(want, vdir):
        real(want, vdir)
        meta.unlink()
        meta.write_bytes(swapped)

    monkeypatch.setattr(core, "_self_declared", read_then_swap)
    exc = _refusal(loader.load_package, SCALE, 1, trust=True, mirror=mirror, hardware=CPU)
    assert [(r["kind"], r["path"]) for r in exc.reasons] == [("mismatched", "build/torch-cpu/metadata.json")]
    assert not _entries(Path(os.environ["FRT_STORE"]))


def _swapper_code() -> str:
    return r'''
import os, sys
target, good, evil, stop = sys.argv[1:5]
data = [open(good, "rb").read(), open(evil, "rb").read()]
tmp = target + ".swap"
n = 0
print("started", flush=True)
while not os.path.exists(stop):
    with open(tmp, "wb") as f:
        f.write(data[n % 2])
    os.replace(tmp, target)
    n += 1
with open(tmp, "wb") as f:
    f.write(data[0])
os.replace(tmp, target)
print(n, flush=True)
'''


@pytest.mark.parametrize("swapped", ["scale/helpers.py", "scale/flavour.txt"])
@pytest.mark.subprocess
def test_a_racing_swapper_process_never_gets_its_bytes_run(tmp_path, monkeypatch, swapped):
    """A process flips a file of the mirror between the good and an evil version as fast as
    it can while this process loads 200 times (every other load with an empty store, so cold
    and warm loads both race it): every load runs the good bytes or refuses. The data file
    (read by the package at import, like a shared object it would dlopen) is not hashed
    again at import: only the one-pass copy keeps its evil version out."""
    module = {"__init__.py": GOOD_INIT + "import pathlib\n"
                             "DATA = pathlib.Path(__file__).with_name('flavour.txt').read_text().strip()\n",
              "helpers.py": GOOD_HELPERS, "flavour.txt": "good\n"}
    tp = _project(tmp_path, module=module)
    lock = tp.lock()
    mirror, vdir = _mirrored(lock, tmp_path)
    target = (vdir / swapped).resolve()  # the mirror's blob
    mark = tmp_path / "evil-ran"
    good, evil = tmp_path / "good", tmp_path / "evil"
    good.write_bytes(target.read_bytes())
    evil.write_text(evil_source(mark) if swapped.endswith(".py") else "evil\n")
    stop = tmp_path / "stop"
    proc = subprocess.Popen([sys.executable, "-c", _swapper_code(), str(target), str(good), str(evil), str(stop)],
                            stdout=subprocess.PIPE, text=True)
    outcomes: Counter = Counter()
    modules = []  # each load must import afresh (a cached module would hide the race)
    try:
        assert proc.stdout.readline().strip() == "started"
        for i in range(200):
            if i % 2 == 0:
                monkeypatch.setenv("FRT_STORE", str(tmp_path / "stores" / str(i)))
            loader._forget_all()
            try:
                got = loader.load_locked(lock, SCALE, mirror=mirror, hardware=CPU)
            except KernelUnavailable as exc:
                assert {(r["kind"], r["path"]) for r in exc.reasons} == {
                    ("mismatched", f"build/torch-cpu/{swapped}")}, exc.reasons
                outcomes["refused"] += 1
            else:
                outcomes["evil" if "evil" in (got.module.FLAVOUR, got.module.DATA) else "good"] += 1
                modules.append(got.module)
    finally:
        stop.touch()
        flips = int(proc.communicate(timeout=60)[0].strip() or 0)
    assert outcomes["evil"] == 0 and not mark.exists(), outcomes
    assert outcomes["good"] + outcomes["refused"] == 200, outcomes
    assert len({id(m) for m in modules}) == len(modules)
    assert flips > 200  # the swapper really ran during the loads
    print(f"racing swapper on {swapped}: {flips} flips, outcomes {dict(outcomes)}")


# ---------------------------------------------------------------------------
# concurrent builders, damaged entries, permissions


_BUILDER = r'''
import os, sys, time
from pathlib import Path
from frt_dist import loader
from frt_dist.system.hardware import Hardware
from frt_dist.loader import store
from frt_dist.documents.lockfile import Lockfile

barrier = Path(sys.argv[2])
real = store.Store.commit
outcome = {}

def commit(self, tmp, identity):
    ino = os.stat(tmp).st_ino
    (barrier / f"ready-{os.getpid()}").touch()
    give_up = time.monotonic() + 120  # only a failsafe: the other builder normally arrives in seconds
    while len(list(barrier.glob("ready-*"))) < 2:
        if time.monotonic() > give_up:
            raise SystemExit("the other builder never reached its commit")
        time.sleep(0.005)
    entry = real(self, tmp, identity)
    outcome["won"] = os.stat(entry.path).st_ino == ino
    return entry

store.Store.commit = commit
hw = Hardware(arch="x86_64", device_class="test-cpu", backend="cpu", software={"torch": "2.13"})
got = loader.load_locked(Lockfile.read(sys.argv[1]), "t-org/scale", hardware=hw)
print("RESULT", got.module.FLAVOUR, got.store_path, "won" if outcome["won"] else "lost", flush=True)
'''


@pytest.mark.subprocess
@pytest.mark.slow
def test_two_processes_building_one_entry_both_load_and_one_entry_remains(proj, tmp_path):
    tp, lock = proj
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONDONTWRITEBYTECODE="1")
    procs = [subprocess.Popen([sys.executable, "-c", _BUILDER, str(lock.path), str(barrier)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        results.append(out.split("RESULT ", 1)[1].split())
    assert [r[0] for r in results] == ["good", "good"]
    assert results[0][1] == results[1][1]
    assert sorted(r[2] for r in results) == ["lost", "won"]
    root = Path(os.environ["FRT_STORE"])
    assert len(_entries(root)) == 1
    assert not [p.name for p in root.iterdir() if p.name.startswith((".tmp-", ".trash-"))]


def _damage(entry: Path, fn) -> None:
    """Make the entry's folders and record writable, damage it with ``fn(entry)`` (the entry's folder)."""
    for d in [entry, *(p for p in entry.rglob("*") if p.is_dir())]:
        os.chmod(d, 0o755)
    os.chmod(entry / "record.json", 0o644)
    fn(entry)


def _close_again(entry: Path) -> None:
    """Give a damaged entry back the modes frt gave it (folders 0555, record 0444): a forger's last step."""
    os.chmod(entry / "record.json", 0o444)
    for d in [entry, *(p for p in entry.rglob("*") if p.is_dir())]:
        os.chmod(d, 0o555)


@pytest.mark.parametrize("damage", ["record-missing", "file-edited", "file-edited-same-size-and-mtime",
                                    "pyc-planted-in-entry", "record-of-another-key"])
def test_a_damaged_entry_is_a_miss_and_is_rebuilt(proj, tmp_path, monkeypatch, damage):
    tp, lock = proj
    mark = tmp_path / "evil-ran"
    first = loader.load_locked(lock, SCALE, hardware=CPU)
    entry = Path(first.store_path).parent
    calls = []
    for name in ("evict", "commit"):
        real = getattr(store.Store, name)
        monkeypatch.setattr(store.Store, name, lambda self, *a, _n=name, _r=real: calls.append(_n) or _r(self, *a))
    helpers = entry / "variant" / "scale" / "helpers.py"

    def edit(e):
        if damage == "record-missing":
            (e / "record.json").unlink()
        elif damage == "file-edited":
            os.chmod(helpers, 0o644)
            helpers.write_text(evil_source(mark))
        elif damage == "file-edited-same-size-and-mtime":
            st = helpers.stat()
            os.chmod(helpers, 0o644)
            evil = b'FLAVOUR = "evil"\nscale = scale_out = None\n#'
            helpers.write_bytes(evil + b"#" * (st.st_size - len(evil)))
            os.utime(helpers, ns=(st.st_atime_ns, st.st_mtime_ns))
        elif damage == "pyc-planted-in-entry":
            _plant_pyc(helpers, evil_source(mark), "unchecked-hash", tmp_path)
        else:
            rec = json.loads((e / "record.json").read_text())
            rec["key"] = "0" * 64
            (e / "record.json").write_text(json.dumps(rec))

    _damage(entry, edit)
    loader._forget_all()
    again = loader.load_locked(lock, SCALE, hardware=CPU)
    assert (again.module.FLAVOUR, again.store_path) == ("good", first.store_path) and not mark.exists()
    assert calls == ["evict", "commit"]  # moved away and rebuilt, not repaired in place
    assert not [p.name for p in entry.parent.iterdir() if p.name.startswith((".tmp-", ".trash-"))]
    assert not list(entry.rglob("__pycache__"))
    assert helpers.read_bytes() == (_source_vdir(tp) / "scale" / "helpers.py").read_bytes()
    assert stat.S_IMODE(helpers.stat().st_mode) == 0o444 and stat.S_IMODE(entry.stat().st_mode) == 0o555


def test_a_damaged_source_file_whose_fingerprint_was_forged_is_refused_at_compile(proj, tmp_path):
    """The record's fingerprints are the store's own bookkeeping; if a damaged .py ever got past
    them, its bytes are hashed again as they are compiled and the import is refused."""
    tp, lock = proj
    mark = tmp_path / "evil-ran"
    entry = Path(loader.load_locked(lock, SCALE, hardware=CPU).store_path).parent
    helpers = entry / "variant" / "scale" / "helpers.py"

    def edit(e):
        os.chmod(helpers, 0o644)
        helpers.write_text(evil_source(mark))
        os.chmod(helpers, 0o444)
        rec = json.loads((e / "record.json").read_text())
        st = helpers.stat()
        rec["files"]["scale/helpers.py"] = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
        (e / "record.json").write_text(json.dumps(rec))

    _damage(entry, edit)
    _close_again(entry)
    loader._forget_all()
    exc = _refusal(loader.load_locked, lock, SCALE, hardware=CPU)
    (reason,) = [r["reason"] for r in exc.reasons]
    assert reason.startswith("import of build/torch-cpu/ failed: ImportError: ") and "do not match the lock" in reason
    assert not mark.exists() and MID not in sys.modules


def test_a_store_that_others_can_write_or_own_is_refused(proj, tmp_path, monkeypatch):
    tp, lock = proj
    shared = tmp_path / "shared"
    shared.mkdir()
    monkeypatch.setenv("FRT_STORE", str(shared))
    before = set(sys.modules)
    for mode in (0o777, 0o775, 0o757):
        os.chmod(shared, mode)
        exc = _refusal(loader.load_locked, lock, SCALE, hardware=CPU)
        (r,) = exc.reasons
        assert r["kind"] == "store" and r["reason"] == (
            f"verified store {shared} is writable by group or others (mode {mode:#o}); "
            "frt imports only from a store that only you can write")
        assert set(sys.modules) == before and not list(shared.iterdir())
    os.chmod(shared, 0o700)
    try:  # only a privileged process can give a folder away
        os.chown(shared, 65534, 65534)
    except PermissionError:
        pass
    else:
        exc = _refusal(loader.load_locked, lock, SCALE, hardware=CPU)
        assert exc.reasons[0]["reason"].startswith(f"verified store {shared} is owned by uid 65534, not by the current user")
        os.chown(shared, os.geteuid(), os.getegid())
    os.chmod(shared, 0o755)  # readable by others is fine: only writing matters
    assert loader.load_locked(lock, SCALE, hardware=CPU).module.FLAVOUR == "good"


def test_the_store_is_created_private_under_the_user_cache(tmp_path, monkeypatch):
    monkeypatch.delenv("FRT_STORE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert store.store_path() == tmp_path / "xdg" / "frt-dist" / "store"
    s = store.open_store()
    assert s.root == (tmp_path / "xdg" / "frt-dist" / "store").resolve()
    assert stat.S_IMODE(os.stat(s.root).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(s.root.parent).st_mode) == 0o700


def test_an_import_id_another_frt_package_owns_is_refused(tmp_path):
    a = _project(tmp_path, name="a", id="_frt_shared_id")
    first = loader.load_locked(a.lock(), SCALE, hardware=CPU)
    b = tiny_project(tmp_path, "b", packages={"scale": {"name": "scale", "source": SCALE_SRC},
                                              "norm": {"name": "norm", "source": NORM_SRC, "id": "_frt_shared_id"}})
    exc = _refusal(loader.load_locked, b.lock(), "t-org/norm", hardware=CPU)
    assert [r["reason"] for r in exc.reasons] == ["import id '_frt_shared_id' is already taken by package 't-org/scale'"]
    assert sys.modules["_frt_shared_id"] is first.module


# ---------------------------------------------------------------------------
# what a cold and a warm load read


def test_an_unknown_file_is_refused_by_name_and_size_without_being_read(proj, monkeypatch):
    tp, lock = proj
    extra = _source_vdir(tp) / "scale" / "extra.bin"
    extra.write_bytes(b"\0" * 3 * MiB)
    opened = []
    real = store.open_checked
    monkeypatch.setattr(store, "open_checked", lambda path, *a: opened.append(path) or real(path, *a))
    exc = _refusal(loader.load_locked, lock, SCALE, hardware=CPU)
    assert [(r["kind"], r["path"], r["computed"], r["size"]) for r in exc.reasons] == [
        ("unknown", "build/torch-cpu/scale/extra.bin", None, 3 * MiB)]
    assert exc.reasons[0]["reason"] == "build/torch-cpu/scale/extra.bin: not declared by the package (3145728 bytes, not read)"
    assert str(extra) not in opened and len(opened) == 3
    assert not _entries(Path(os.environ["FRT_STORE"]))


@pytest.mark.parametrize("chunk,in_kernel", [(store.CHUNK, True), (64 << 10, True), (64 << 10, False)])
def test_files_over_a_mebibyte_are_hashed_whole_and_stored_exactly(tmp_path, monkeypatch, chunk, in_kernel):
    """Large files are copied span by span (in the kernel, or by hand where ``copy_file_range``
    is refused) and the store's copy is hashed whole: stored bytes equal the source's, and one
    byte changed anywhere (the last span included) is a different digest."""
    monkeypatch.setattr(store, "CHUNK", chunk)
    if not in_kernel:
        def refused(*a):
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        monkeypatch.setattr(os, "copy_file_range", refused)
    big = {"big1.bin": os.urandom(9 * MiB + 17), "big2.bin": os.urandom(MiB + 1), "big3.bin": os.urandom(3 * MiB)}
    tp = _project(tmp_path, module={"__init__.py": GOOD_INIT, "helpers.py": GOOD_HELPERS, **big})
    lock = tp.lock()
    got = loader.load_locked(lock, SCALE, hardware=CPU)
    for name, data in big.items():
        assert (Path(got.store_path) / "scale" / name).read_bytes() == data
    # one byte changed anywhere in a large file, even in its last chunk, is a different digest
    for name, offset in (("big1.bin", 9 * MiB + 16), ("big2.bin", MiB), ("big3.bin", 2 * MiB + 5)):
        loader._forget_all()
        monkeypatch.setenv("FRT_STORE", str(tmp_path / f"store-{name}"))
        path = _source_vdir(tp) / "scale" / name
        data = bytearray(big[name])
        data[offset] ^= 0xFF
        path.write_bytes(bytes(data))
        exc = _refusal(loader.load_locked, lock, SCALE, hardware=CPU)
        assert [(r["kind"], r["path"], r["computed"]) for r in exc.reasons] == [
            ("mismatched", f"build/torch-cpu/scale/{name}", sha256_b64(bytes(data)))]
        assert not _entries(tmp_path / f"store-{name}")
        path.write_bytes(big[name])


def test_a_warm_load_hashes_only_what_changed_in_the_source(proj, monkeypatch):
    tp, lock = proj
    seen = []
    real = core.admit
    monkeypatch.setattr(core, "admit", lambda *a, **k: seen.append(real(*a, **k)) or seen[-1])
    # fingerprints are trusted only for files whose ctime is a clock tick older than the load (a same-tick write
    # could hide); the fixture wrote them just now, so each load is told it runs two ticks later than it does
    # (an injected clock, not a sleep)
    hash_file = store._hash_file
    monkeypatch.setattr(store, "_hash_file", lambda *a: hash_file(*a[:-1], a[-1] + 2 * store.RACY_NS))
    loader.load_locked(lock, SCALE, hardware=CPU)
    assert (seen[-1].warm, seen[-1].hashed) == (False, 3)
    loader._forget_all()
    loader.load_locked(lock, SCALE, hardware=CPU)
    assert (seen[-1].warm, seen[-1].hashed) == (True, 0)
    helpers = _source_vdir(tp) / "scale" / "helpers.py"
    os.utime(helpers)  # same bytes, new times: hashed again, and fine
    loader._forget_all()
    assert loader.load_locked(lock, SCALE, hardware=CPU).module.FLAVOUR == "good"
    assert (seen[-1].warm, seen[-1].hashed) == (True, 1)
    helpers.write_text(GOOD_HELPERS + "# edited\n")
    loader._forget_all()
    exc = _refusal(loader.load_locked, lock, SCALE, hardware=CPU)
    assert [(r["kind"], r["path"]) for r in exc.reasons] == [("mismatched", "build/torch-cpu/scale/helpers.py")]


# ---------------------------------------------------------------------------
# what the importer imports


def test_subpackages_folders_and_absent_names_resolve_only_inside_the_entry(tmp_path):
    module = {"__init__.py": "from .sub.inner import f\nfrom .ns.leaf import g\n" + GOOD_INIT,
              "helpers.py": GOOD_HELPERS, "sub/__init__.py": "", "sub/inner.py": "def f():\n    return 'f'\n",
              "ns/leaf.py": "def g():\n    return 'g'\n"}
    tp = _project(tmp_path, module=module)
    got = loader.load_locked(tp.lock(), SCALE, hardware=CPU)
    assert (got.module.f(), got.module.g(), got.module.FLAVOUR) == ("f", "g", "good")
    for name in ("sub", "sub.inner", "ns", "ns.leaf", "helpers"):
        mod = sys.modules[f"{MID}.{name}"]
        assert all(Path(p).is_relative_to(got.store_path) for p in [*(getattr(mod, "__path__", None) or []),
                                                                      *([mod.__file__] if getattr(mod, "__file__", None) else [])])
    (_source_vdir(tp) / "scale" / "absent.py").write_text("X = 1\n")  # beside the source: irrelevant
    with pytest.raises(ModuleNotFoundError, match="not among the verified files"):
        importlib.import_module(f"{MID}.absent")


_EXT_C = r'''
#include <Python.h>
static PyObject *add_one(PyObject *self, PyObject *arg) { return PyLong_FromLong(PyLong_AsLong(arg) + 1); }
static PyMethodDef methods[] = {{"add_one", add_one, METH_O, ""}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "_ops", NULL, -1, methods};
PyMODINIT_FUNC PyInit__ops(void) { return PyModule_Create(&def); }
'''


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc to build a real extension module")
@pytest.mark.subprocess
def test_an_extension_module_is_loaded_from_the_store_entry(tmp_path):
    import sysconfig

    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    (tmp_path / "ops.c").write_text(_EXT_C)
    so = tmp_path / f"_ops{suffix}"
    r = subprocess.run(["gcc", "-shared", "-fPIC", "-O1", f"-I{sysconfig.get_paths()['include']}", "-o", str(so),
                        str(tmp_path / "ops.c")], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        pytest.skip(f"gcc could not build an extension here: {r.stderr[-300:]}")
    tp = _project(tmp_path, module={"__init__.py": "from ._ops import add_one\n" + GOOD_INIT,
                                    "helpers.py": GOOD_HELPERS, f"_ops{suffix}": so.read_bytes()})
    got = loader.load_locked(tp.lock(), SCALE, hardware=CPU)
    assert got.module.add_one(41) == 42
    ops = sys.modules[f"{MID}._ops"]
    assert Path(ops.__file__) == Path(got.store_path) / "scale" / f"_ops{suffix}"
    assert isinstance(ops.__spec__.loader, importlib.machinery.ExtensionFileLoader)


def test_kernels_internals_the_adapter_uses_are_still_there():
    """frt_dist.loader._kernels_adapter reproduces get_local_kernel with these names; if `kernels`
    moves one of them, this fails first (and says which)."""
    import kernels
    import kernels.deps
    import kernels.importer
    import kernels.validate

    assert callable(kernels.Metadata.from_bytes)
    assert callable(kernels.validate.default_metadata_validators)
    assert callable(kernels.deps.use_kernel_deps)
    assert isinstance(kernels.importer._loaded_kernels, dict)
    assert [f for f in kernels.LoadedKernel.__dataclass_fields__] == ["metadata", "module", "repo_info"]
    ctx = kernels.deps.use_kernel_deps({})
    with ctx:
        with pytest.raises(RuntimeError, match="not found in kernel dependencies"):
            kernels.get_kernel_dep("x/y")


def test_a_cold_load_stores_exactly_what_it_hashed(proj):
    """The entry holds the locked files and metadata.json, read-only, and a record that names its key."""
    tp, lock = proj
    got = loader.load_locked(lock, SCALE, hardware=CPU)
    entry = Path(got.store_path).parent
    rec = json.loads((entry / "record.json").read_text())
    lv = lock.packages[SCALE].variants["torch-cpu"]
    assert rec["key"] == entry.name and rec["identity"] == {
        "format": store.FORMAT, "algorithm": "sha256", "files": dict(sorted(lv.files.items())),
        "metadata": lv.metadata_sha256, "module": MID}
    assert entry.name == hashlib.sha256(json.dumps(rec["identity"], sort_keys=True, separators=(",", ":"))
                                        .encode()).hexdigest()
    for rel, want in lv.files.items():
        assert sha256_b64((Path(got.store_path) / rel).read_bytes()) == want
    assert "sha256:" + hashlib.sha256((Path(got.store_path) / "metadata.json").read_bytes()).hexdigest() == lv.metadata_sha256
    modes = {stat.S_IMODE(p.stat().st_mode) for p in entry.rglob("*")}
    assert modes == {0o444, 0o555}


# ---------------------------------------------------------------------------
# the bytes hashed are the bytes imported: a source rewritten in place right
# after the store's copy step read it. Hashing the source (again) instead of the store's copy would
# see the rewritten bytes; hashing the copy sees what will be imported.


def _same_length(*texts: bytes) -> list[bytes]:
    n = max(len(t) for t in texts) + 2
    return [t + b"\n" + b"#" * (n - len(t) - 2) + b"\n" for t in texts]


def _rewrite_after_the_copy_reads(monkeypatch, target: Path, new: bytes) -> list[str]:
    """Hook the store's copy step: once it has read ``target`` (a small file: its one read; a large
    one: each span copied), ``target`` is rewritten in place (same inode, same size) with ``new``."""
    hits: list[str] = []
    real_read, real_span = store._read_all, store._copy_span

    def ours(fd: int) -> bool:
        return os.path.samestat(os.fstat(fd), os.stat(target))

    def read_all(fd):
        data = real_read(fd)
        if ours(fd):
            with open(target, "r+b") as fh:
                fh.write(new)
            hits.append("read")
        return data

    def copy_span(fd, out, off, n, in_kernel):
        k = real_span(fd, out, off, n, in_kernel)
        if k and ours(fd):
            with open(target, "r+b") as fh:
                fh.seek(off)
                fh.write(new[off:off + k])
            hits.append("span")
        return k

    monkeypatch.setattr(store, "_read_all", read_all)
    monkeypatch.setattr(store, "_copy_span", copy_span)
    return hits


@pytest.mark.parametrize("size", ["small", "large"])
@pytest.mark.parametrize("direction", ["evil-read-then-locked-bytes-written", "locked-read-then-evil-written"])
def test_the_bytes_hashed_are_the_bytes_stored_when_the_source_changes_right_after_it_is_read(
        tmp_path, monkeypatch, size, direction):
    mark = tmp_path / "evil-ran"
    if size == "small":
        rel = "scale/helpers.py"
        good, evil = _same_length(GOOD_HELPERS.encode(), evil_source(mark).encode())
    else:
        rel = "scale/big.bin"
        good, evil = os.urandom(3 * MiB + 5), os.urandom(3 * MiB + 5)
    module = {"__init__.py": GOOD_INIT, "helpers.py": good if size == "small" else GOOD_HELPERS}
    if size == "large":
        module["big.bin"] = good
    tp = _project(tmp_path, module=module)
    lock = tp.lock()
    src = _source_vdir(tp) / rel
    first, then = (evil, good) if direction.startswith("evil") else (good, evil)
    src.write_bytes(first)
    hits = _rewrite_after_the_copy_reads(monkeypatch, src, then)
    root = Path(os.environ["FRT_STORE"])
    if first is evil:  # the copy holds the evil bytes: its digest is not the lock's, whatever the source says now
        exc = _refusal(loader.load_locked, lock, SCALE, hardware=CPU)
        assert [(r["kind"], r["path"], r["computed"]) for r in exc.reasons] == [
            ("mismatched", f"build/torch-cpu/{rel}", sha256_b64(evil))]
        assert src.read_bytes() == good  # the source did turn into the locked bytes meanwhile
        assert not _entries(root) and not mark.exists() and MID not in sys.modules
    else:  # the copy holds the locked bytes and is what is imported, though the source turned evil
        got = loader.load_locked(lock, SCALE, hardware=CPU)
        assert (Path(got.store_path) / rel).read_bytes() == good and src.read_bytes() == evil
        assert got.module.FLAVOUR == "good" and not mark.exists()
    assert hits and set(hits) == {"read" if size == "small" else "span"}  # the hook did run inside the copy step


# ---------------------------------------------------------------------------
# a file swapped inside a store entry, its record rewritten to match: the record is
# the store's bookkeeping and vouches for nothing; .py and .so are both held to the lock at import

_EVIL_EXT_C = r'''
#include <Python.h>
#include <stdio.h>
static PyObject *add_one(PyObject *self, PyObject *arg) { return PyLong_FromLong(-1); }
static PyMethodDef methods[] = {{"add_one", add_one, METH_O, ""}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "_ops", NULL, -1, methods};
PyMODINIT_FUNC PyInit__ops(void) { FILE *f = fopen(MARK, "a"); if (f) { fputs("ran\n", f); fclose(f); }
                                   return PyModule_Create(&def); }
'''


def _build_ext(tmp_path: Path, name: str, source: str, *defines: str) -> bytes:
    import sysconfig

    (tmp_path / f"{name}.c").write_text(source)
    so = tmp_path / f"{name}{importlib.machinery.EXTENSION_SUFFIXES[0]}"
    r = subprocess.run(["gcc", "-shared", "-fPIC", "-O1", *defines, f"-I{sysconfig.get_paths()['include']}", "-o",
                        str(so), str(tmp_path / f"{name}.c")], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        pytest.skip(f"gcc could not build an extension here: {r.stderr[-300:]}")
    return so.read_bytes()


def _swap_in_entry(entry: Path, rel: str, data: bytes) -> None:
    """Replace one file of a committed entry and rewrite the record so its fingerprints match."""
    target = entry / "variant" / rel

    def edit(e):
        target.unlink()  # a new file in its place (the old one may be mapped by a process that loaded it)
        target.write_bytes(data)
        os.chmod(target, 0o444)
        rec = json.loads((e / "record.json").read_text())
        st = target.stat()
        rec["files"][rel] = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
        (e / "record.json").write_text(json.dumps(rec))

    _damage(entry, edit)
    _close_again(entry)


_LOAD_IN_A_FRESH_PROCESS = r'''
import json, sys
sys.path.insert(0, sys.argv[1])
from helpers.factories import CPU
from frt_dist import KernelUnavailable, loader
try:
    got = loader.load_locked(sys.argv[2], "t-org/scale", hardware=CPU)
    print(json.dumps({"loaded": got.module.add_one(41), "flavour": got.module.FLAVOUR}))
except KernelUnavailable as exc:
    print(json.dumps({"reasons": [r["reason"] for r in exc.reasons]}))
'''


def _maps_of_the_store() -> list[str]:
    """The file-backed mappings of this process that come from the verified store, and its memfd copies."""
    store_root = str(Path(os.environ["FRT_STORE"]).resolve())
    return sorted({line.split(None, 5)[5] for line in Path("/proc/self/maps").read_text().splitlines()
                   if len(line.split(None, 5)) == 6 and (store_root in line or "memfd:frt-verified" in line)})


@pytest.mark.parametrize("kind, rehash", [(".py", None), (".py", "1"), (".so", "1")])
@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc to build a real extension module")
@pytest.mark.subprocess
@pytest.mark.slow
def test_a_file_swapped_in_a_store_entry_with_its_record_rewritten_is_refused_alike(tmp_path, monkeypatch, kind,
                                                                                   rehash):
    """With ``FRT_STORE_REHASH=1`` the store's owner is not trusted to have left an entry alone: whether
    the swapped file is a source or an extension module, its bytes are hashed against the lock as they
    are compiled or mapped, and the load is refused with the same words; the evil code never runs.
    A source is hashed so always (sealed or not). The load after the swap is a fresh process, as the
    next run of a program would be. (Without the option, a sealed extension module is trusted by its
    record: someone who rewrites the record is the store's owner, see the "sealed" tests below.)"""
    if rehash is not None:
        monkeypatch.setenv("FRT_STORE_REHASH", rehash)
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    mark = tmp_path / "evil-ran"
    good_so = _build_ext(tmp_path, "good", _EXT_C)
    evil_so = _build_ext(tmp_path, "evil", _EVIL_EXT_C, f'-DMARK="{mark}"')
    tp = _project(tmp_path, module={"__init__.py": "from ._ops import add_one\n" + GOOD_INIT,
                                    "helpers.py": GOOD_HELPERS, f"_ops{suffix}": good_so})
    lock = tp.lock()
    first = loader.load_locked(lock, SCALE, hardware=CPU)
    assert first.module.add_one(41) == 42
    if hasattr(os, "memfd_create") and Path("/proc/self/maps").exists():  # mapped from a sealed copy, or the entry
        assert any(("memfd:frt-verified-extension" in m) == (rehash is not None) for m in _maps_of_the_store())
    rel, evil = (("scale/helpers.py", evil_source(mark).encode()) if kind == ".py"
                 else (f"scale/_ops{suffix}", evil_so))
    _swap_in_entry(Path(first.store_path).parent, rel, evil)
    loader._forget_all()
    r = subprocess.run([sys.executable, "-c", _LOAD_IN_A_FRESH_PROCESS, str(TESTS), str(lock.path)],
                       capture_output=True, text=True, timeout=120, env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.splitlines()[-1])
    want = lock.packages[SCALE].variants["torch-cpu"].files[rel]
    path = Path(first.store_path) / rel
    assert got == {"reasons": [
        f"import of build/torch-cpu/ failed: ImportError: {path}: bytes in the verified store do not "
        f"match the lock (expected {want}, computed {sha256_b64(evil)}); not {'compiled' if kind == '.py' else 'loaded'}"]}
    assert not mark.exists()


# ---------------------------------------------------------------------------
# sealed entries: a warm load maps a sealed extension module without reading it,
# after checking that the file it opened is the one its record sealed and that only the user wrote it


@pytest.fixture(scope="module")
def exts(tmp_path_factory):
    """(good, evil, the evil one's mark file): two real extension modules, built once for the module."""
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc to build a real extension module")
    d = tmp_path_factory.mktemp("exts")
    mark = d / "evil-ran"
    return _build_ext(d, "good", _EXT_C), _build_ext(d, "evil", _EVIL_EXT_C, f'-DMARK="{mark}"'), mark


def _ext_project(tmp_path, good: bytes):
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    tp = _project(tmp_path, module={"__init__.py": "from ._ops import add_one\n" + GOOD_INIT,
                                    "helpers.py": GOOD_HELPERS, f"_ops{suffix}": good})
    return tp.lock(), f"scale/_ops{suffix}"


def _loaded_verbs(monkeypatch) -> list[str]:
    """The verb of every hash check the importer makes ("compiled" for a source, "loaded" for an extension)."""
    verbs: list[str] = []
    real = importer._check
    monkeypatch.setattr(importer, "_check", lambda *a: verbs.append(a[-1]) or real(*a))
    return verbs


@pytest.mark.parametrize("rehash", [None, "0", "1", "yes"])
@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc/self/maps")
@pytest.mark.subprocess
def test_a_sealed_extension_is_mapped_from_its_entry_unread_unless_rehash_is_asked(tmp_path, monkeypatch, exts,
                                                                                   rehash):
    """Sealed (the default, or ``FRT_STORE_REHASH=0``): the extension module is mapped from the entry's
    own file through the descriptor checked, and is never read or hashed. ``FRT_STORE_REHASH=1``: it is
    read, hashed against the lock and mapped from a sealed copy, as on every load before."""
    if rehash is not None:
        monkeypatch.setenv("FRT_STORE_REHASH", rehash)
    lock, rel = _ext_project(tmp_path, exts[0])
    loader.load_locked(lock, SCALE, hardware=CPU)  # cold: the entry is built and committed
    loader._forget_all()
    verbs = _loaded_verbs(monkeypatch)
    got = loader.load_locked(lock, SCALE, hardware=CPU)  # warm
    assert got.module.add_one(41) == 42
    entry_file = str(Path(got.store_path).resolve() / rel)
    maps = _maps_of_the_store()
    if rehash in (None, "0"):
        assert verbs == ["compiled", "compiled"] and entry_file in maps  # __init__.py and helpers.py only
        assert Path(sys.modules[f"{MID}._ops"].__file__) == Path(got.store_path) / rel
    else:
        assert sorted(verbs) == ["compiled", "compiled", "loaded"] and entry_file not in maps
        assert any("memfd:frt-verified-extension" in m for m in maps)


def _forge(entry: Path, rel: str, data: bytes | None, *, then=None, record_mode: int = 0o444) -> None:
    """Put ``data`` in place of ``rel`` in a committed entry (None: keep the file), run ``then(path)``,
    and rewrite the record so every fingerprint matches what is there now: a forger who can write the
    store's folders, leaving exactly one trace (``then``'s) that frt's seal must notice."""
    target = entry / "variant" / rel

    def edit(e):
        if data is not None:
            target.unlink()
            target.write_bytes(data)
            os.chmod(target, 0o444)
        if then is not None:
            then(target)
        rec = json.loads((e / "record.json").read_text())
        st = target.stat()
        rec["files"][rel] = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
        (e / "record.json").write_text(json.dumps(rec))

    _damage(entry, edit)
    _close_again(entry)
    os.chmod(entry / "record.json", record_mode)


@pytest.mark.parametrize("trace", ["swapped-record-not-rewritten", "edited-in-place-same-size-and-mtime",
                                   "hard-link", "writable-file", "record-writable", "owned-by-another-user"])
@pytest.mark.subprocess
def test_a_sealed_entry_with_a_trace_of_another_writer_is_rebuilt_and_its_bytes_never_run(tmp_path, monkeypatch,
                                                                                         exts, trace):
    """A sealed extension module is mapped unread only while everything says the user alone wrote it
    since it was hashed: the same inode, size, mtime and ctime as the record, one name, mode 0444, owned
    by the user, under a record that is itself 0444, owned by the user, with one name. Any one trace
    otherwise (the record rewritten to match all the rest) makes the entry doubtful: it is moved away
    and rebuilt from the source, and the swapped bytes never run."""
    good, evil, mark = exts
    mark.unlink(missing_ok=True)
    lock, rel = _ext_project(tmp_path, good)
    # this process maps a copy: a sealed load maps the entry's file itself, and an edit in place of a
    # file a process has mapped changes that process's code (see the store's threat model)
    monkeypatch.setenv("FRT_STORE_REHASH", "1")
    first = loader.load_locked(lock, SCALE, hardware=CPU)
    monkeypatch.delenv("FRT_STORE_REHASH")
    entry = Path(first.store_path).parent
    target = entry / "variant" / rel
    if trace == "swapped-record-not-rewritten":
        _damage(entry, lambda e: (target.unlink(), target.write_bytes(evil), os.chmod(target, 0o444)))
        _close_again(entry)
    elif trace == "edited-in-place-same-size-and-mtime":
        st = target.stat()

        def edit(e):
            os.chmod(target, 0o644)
            target.write_bytes(evil[:st.st_size].ljust(st.st_size, b"\0"))
            os.chmod(target, 0o444)
            os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
        _damage(entry, edit)
        _close_again(entry)
        assert (target.stat().st_ino, target.stat().st_mtime_ns) == (st.st_ino, st.st_mtime_ns)
    elif trace == "hard-link":
        _forge(entry, rel, evil, then=lambda p: os.link(p, tmp_path / "elsewhere.so"))
    elif trace == "writable-file":
        _forge(entry, rel, evil, then=lambda p: os.chmod(p, 0o644))
    elif trace == "record-writable":
        _forge(entry, rel, evil, record_mode=0o644)
    else:
        if os.geteuid() != 0:
            pytest.skip("only a privileged process can give a file away")
        _forge(entry, rel, evil, then=lambda p: os.chown(p, 65534, 65534))
    calls = []
    for name in ("evict", "commit"):
        real = getattr(store.Store, name)
        monkeypatch.setattr(store.Store, name, lambda self, *a, _n=name, _r=real: calls.append(_n) or _r(self, *a))
    loader._forget_all()
    again = loader.load_locked(lock, SCALE, hardware=CPU)
    assert again.module.add_one(41) == 42 and not mark.exists()
    assert calls == ["evict", "commit"]  # moved away and rebuilt from the source
    assert target.read_bytes() == good and target.stat().st_nlink == 1


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="maps through /proc/self/fd")
@pytest.mark.subprocess
def test_the_seal_is_checked_on_the_descriptor_mapped_not_on_the_path_looked_up(tmp_path, exts):
    """Between the store's lookup (which checked the entry by path) and the import, the extension module
    is replaced (a new inode) or edited in place: the importer compares the seal with an ``fstat`` of the
    descriptor it then maps, finds it broken, hashes what it opened and refuses it."""
    good, evil, mark = exts
    mark.unlink(missing_ok=True)
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    rel = f"scale/_ops{suffix}"
    init = b"from ._ops import add_one\n"
    base = tmp_path / "entry"
    (base / "scale").mkdir(parents=True)
    (base / "scale" / "__init__.py").write_bytes(init)
    so = base / rel
    files = {"scale/__init__.py": sha256_b64(init), rel: sha256_b64(good)}
    for how in ("replaced", "edited-in-place"):
        so.unlink(missing_ok=True)
        so.write_bytes(good)
        os.chmod(so, 0o444)
        seal = store._fingerprint(so.stat())
        assert store.seal_holds(so.stat(), seal)
        if how == "replaced":
            so.unlink()
            so.write_bytes(evil)
            os.chmod(so, 0o444)
        else:
            os.chmod(so, 0o644)
            with open(so, "r+b") as fh:
                fh.write(evil[:len(good)].ljust(len(good), b"\0"))
            os.chmod(so, 0o444)
        mid = f"_frt_test_sealbind_{how.replace('-', '_')}"
        with pytest.raises(ImportError) as ei:
            importer.import_verified(mid, base, "scale", files, "sha256", seals={rel: seal})
        assert str(ei.value) == (f"{so}: bytes in the verified store do not match the lock (expected {files[rel]}, "
                                 f"computed {sha256_b64(so.read_bytes())}); not loaded")
        assert not mark.exists() and mid not in sys.modules
