"""The packages the runtime's C++ tests read (a ctest fixture):
    python3 make_suite.py DIR
DIR/keys/{key.pem,key.pub,other.pem,other.pub}; DIR/full (MI300X, MI250X, RX7900,
H200; signed with keys/key.pem); DIR/mi300x (MI300X only, unsigned); DIR/bundle
(the three AMD targets in clang offload bundles). Written to DIR.tmp, then renamed.
"""
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_package as mp  # noqa: E402


def main(d):
    d = Path(d)
    tmp = Path(str(d) + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    mp.keygen(tmp / "keys")
    mp.keygen(tmp / "other")
    for f in ("key.pem", "key.pub"):
        shutil.move(str(tmp / "other" / f), str(tmp / "keys" / f.replace("key", "other")))
    shutil.rmtree(tmp / "other")
    mp.build(tmp / "full", ["MI300X", "MI250X", "RX7900", "H200"], sign=tmp / "keys" / "key.pem")
    mp.build(tmp / "mi300x", ["MI300X"])
    mp.build(tmp / "bundle", ["MI300X", "MI250X", "RX7900"], bundle=True)
    if d.exists():
        shutil.rmtree(d)
    tmp.rename(d)


if __name__ == "__main__":
    main(sys.argv[1])
