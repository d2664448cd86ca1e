#!/bin/sh
# Stands in for the Python interpreter the engine starts workers with
# (KILN_PYTHON): runs the scripted evaluator beside this file whatever the
# arguments (-m kiln_worker).
exec python3 "$(dirname "$0")/fake_worker.py"
