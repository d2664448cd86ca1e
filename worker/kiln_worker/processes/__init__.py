"""Processes and the device: choosing the device and warming it up (device.py),
the GPU lock shared by the workers of one GPU (gpulock.py), the fork server
(forkserver.py), the interpreter worker's compile child (compile_child.py), and
a child's lifetime tied to its parent's (lifetime.py)."""
