#!/usr/bin/env python3
"""A small copy of a catalog for offline replays (bench/search/search_efficiency.py).

Keeps jobs, candidates and evaluations with their measured medians; drops the
code objects (blobs, artifacts, best) and cuts each evaluation's `result` JSON
down to what kiln-replay reads (the artifact's grid and shared memory, the
traffic). A GPU run's catalog is mostly code objects; the slim copy is small
enough to copy off a GPU node.

    python3 bench/search/slim_catalog.py CATALOG OUT.db [--keep-best]

--keep-best keeps the `best` and `artifacts` rows and empties the code
objects' bytes instead (`blobs.data` zero-length): `kiln best` and
bench/perf_table.py still read the copy, so the tables of docs/performance.md
can be regenerated from it off the GPU node; nothing in it can be packaged.
"""
from __future__ import annotations

import json
import shutil
import sqlite3
import sys


def slim(src: str, dst: str, keep_best: bool = False) -> None:
    con = sqlite3.connect(src)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    shutil.copyfile(src, dst)
    con = sqlite3.connect(dst)
    con.execute("PRAGMA foreign_keys = OFF")
    rows = con.execute("SELECT id, result FROM evaluations").fetchall()
    for eid, result in rows:
        try:
            r = json.loads(result)
        except (TypeError, ValueError):
            r = {}
        art = r.get("artifact") if isinstance(r, dict) else None
        keep = {"traffic": r.get("traffic")} if isinstance(r, dict) else {}
        if isinstance(art, dict):
            keep["artifact"] = {k: art[k] for k in ("grid", "shared_bytes", "registers", "spills") if k in art}
        con.execute("UPDATE evaluations SET result = ? WHERE id = ?", (json.dumps(keep), eid))
    if keep_best:
        con.execute("UPDATE blobs SET data = x''")
    else:
        for table in ("best", "artifacts", "blobs"):
            con.execute(f"DELETE FROM {table}")
    con.commit()
    con.execute("VACUUM")
    con.close()


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--keep-best"]
    if len(args) != 2:
        sys.exit(__doc__)
    slim(args[0], args[1], keep_best="--keep-best" in sys.argv[1:])
