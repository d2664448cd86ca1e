"""Code objects without a GPU: cross-compiling for a target and the artifact
(targetcompile.py), resource reports (resources.py) read from the ELF (elf.py)
and AMD's MessagePack metadata (msgpack_lite.py), and the launches of generated
code captured and compiled (launches.py)."""
