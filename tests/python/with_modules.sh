#!/usr/bin/env bash
# Runs a command with PYTHONPATH set, if PYTHON can import the modules; exit 77 (skip) if not.
#   with_modules.sh PYTHON MODULE[,MODULE...] PYTHONPATH COMMAND [ARGS...]
set -u
PYTHON=$1 MODULES=$2
export PYTHONPATH=$3
shift 3
if ! "$PYTHON" -c "import ${MODULES}" 2>/dev/null; then
  echo "skip: $PYTHON cannot import ${MODULES} (apt-get install python3-torch python3-numpy)"
  exit 77
fi
exec "$@"
