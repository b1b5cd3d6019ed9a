"""The real-data corpus end to end: 54 FlashRT packages on the test Hub, `frt lock` and `frt mirror`
timed with their Hub request counts, and the decision table (machine x precision x band) on the
lock compared with the `kernels`-built oracle (tests/helpers/realdata.py).

Run: .venv/bin/python bench/bench_realdata.py   (prints Markdown; needs no GPU and no network)
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from helpers import realdata as rd
from helpers.hubserver import HubServer

ACCEPTS = (("certified_fast",), ("certified_fast", "supported_correct"))
ACCEPT = ACCEPTS[1]  # the table's policy


def timed(c: rd.Corpus, args: list[str], hf_home: Path) -> str:
    c.server.reset_counts()
    t0 = time.perf_counter()
    p = rd.frt(args, c.env(hf_home))
    wall = time.perf_counter() - t0
    if p.returncode:
        return f"exit {p.returncode}: {(p.stderr.strip().splitlines() or [''])[-1]}"
    return f"{wall:.2f} s, {c.server.request_count()} Hub requests"


def cell(d: dict) -> str:
    if d["route"]:
        return f"{d['route']} [{d['state']}]"
    return "refused: " + "; ".join(sorted({r["reason"] for r in d["reasons"]
                                          if not r["reason"].startswith("route precision")}))[:160]


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp, HubServer() as server:
        tmp = Path(tmp)
        t0 = time.perf_counter()
        c = rd.build_corpus(tmp / "proj", server)
        print(f"# real-data corpus: {len(rd.packages())} packages, {len(rd.ROUTES)} routes, {len(c.specs)} receipts "
              f"({sum(not s.admitted for s in c.specs)} on a device their archs do not admit); built in "
              f"{time.perf_counter() - t0:.2f} s\n")
        proj = ["--project", str(c.root)]
        print(f"- `frt lock` (cold, {len(rd.packages())} packages): {timed(c, ['lock', '--model', rd.MODEL, *proj], tmp / 'hf1')}")
        from frt_dist.documents.lockfile import Lockfile

        rejected = {r["file"].rsplit("/", 1)[-1] for r in Lockfile.read(c.lock_path).rejected}
        want = {s.file for s in c.specs if not s.admitted}
        print(f"- receipts rejected at lock: {len(rejected)}; oracle (archs do not admit the device): {len(want)}; "
              f"same set: {rejected == want}")
        all_args = ["mirror", str(tmp / "mirror-all"), "--model", rd.MODEL, *proj, "--all-variants"]
        print(f"- `frt mirror --all-variants`: {timed(c, all_args, tmp / 'hf-all')}; "
              f"{len(rd.mirrored(tmp / 'mirror-all'))} variant(s)")
        for m in (rd.MACHINES[0], rd.MACHINES[-1]):
            args = ["mirror", str(tmp / f"mirror-{m.device_class}"), "--model", rd.MODEL, *proj, *m.flags()]
            print(f"- `frt mirror` for {m.name}: {timed(c, args, tmp / 'hf2')}")
            got, want = rd.mirrored(tmp / f"mirror-{m.device_class}"), rd.expected_mirror(m)
            print(f"  mirrored {len(got)} variant(s); kernels selects {len(want)}; equal: {got == want}")
        results = {acc: rd.agreement(c.root, c.specs, acc) for acc in ACCEPTS}
        rows = [f"| {m.name} ({m.arch}, {m.cpu}) | {prec} | "
                + " | ".join(cell(d) for d in doc.get("decisions", [])) + " |"
                for (m, prec), doc in results[ACCEPT].docs.items()]
        print("\n## decisions (accept certified_fast + supported_correct)\n")
        print("| machine | precision | " + " | ".join(rd.PHASES) + " |")
        print("|---|---|" + "---|" * len(rd.PHASES))
        print("\n".join(rows))
        print("\n(each band decided by `frt resolve --json` with the machine declared: --arch --device-class "
              "--backend --cpu --os --software)")
        for acc, r in results.items():
            print(f"oracle agreement, accept {','.join(acc)}: {r.agree}/{r.total} band decisions "
                  f"({100 * r.agree / r.total:.1f}%)")
            for d in r.diffs:
                print(f"- disagreement: {d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
