"""Never a traceback on bad input: seeded random damage of real documents — the demo's
lockfile, manifest and receipts and a package's metadata.json — run through the readers and the
commands' entry points. Only documented ``FrtError``s may come out, and a failed command writes
nothing. Damage is done the way an attacker with write access would: on the parsed document, with
the lock-digest recomputed so that the damage reaches the readers behind the digest check, and on
the raw text (values JSON and TOML cannot otherwise carry: 5,000-digit integers, deep nesting,
lone surrogate escapes, NaN)."""

from __future__ import annotations

import copy
import json
import random
import shutil
import tomllib
from pathlib import Path

import pytest
import tomli_w

from frt_dist.base.canonical import digest
from frt_dist.documents.lockfile import Lockfile
from frt_dist.documents.manifest import Manifest
from frt_dist.documents.metadata import parse_variant_metadata
from frt_dist.documents.receipt import Receipt
from frt_dist.errors import FrtError
from helpers.frt import frt_main
from helpers.paths import BUNDLED

MODEL = "demo-decoder"
N = {"lockfile": 700, "manifest": 450, "receipt": 450, "metadata": 450}  # 2,050 documents in all

NAMES = ["..", "../x", "/abs", "a\\b", "a\x00b", "~", "%2e%2e", "\u0430dmin", "a\u202ebc", "x" * 300, "x" * 3000,
         "CON", "name\n", ".", "", " ", "a/b/c", "rtx-5090", "decode", "fused"]
# raw JSON text for values no Python object can round-trip through json.dumps
RAW = ["9" * 5000, "[" * 5000 + "]" * 5000, "{\"a\":" * 3000 + "1" + "}" * 3000, "\"\\ud800\"", "NaN", "-Infinity",
       "1e999", "\"\\u0000\""]


def _values(rng: random.Random):
    return [None, True, 0, -1, 2**63, 1.5, float("-0.0"), "", [], {}, [1, "a"], {"k": [None]},
            rng.choice(NAMES), {rng.choice(NAMES): 1}, [rng.choice(NAMES)] * 3]


def _mutate(doc, rng: random.Random, raw_slots: list):
    """One damage to a parsed document, in place; a raw-text value is left as a marker string."""
    nodes = [([], doc)]
    paths = []
    while nodes:  # every (container, key) pair
        path, node = nodes.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for k, v in items:
            paths.append((node, k))
            if isinstance(v, (dict, list)):
                nodes.append((path + [k], v))
    if not paths:
        return
    node, k = rng.choice(paths)
    op = rng.random()
    if op < 0.15 and isinstance(node, dict):
        del node[k]
    elif op < 0.25 and isinstance(node, dict):
        node[rng.choice(NAMES)] = node[k]  # a key renamed to a hostile name (the old one kept)
    elif op < 0.35:
        marker = f"@@RAW{len(raw_slots)}@@"
        raw_slots.append(rng.choice(RAW))
        node[k] = marker
    elif op < 0.55 and isinstance(node[k], str):
        node[k] = rng.choice(NAMES)
    else:
        node[k] = rng.choice(_values(rng))


def _json_text(doc, raw_slots) -> str:
    text = json.dumps(doc)
    for i, raw in enumerate(raw_slots):
        text = text.replace(json.dumps(f"@@RAW{i}@@"), raw)
    return text


def _run(argv, project: Path, monkeypatch) -> int:
    return frt_main(argv, cwd=project).code


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def demo(tmp_path, monkeypatch):
    root = tmp_path / "proj"
    for d in ("manifests", "lockfiles", "receipts", "packages"):
        shutil.copytree(BUNDLED / d, root / d)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return root


def _crash(kind, i, exc) -> str:
    import traceback

    frame = traceback.extract_tb(exc.__traceback__)[-1]
    return f"{kind} #{i}: {type(exc).__name__}: {str(exc)[:160]} (at {Path(frame.filename).name}:{frame.lineno})"


def _commands(i: int, argvs, demo: Path, monkeypatch, outcomes: dict, crashed: list) -> None:
    """Each command on damaged lockfile #i: its exit code counted (0, 1 or 2), a traceback recorded."""
    for argv in argvs:
        try:
            rc = _run(argv, demo, monkeypatch)
            outcomes[rc] = outcomes.get(rc, 0) + 1
            assert rc in (0, 1, 2), (argv, rc)
        except Exception as exc:  # the point of the tests
            crashed.append(_crash(f"frt {argv[0]}", i, exc))


