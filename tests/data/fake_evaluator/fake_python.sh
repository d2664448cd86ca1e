#!/bin/sh
# Stands in for the Python interpreter the engine starts workers with
# (KILN_PYTHON): runs the scripted evaluator beside this file whatever the
# arguments (-m kiln_worker), except the fork server's: this stand-in cannot
# be one, and says so by exiting (the engine then starts each worker itself).
if [ "$1" = "-m" ] && [ "$2" = "kiln_worker.processes.forkserver" ]; then
  echo "fake_python.sh: not a fork server" >&2
  exit 2
fi
exec python3 "$(dirname "$0")/fake_worker.py"
