"""Special files and hostile documents never hang or crash frt.

Where frt reads or replaces a receipt, a ``.sig``/``.sigstore``, a key file, a lockfile or a
receipt's local destination, a FIFO, a device or an oversized file is refused with a reason that
names it, before anything blocks or floods memory; every JSON frt takes from a store or a signature
goes through the bounded reader. A FIFO test makes the FIFO with ``os.mkfifo`` and runs the code
under ``bounded``: a reader stuck on the FIFO fails the test (the FIFO is then opened for writing,
which lets the stuck reader go) instead of hanging the suite.
"""

from __future__ import annotations

import json
import os
import re
import threading
from pathlib import Path

import pytest

from frt_dist.base.canonical import digest
from frt_dist.distribution.fleet import pull_receipts
from frt_dist.distribution.objstore import open_store
from frt_dist.documents.lockfile import Lockfile, write_atomic
from frt_dist.documents.schema import read_bytes
from frt_dist.errors import ReceiptInvalid, UsageError
from helpers.factories import tiny_project
from helpers.frt import frt_main

FIFO = "is a FIFO (named pipe), not a regular file"
DEVICE = "is a character device, not a regular file"


def bounded(fn, *fifos, seconds: float = 20):
    """``fn()``'s value (or its exception), failing the test if it does not return within ``seconds``
    (a read stuck on one of ``fifos``, which are then opened for writing so the reader ends)."""
    box = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed to the test
            box["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        for f in fifos:
            try:
                os.close(os.open(f, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass
        t.join(10)
        pytest.fail(f"blocked on a FIFO: {', '.join(map(str, fifos))}")
    if "error" in box:
        raise box["error"]
    return box.get("value")


def sparse(path: Path, size: int = 1 << 40) -> Path:
    """A file of ``size`` bytes (default 1 TiB) that takes no disk: reading it whole would exhaust memory."""
    with open(path, "wb") as fh:
        fh.truncate(size)
    return path


def zero_link(path: Path) -> Path:
    path.symlink_to("/dev/zero")
    return path


@pytest.fixture(scope="module")
def locked(tmp_path_factory):
    """A locked tiny project with one receipt on disk (module-wide; tests copy it before changing it)."""
    tp = tiny_project(tmp_path_factory.mktemp("hostile"))
    lock = tp.lock(receipts=[("fast", "decode")])
    return tp, lock


@pytest.fixture
def proj(locked, tmp_path):
    tp, lock = locked
    return tp.copy_to(tmp_path / "p"), lock


def _receipt(tp) -> Path:
    [p] = sorted((tp.root / "receipts" / "tiny").glob("*.json"))
    return p


# ---------------------------------------------------------------------------
# the one bounded reader: type first, then size


@pytest.mark.parametrize("make, want", [
    (lambda p: os.mkfifo(p), FIFO),
    (zero_link, DEVICE),
    (lambda p: p.mkdir(), "is a directory, not a regular file"),
    (lambda p: sparse(p, (4 << 20) + 1), "is 4.0 MiB, over the 4.0 MiB limit"),
    (sparse, "is 1024.0 GiB, over the 4.0 MiB limit"),
])
def test_a_receipt_that_is_not_a_small_regular_file_is_refused_naming_why(tmp_path, make, want):
    p = tmp_path / "r.json"
    make(p)
    with pytest.raises(ReceiptInvalid) as e:
        bounded(lambda: read_bytes(p, ReceiptInvalid, "receipts/tiny/r.json"), p)
    assert str(e.value).startswith("receipts/tiny/r.json: ") and want in str(e.value)
    assert e.value.reasons[0]["file"] == "receipts/tiny/r.json"


def test_a_device_is_refused_even_with_a_limit_it_would_fit_under(tmp_path):
    """/dev/zero reports size 0: only its type tells it apart (a reader trusting the size takes ``limit`` zeros)."""
    with pytest.raises(UsageError, match="key.pem: " + DEVICE):
        read_bytes(zero_link(tmp_path / "key.pem"), UsageError, "key.pem", limit=1 << 30)


# ---------------------------------------------------------------------------
# frt lock and frt verify: receipts, lockfiles, key files, signatures


def test_lock_rejects_a_fifo_receipt_naming_it_and_locks_the_rest(proj):
    tp, _ = proj
    fifo = tp.root / "receipts" / "tiny" / "zz-pipe.json"
    os.mkfifo(fifo)
    rc, _, err = bounded(lambda: frt_main(["lock", "--project", str(tp.root), "--json"]), fifo)
    assert rc == 0, err
    lock = Lockfile.read(tp.lock_path)
    [rej] = lock.rejected
    assert rej["file"] == "receipts/tiny/zz-pipe.json" and FIFO in rej["reason"] and rej["digest"] == "unreadable"
    assert len(lock.receipts) == 1


@pytest.mark.parametrize("kind", ["fifo", "device", "sparse"])
def test_a_lockfile_that_is_a_special_or_huge_file_is_refused_never_read_or_replaced(proj, kind):
    tp, _ = proj
    lpath = tp.lock_path
    lpath.unlink()
    if kind == "fifo":
        os.mkfifo(lpath)
    elif kind == "device":
        zero_link(lpath)
    else:
        sparse(lpath)
    for argv in (["verify"], ["resolve", "--model", "tiny", "--phase", "decode"]):
        rc, _, err = bounded(lambda argv=argv: frt_main([*argv, "--project", str(tp.root)]), lpath)
        assert rc == 2 and "lockfiles/tiny.lock" in err, (argv, err)
        assert (FIFO if kind == "fifo" else DEVICE if kind == "device" else "over the 256.0 MiB limit") in err, err
    rc, _, err = bounded(lambda: frt_main(["lock", "--project", str(tp.root)]), lpath)
    if kind == "sparse":  # a regular file: replaced (write_atomic reads none of its terabyte)
        assert rc == 0 and lpath.stat().st_size < 1 << 20, err
        return
    assert rc == 2, err
    assert f"lockfiles/tiny.lock: cannot be written: {FIFO if kind == 'fifo' else DEVICE}" in err, err
    assert "hint: move " in err and "tiny.lock away (frt replaces only a regular file)" in err
    assert (lpath.is_fifo() if kind == "fifo" else lpath.is_symlink())  # left as it was
    assert [p.name for p in lpath.parent.iterdir()] == ["tiny.lock"]  # no temp file left


def test_write_atomic_refuses_a_fifo_or_device_and_never_reads_a_huge_old_file(tmp_path):
    fifo = tmp_path / "a.lock"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match=re.escape(FIFO)):
        bounded(lambda: write_atomic(fifo, b"new"), fifo)
    with pytest.raises(OSError, match=re.escape(DEVICE)):
        write_atomic(zero_link(tmp_path / "b.lock"), b"new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.lock", "b.lock"]  # nothing written, no temp file
    huge = sparse(tmp_path / "c.lock")  # reading it to compare would need a terabyte of memory
    assert write_atomic(huge, b"new") is True and huge.read_bytes() == b"new"
    assert write_atomic(huge, b"new") is False


def _policy(tp, pub_rel: str):
    import tomli_w

    doc = dict(tp.manifest)
    doc["trust"] = {"receipts": {"keys": [pub_rel]}}
    (tp.root / "manifests" / "tiny.toml").write_text(tomli_w.dumps(doc), "utf-8")


def _keypair(folder: Path):
    from test_receipt_signing import make_key

    return make_key(folder, "ci")


def test_a_policy_key_file_that_is_a_fifo_or_device_is_exit_2_naming_it(proj, tmp_path):
    tp, _ = proj
    (tp.root / "keys").mkdir()
    _policy(tp, "keys/ci.pub")
    pub = tp.root / "keys" / "ci.pub"
    os.mkfifo(pub)
    rc, _, err = bounded(lambda: frt_main(["lock", "--project", str(tp.root)]), pub)
    assert rc == 2 and f"keys/ci.pub: {FIFO}" in err, err
    pub.unlink()
    zero_link(pub)  # a link leaving the project is refused before its type matters
    rc, _, err = frt_main(["lock", "--project", str(tp.root)])
    assert rc == 2 and "key file keys/ci.pub leaves the project (a link to /dev/zero)" in err, err


@pytest.mark.parametrize("suffix", [".sig", ".sigstore"])
def test_a_signature_file_that_is_a_fifo_or_device_rejects_its_receipt_naming_why(proj, tmp_path, suffix):
    tp, _ = proj
    priv, pub = _keypair(tmp_path / "secrets")
    (tp.root / "keys").mkdir()
    (tp.root / "keys" / "ci.pub").write_bytes(pub.read_bytes())
    _policy(tp, "keys/ci.pub")
    rec = _receipt(tp)
    sig = Path(str(rec) + suffix)
    os.mkfifo(sig)
    # the receipt the current lock serves its cell with is rejected: the lock would lose that cell, so
    # `frt lock` refuses (exit 1, the lockfile as it was) naming the rejection; --allow-loss writes it
    before = tp.lock_path.read_bytes()
    rc, _, err = bounded(lambda: frt_main(["lock", "--project", str(tp.root)]), sig)
    assert rc == 1 and f"receipts/tiny/{rec.name}{suffix}: {FIFO}" in err, err
    assert tp.lock_path.read_bytes() == before
    rc, _, err = bounded(lambda: frt_main(["lock", "--project", str(tp.root), "--allow-loss"]), sig)
    assert rc == 0, err
    [rej] = Lockfile.read(tp.lock_path).rejected
    assert f"receipts/tiny/{rec.name}{suffix}: {FIFO}" in rej["reason"], rej
    sig.unlink()
    zero_link(sig)
    rc, _, err = frt_main(["lock", "--project", str(tp.root)])  # its only receipt rejected: refused, named
    assert rc == 1 and f"receipts/tiny/{rec.name}{suffix}: {DEVICE}" in err, err
    assert frt_main(["lock", "--project", str(tp.root), "--allow-loss"])[0] == 0
    [rej] = Lockfile.read(tp.lock_path).rejected
    assert f"receipts/tiny/{rec.name}{suffix}: {DEVICE}" in rej["reason"], rej


def test_frt_sign_refuses_a_key_or_receipt_that_is_a_fifo(proj, tmp_path):
    tp, _ = proj
    key = tmp_path / "key.pem"
    os.mkfifo(key)
    rc, _, err = bounded(lambda: frt_main(["sign", "--key", str(key), str(_receipt(tp))]), key)
    assert rc == 2 and FIFO in err and "key.pem" in err, err
    priv, _ = _keypair(tmp_path / "secrets")
    fifo = tp.root / "receipts" / "tiny" / "pipe.json"
    os.mkfifo(fifo)
    rc, _, err = bounded(lambda: frt_main(["sign", "--key", str(priv), str(fifo)]), fifo)
    assert rc == 2 and FIFO in err and "pipe.json" in err, err
    assert not Path(str(fifo) + ".sig").exists()


def test_sign_refuses_to_replace_a_sig_that_is_a_fifo(proj, tmp_path):
    tp, _ = proj
    priv, _ = _keypair(tmp_path / "secrets")
    rec = _receipt(tp)
    sig = Path(str(rec) + ".sig")
    os.mkfifo(sig)
    rc, _, err = bounded(lambda: frt_main(["sign", "--key", str(priv), str(rec)]), sig)
    assert rc == 2 and f"{rec.name}.sig: cannot be written: {FIFO}" in err, err
    assert "hint: nothing partial was left; move " in err and ".sig away (frt replaces only a regular file)" in err
    assert sig.is_fifo() and sorted(p.name for p in rec.parent.iterdir()) == sorted([rec.name, sig.name])


# ---------------------------------------------------------------------------
# a signature's statement naming its subject only by sha512


def test_a_subject_given_only_as_sha512_is_named_sha512_not_sha256_none():
    from frt_dist.provenance.signing import PREDICATE_TYPE, STATEMENT_TYPE, _statement_problem

    st = {"_type": STATEMENT_TYPE, "predicateType": PREDICATE_TYPE,
          "subject": [{"name": "r.json", "digest": {"sha512": "ab" * 64}}]}
    why = _statement_problem(json.dumps(st).encode(), "sha256:" + "cd" * 32)
    assert "over receipt digest sha512:abababababab," in why and "None" not in why, why
    st["subject"] = [{"name": "r.json", "digest": {}}]
    why = _statement_problem(json.dumps(st).encode(), "sha256:" + "cd" * 32)
    assert "a digest with no algorithm frt reads" in why and "None" not in why, why


# ---------------------------------------------------------------------------
# frt receipts push / pull (a file:// store: the same code as S3 for everything here)


def _store(tmp_path: Path):
    return open_store(f"file://{tmp_path / 'store'}")


def _put(tmp_path: Path, key: str, data: bytes) -> None:
    p = tmp_path / "store" / key
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)


def _deep(n: int = 100_000) -> bytes:
    return b'{"a":' * n + b"1" + b"}" * n


HOSTILE = {"deep": _deep(), "huge-int": b'{"schema": ' + b"9" * 5000 + b"}",
           "surrogate": b'{"schema": "\\ud800"}', "nan": b'{"schema": NaN}'}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_pull_and_push_refuse_a_hostile_store_object_without_a_traceback(proj, tmp_path, name):
    tp, _ = proj
    rec = _receipt(tp)
    hexd = digest(json.loads(rec.read_bytes())).split(":")[1]
    key = f"receipts/sha256/{hexd}.json"
    _put(tmp_path, key, HOSTILE[name])  # stands where the real receipt belongs
    _put(tmp_path, f"receipts/sha256/{'e' * 64}.json", HOSTILE[name])
    _put(tmp_path, key + ".sig", HOSTILE[name])
    url = f"file://{tmp_path / 'store'}"
    job = tp.copy_to(tmp_path / "job")
    for p in (job.root / "receipts" / "tiny").iterdir():
        p.unlink()
    rc, out, err = frt_main(["receipts", "pull", url, "--project", str(job.root), "--json"])
    assert rc == 0, err  # refused and named, and the pull (and a `pull && lock`) goes on
    refused = json.loads(out)["refused"]
    assert {r["key"] for r in refused} == {key, f"receipts/sha256/{'e' * 64}.json"}
    assert all("not valid JSON" in r["reason"] for r in refused), refused
    assert err.count("warning: refused: ") == 2
    assert not list((job.root / "receipts").rglob("*.json"))
    # push reads what the store holds through the same reader: the damaged object is replaced
    rc, out, err = frt_main(["receipts", "push", url, str(rec), "--project", str(tp.root), "--json"])
    assert rc == 0 and json.loads(out)["sent"] == [hexd], err
    rc, out, err = frt_main(["receipts", "pull", url, "--project", str(job.root), "--json", "--strict"])
    assert rc == 1 and json.loads(out)["exit"] == 1, out  # --strict: the other bad object (and the .sig) fail it
    assert "2 receipt(s) in" in json.loads(out)["error"] and f"{hexd}.json.sig: not a JSON object" in out


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_push_refuses_a_hostile_local_receipt_or_signature_as_bad_input(proj, tmp_path, name):
    tp, _ = proj
    rec = _receipt(tp)
    bad = tp.root / "receipts" / "tiny" / "zz-bad.json"
    bad.write_bytes(HOSTILE[name])
    url = f"file://{tmp_path / 'store'}"
    rc, _, err = frt_main(["receipts", "push", url, "--project", str(tp.root)])
    assert rc == 2 and "receipts/tiny/zz-bad.json: not valid JSON" in err, err
    bad.unlink()
    Path(str(rec) + ".sig").write_bytes(HOSTILE[name])
    rc, _, err = frt_main(["receipts", "push", url, "--project", str(tp.root)])
    assert rc == 2 and f"{rec.name}.sig: not a JSON object" in err, err
    assert not (tmp_path / "store").exists()  # nothing sent


@pytest.mark.parametrize("make, want", [(os.mkfifo, FIFO), (zero_link, DEVICE),
                                        (lambda p: sparse(p, 5 << 20), "over the 4.0 MiB limit")])
def test_push_refuses_a_receipt_or_signature_that_is_a_special_or_huge_file(proj, tmp_path, make, want):
    tp, _ = proj
    url = f"file://{tmp_path / 'store'}"
    bad = tp.root / "receipts" / "tiny" / "zz.json"
    make(bad)
    rc, _, err = bounded(lambda: frt_main(["receipts", "push", url, "--project", str(tp.root)]), bad)
    assert rc == 2 and "receipts/tiny/zz.json: " in err and want in err, err
    os.unlink(bad)
    sig = Path(str(_receipt(tp)) + ".sigstore")
    make(sig)
    rc, _, err = bounded(lambda: frt_main(["receipts", "push", url, "--project", str(tp.root)]), sig)
    if make is zero_link:  # a link beside a receipt is not a signature frt reads: skipped
        assert rc == 0, err
    else:
        assert rc == 2 and f"{sig.name}: " in err and want in err, err


@pytest.fixture
def pushed(proj, tmp_path):
    """The project's receipt (signed) in a file:// store, and an empty lock job."""
    tp, _ = proj
    priv, _ = _keypair(tmp_path / "secrets")
    rec = _receipt(tp)
    from frt_dist.provenance import signing

    signing.sign_receipt(rec, signing.load_private_key(priv))
    url = f"file://{tmp_path / 'store'}"
    assert frt_main(["receipts", "push", url, "--project", str(tp.root)])[0] == 0
    job = tp.copy_to(tmp_path / "job")
    for p in (job.root / "receipts" / "tiny").iterdir():
        p.unlink()
    hexd = digest(json.loads(rec.read_bytes())).split(":")[1]
    return job, url, rec, hexd


@pytest.mark.parametrize("make, want", [(os.mkfifo, FIFO), (zero_link, "is a symbolic link")])
def test_pull_refuses_a_destination_that_is_a_fifo_or_a_link_as_this_projects_problem(pushed, make, want):
    job, url, _, hexd = pushed
    dest = job.root / "receipts" / "tiny" / f"{hexd}.json"
    make(dest)
    rc, _, err = bounded(lambda: frt_main(["receipts", "pull", url, "--project", str(job.root)]), dest)
    assert rc == 1 and f"receipts/tiny/{hexd}.json: not written: " in err and want in err, err
    assert "hint: move the named file or link away" in err
    assert dest.is_fifo() if make is os.mkfifo else dest.is_symlink()  # not replaced, not written through
    assert not Path(str(dest) + ".sig").exists()


def test_pull_refuses_a_signature_destination_that_is_a_fifo(pushed):
    job, url, _, hexd = pushed
    sig = job.root / "receipts" / "tiny" / f"{hexd}.json.sig"
    os.mkfifo(sig)
    rc, _, err = bounded(lambda: frt_main(["receipts", "pull", url, "--project", str(job.root)]), sig)
    assert rc == 1 and f"receipts/tiny/{hexd}.json.sig: not written: {FIFO}" in err, err
    assert (job.root / "receipts" / "tiny" / f"{hexd}.json").is_file() and sig.is_fifo()


def test_pull_writes_nothing_through_a_linked_model_folder(pushed, tmp_path):
    job, url, _, hexd = pushed
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (job.root / "receipts" / "tiny").rmdir()
    (job.root / "receipts" / "tiny").symlink_to(elsewhere)
    rc, _, err = frt_main(["receipts", "pull", url, "--project", str(job.root)])
    assert rc == 1 and "receipts/tiny is a symbolic link (to " in err, err
    assert not list(elsewhere.iterdir())  # nothing written through the link


def test_pull_does_not_rewrite_a_receipt_present_under_another_name(pushed):
    job, url, rec, hexd = pushed
    mine = job.root / "receipts" / "tiny" / "my-name.json"
    mine.write_bytes(rec.read_bytes())
    rc, out, err = frt_main(["receipts", "pull", url, "--project", str(job.root), "--json"])
    assert rc == 0, err
    res = json.loads(out)
    assert res["written"] == [] and res["present"] == [hexd]
    assert res["signatures"] == ["receipts/tiny/my-name.json.sig"]  # its signature comes to it, by its name
    assert sorted(p.name for p in mine.parent.iterdir()) == ["my-name.json", "my-name.json.sig"]
    rc, out, _ = frt_main(["receipts", "pull", url, "--project", str(job.root), "--json"])
    assert rc == 0 and json.loads(out)["signatures"] == []  # the same bytes: nothing rewritten


def test_one_invalid_store_object_does_not_stop_pull_and_lock(pushed, tmp_path):
    job, url, _, hexd = pushed
    _put(tmp_path, f"receipts/sha256/{'f' * 64}.json", b"{}")  # someone's junk, forever in the store
    rc, _, err = frt_main(["receipts", "pull", url, "--project", str(job.root)])
    assert rc == 0 and "warning: refused: " in err and f"{'f' * 64}.json" in err, err
    rc, _, err = frt_main(["lock", "--project", str(job.root)])
    assert rc == 0, err
    assert f"sha256:{hexd}" in Lockfile.read(job.lock_path).receipts


def test_pull_library_refuses_a_store_object_over_the_size_limit(pushed, tmp_path):
    job, url, _, _ = pushed
    sparse(tmp_path / "store" / "receipts" / "sha256" / f"{'a' * 64}.json", 5 << 20)
    with _store(tmp_path) as store:
        res = pull_receipts(store, job.root / "receipts")
    [r] = res.refused
    assert r["key"].endswith(f"{'a' * 64}.json") and "larger than a receipt can be" in r["reason"]