@pytest.mark.slow
def test_damaged_lockfiles_give_documented_errors_only(demo, monkeypatch):
    rng = random.Random(11)
    lock_path = demo / "lockfiles" / f"{MODEL}.lock"
    pristine = lock_path.read_bytes()
    base = tomllib.loads(pristine.decode("utf-8"))
    # the JSON parts as objects, so damage reaches inside them
    for key in ("manifest", "index"):
        base[key] = json.loads(base[key])
    base["receipts"] = [json.loads(line.rstrip(",")) for line in base["receipts"].strip()[1:-1].strip().splitlines()]
    crashed, outcomes = [], {}
    for i in range(N["lockfile"]):
        doc = copy.deepcopy(base)
        raw_slots: list = []
        for _ in range(rng.randint(1, 3)):
            _mutate(doc, rng, raw_slots)
        try:  # the JSON parts back into strings, as frt writes them; the digest recomputed
            for key in ("manifest", "index"):
                doc[key] = _json_text(doc[key], raw_slots) if isinstance(doc.get(key), (dict, list)) else doc.get(key)
            if isinstance(doc.get("receipts"), list):
                doc["receipts"] = _json_text(doc["receipts"], raw_slots)
            doc = {k: v for k, v in doc.items() if v is not None}
            body = {k: v for k, v in doc.items() if k != "lock-digest"}
            if rng.random() < 0.9:
                doc["lock-digest"] = digest(body)
            text = tomli_w.dumps(doc)
        except (ValueError, TypeError, RecursionError, UnicodeEncodeError):
            text = pristine.decode("utf-8").replace("model = ", "model = 1 #", 1)  # a damage TOML can hold
        if rng.random() < 0.2:  # plus raw byte damage
            b = bytearray(text.encode("utf-8", "surrogatepass"))
            for _ in range(rng.randint(1, 8)):
                b[rng.randrange(len(b))] = rng.randrange(256)
            data = bytes(b)
        else:
            data = text.encode("utf-8", "surrogatepass")
        lock_path.write_bytes(data)
        before = _files(demo)
        try:
            Lockfile.read(lock_path)
        except FrtError:
            pass
        except Exception as exc:  # the point of the test
            crashed.append(_crash("Lockfile.read", i, exc))
        _commands(i, (["verify"], ["resolve", "--model", MODEL, "--arch", "x86_64", "--device-class", "amd-epyc",
                                   "--software", "torch=2.13,kernels=0.17"], ["matrix"]), demo, monkeypatch, outcomes, crashed)
        assert _files(demo) == before, f"lockfile #{i}: a command wrote something"
    print(f"\ndamaged lockfiles: {N['lockfile']} documents, command exit codes {outcomes}, {len(crashed)} tracebacks")
    assert crashed == [], f"{len(crashed)} tracebacks:\n" + "\n".join(crashed[:15])
    assert outcomes.get(2, 0) > 100 and outcomes.get(1, 0) > 100  # the damage reached both kinds of refusal


@pytest.mark.slow
def test_damaged_manifests_give_documented_errors_and_write_nothing(demo, monkeypatch):
    rng = random.Random(12)
    mpath = demo / "manifests" / f"{MODEL}.toml"
    base = tomllib.loads(mpath.read_text("utf-8"))
    crashed = []
    for i in range(N["manifest"]):
        doc = copy.deepcopy(base)
        raw_slots: list = []
        for _ in range(rng.randint(1, 3)):
            _mutate(doc, rng, raw_slots)
        try:
            text = tomli_w.dumps({k: v for k, v in doc.items() if v is not None})
        except (ValueError, TypeError, UnicodeEncodeError):
            continue
        for j, raw in enumerate(raw_slots):  # TOML cannot hold most raw JSON values: 5,000-digit integers can
            text = text.replace(json.dumps(f"@@RAW{j}@@"), raw if raw.isdigit() else json.dumps(raw))
        mpath.write_text(text, "utf-8", errors="surrogatepass")
        before = _files(demo)
        try:
            Manifest.read(mpath)
        except FrtError:
            pass
        except Exception as exc:
            crashed.append(_crash("Manifest.read", i, exc))
        try:
            rc = _run(["lock", "--model", MODEL], demo, monkeypatch)
            if rc != 0:
                assert _files(demo) == before, f"manifest #{i}: frt lock failed ({rc}) but wrote"
        except Exception as exc:
            crashed.append(_crash("frt lock", i, exc))
    assert crashed == [], f"{len(crashed)} tracebacks:\n" + "\n".join(crashed[:15])


@pytest.mark.slow
def test_damaged_receipts_never_stop_frt_lock(demo, monkeypatch):
    rng = random.Random(13)
    rdir = demo / "receipts" / MODEL
    sources = sorted(rdir.glob("*.json"))
    crashed = []
    for i in range(N["receipt"]):
        src = rng.choice(sources)
        doc = json.loads(src.read_text("utf-8"))
        raw_slots: list = []
        for _ in range(rng.randint(1, 3)):
            _mutate(doc, rng, raw_slots)
        target = rdir / "zz-fuzzed.json"
        target.write_text(_json_text(doc, raw_slots), "utf-8")
        try:
            Receipt.read(target)
        except FrtError:
            pass
        except Exception as exc:
            crashed.append(_crash("Receipt.read", i, exc))
        try:
            rc = _run(["lock", "--model", MODEL], demo, monkeypatch)
            assert rc == 0, f"receipt #{i}: an invalid receipt stopped frt lock (exit {rc})"
        except AssertionError:
            raise
        except Exception as exc:
            crashed.append(_crash("frt lock", i, exc))
    assert crashed == [], f"{len(crashed)} tracebacks:\n" + "\n".join(crashed[:15])


