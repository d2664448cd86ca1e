#!/usr/bin/env python3
"""A small copy of a catalog for offline replays (bench/search/search_efficiency.py).

Keeps jobs, candidates and evaluations with their measured medians; drops the
code objects (blobs, artifacts, best) and cuts each evaluation's `result` JSON
down to what kiln-replay reads (the artifact's grid and shared memory, the
traffic). A GPU run's catalog is mostly code objects; the slim copy is small
enough to copy off a GPU node.

    python3 bench/search/slim_catalog.py CATALOG OUT.db
"""
from __future__ import annotations

import json
import shutil
import sqlite3
import sys


def slim(src: str, dst: str) -> None:
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
    for table in ("best", "artifacts", "blobs"):
        con.execute(f"DELETE FROM {table}")
    con.commit()
    con.execute("VACUUM")
    con.close()


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    slim(sys.argv[1], sys.argv[2])
