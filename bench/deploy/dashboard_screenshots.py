#!/usr/bin/env python3
"""Screenshots of the dashboard (`kiln report`) of a catalog, for docs/:
the whole page and each section's first chart, taken by headless Chromium
(Debian's `chromium`) through the DevTools protocol (tests/e2e/cdp.py).

  python3 bench/deploy/dashboard_screenshots.py --catalog h200.db --out docs/images/dashboard

A GPU node without Chromium: copy its catalog here (after `kiln run --device
gpu` on it) and run this. Prints a table of the charts drawn (id, series,
points) and writes full.png and one PNG per chart id to --out.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
import cdp  # noqa: E402

CHARTS_JS = """JSON.stringify([...document.querySelectorAll('svg.chart')].map(svg => {
  const r = svg.getBoundingClientRect();
  return {id: svg.dataset.chart, x: r.left + window.scrollX, y: r.top + window.scrollY, w: r.width, h: r.height,
          series: [...svg.querySelectorAll('g.series')].map(g => [g.dataset.name, +g.dataset.points])};
}))"""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--catalog", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--kiln", default=os.environ.get("KILN_BIN", str(ROOT / "build" / "kiln")))
    ap.add_argument("--batch")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="kiln-shots-"))
    report = work / "report.html"
    cmd = [a.kiln, "report", "--catalog", a.catalog, "--out", str(report)] + (["--batch", a.batch] if a.batch else [])
    subprocess.run(cmd, check=True)
    b = cdp.Browser(work / "chromium.log")
    try:
        errors = b.load(report.as_uri())
        charts = json.loads(b.evaluate(CHARTS_JS))
        height = b.evaluate("document.documentElement.scrollHeight")
        (out / "full.png").write_bytes(b.screenshot({"x": 0, "y": 0, "width": 1400, "height": min(height, 16000)}))
        first = {}
        for c in charts:
            section = c["id"].split("-")[0]
            first.setdefault(section, c)
        for section, c in first.items():
            (out / f"{section}.png").write_bytes(
                b.screenshot({"x": c["x"], "y": c["y"], "width": c["w"], "height": c["h"]}))
    finally:
        b.close()
    print(f"{'chart':<28} {'series':>6}  points per series")
    for c in charts:
        print(f"{c['id']:<28} {len(c['series']):>6}  " + ", ".join(f"{n}: {p}" for n, p in c["series"]))
    print(f"console errors: {len(errors)}" + (f" {errors}" if errors else ""))
    print(f"wrote {out}/full.png and {', '.join(s + '.png' for s in first)}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