def test_damaged_metadata_json_gives_documented_errors_only():
    from frt_dist.errors import KernelUnavailable

    rng = random.Random(14)
    base = json.loads((BUNDLED / "packages" / "rmsnorm" / "build" / "torch-cpu" / "metadata.json").read_text("utf-8"))
    crashed, refused = [], 0
    for i in range(N["metadata"]):
        doc = copy.deepcopy(base)
        raw_slots: list = []
        for _ in range(rng.randint(1, 3)):
            _mutate(doc, rng, raw_slots)
        data = _json_text(doc, raw_slots).encode("utf-8")
        try:
            parse_variant_metadata(data, repo="frt-demo/rmsnorm", variant=rng.choice(["torch-cpu"] + NAMES))
        except KernelUnavailable:
            refused += 1
        except Exception as exc:
            crashed.append(_crash("parse_variant_metadata", i, exc))
    assert crashed == [], f"{len(crashed)} tracebacks:\n" + "\n".join(crashed[:15])
    assert refused > N["metadata"] // 2


@pytest.mark.slow
def test_damaged_lines_in_frts_own_layout_give_documented_errors_only(demo, monkeypatch):
    """The same damage, inside one line of the index, of ``nearest`` or of the receipts, written
    back in the layout ``frt lock`` writes (one JSON object per line in TOML literal strings, the
    lock-digest recomputed): the reader then finds cells and receipts by their line heads and
    decodes only the lines a decision reads, so the damage reaches that path, and listing
    (verify, the matrix) reads the rest. Only documented errors may come out."""
    from frt_dist.documents import lock_index as LI
    from frt_dist.documents import lockfile as L

    rng = random.Random(23)
    lock_path = demo / "lockfiles" / f"{MODEL}.lock"
    base = tomllib.loads(lock_path.read_text("utf-8"))
    base.pop("lock-digest")
    parts = {k: [json.loads(ln.rstrip(",")) for ln in base[k].split("\n")[1:-2]] for k in ("index", "nearest", "receipts")}
    crashed, outcomes, lazy = [], {}, 0
    for i in range(300):
        rows = copy.deepcopy(parts)
        raw_slots: list = []
        key = rng.choice(["index", "index", "nearest", "receipts"])
        for _ in range(rng.randint(1, 2)):
            _mutate(rng.choice(rows[key]), rng, raw_slots)
        doc = dict(base)
        try:
            for k, items in rows.items():
                if k == "receipts":  # the receipts' layout: the head's fields, then the receipt
                    lines = []
                    for r in items:
                        head = {f: r[f] for f in ("digest", "file", "route", "state") if f in r}
                        text = json.dumps(head)[:-1] + ', "receipt": ' + json.dumps(r.get("receipt"), sort_keys=True,
                                                                                 separators=(",", ":")) + "}"
                        lines.append(text)
                else:
                    lines = [json.dumps(r) for r in items]
                text = "[\n" + ",\n".join(lines) + "\n]\n"
                for j, raw in enumerate(raw_slots):
                    text = text.replace(json.dumps(f"@@RAW{j}@@"), raw)
                doc[k] = text
            data = L.render(doc, digest(doc))
        except (ValueError, TypeError, RecursionError, UnicodeEncodeError):
            continue
        lock_path.write_bytes(data)
        before = _files(demo)
        try:
            lock = Lockfile.read(lock_path)
            lazy += isinstance(lock.index, LI._FoundIndex) and isinstance(lock.receipts, LI._FoundReceipts)
        except FrtError:
            pass
        except Exception as exc:  # the point of the test
            crashed.append(_crash("Lockfile.read", i, exc))
        _commands(i, (["resolve", "--model", MODEL, "--arch", "x86_64", "--device-class", "amd-epyc",
                       "--software", "torch=2.13,kernels=0.17.2"],
                      ["resolve", "--model", MODEL, "--arch", "aarch64", "--device-class", "graviton",
                       "--software", "torch=2.13,kernels=0.17.2"], ["verify"], ["matrix"]),
                  demo, monkeypatch, outcomes, crashed)
        assert _files(demo) == before, f"lockfile #{i}: a command wrote something"
    print(f"\ndamaged lines: exit codes {outcomes}, {lazy} read by their heads, {len(crashed)} tracebacks")
    assert crashed == [], f"{len(crashed)} tracebacks:\n" + "\n".join(crashed[:15])
    assert lazy > 100 and outcomes.get(2, 0) > 50 and outcomes.get(1, 0) > 50 and outcomes.get(0, 0) > 50
