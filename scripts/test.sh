#!/usr/bin/env bash
# Run the whole test suite: unit tests and integration tests against a real Elasticsearch
# (and Redis) that the test session starts on loopback ports and stops afterwards.
#
#   scripts/test.sh [pytest args]
#
# Installs what is missing first (scripts/setup.sh). To reuse a running server instead, set
# ES_RAG_ES_URL (and ES_RAG_REDIS_URL). With CI=true a missing server fails the run.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENV=$(bash "$ROOT/scripts/setup.sh" | tail -n 1)
cd "$ROOT"
exec "$VENV/bin/python" -m pytest "$@"
