#!/usr/bin/env bash
# Install everything es-rag needs on this machine, once; later runs only re-check.
#
#   scripts/setup.sh            prints the virtualenv's path as its last line
#
# - System packages (as root, with apt-get, only when missing): redis-server, unzip, maven.
# - A virtualenv at ${ES_RAG_VENV:-$HOME/.cache/es-rag/venv}, outside the checkout so that
#   every clone reuses it (torch alone is several GB). Dependencies are (re)installed when
#   pyproject.toml changes; the checkout itself is always re-installed in editable mode so
#   the venv points at the code you are running.
# - The Elasticsearch and OpenSearch integ-test distributions (OpenSearch with the k-NN
#   plugin installed), downloaded and unpacked into the cache; the test suite runs against both.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENV=${ES_RAG_VENV:-$HOME/.cache/es-rag/venv}
PYTHON=${PYTHON:-python3}
log() { echo "setup: $*" >&2; }

# ---------------------------------------------------------------- system packages
missing=()
command -v redis-server >/dev/null || missing+=(redis-server)
command -v unzip >/dev/null || missing+=(unzip)
command -v mvn >/dev/null || missing+=(maven)
if ((${#missing[@]})); then
    if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
        log "installing ${missing[*]} with apt-get"
        apt-get update -qq >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
    else
        log "missing: ${missing[*]}; install them with your package manager (or run as root)"
        exit 1
    fi
fi

JAVA_HOME_ES=${ES_JAVA_HOME:-/usr/lib/jvm/temurin-25-jdk-amd64}
if [[ ! -x $JAVA_HOME_ES/bin/java ]]; then
    log "warning: no Java 21+ at $JAVA_HOME_ES; set ES_JAVA_HOME to a JDK 21+ (Elasticsearch 9 needs it)"
fi
JAVA_HOME_OS=${OPENSEARCH_JAVA_HOME:-/usr/lib/jvm/temurin-25-jdk-amd64}
if [[ ! -x $JAVA_HOME_OS/bin/java ]]; then
    log "warning: no Java 21+ at $JAVA_HOME_OS; set OPENSEARCH_JAVA_HOME to a JDK 21+ (OpenSearch 3 needs it)"
fi

# ---------------------------------------------------------------- python environment
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' ||
    { log "Python 3.10+ is required ($PYTHON is $("$PYTHON" --version 2>&1))"; exit 1; }
if [[ ! -x $VENV/bin/python ]]; then
    log "creating virtualenv $VENV"
    mkdir -p "$(dirname "$VENV")"
    "$PYTHON" -m venv "$VENV"
fi
stamp=$VENV/.es-rag-deps
want=$(sha256sum "$ROOT/pyproject.toml" | cut -d' ' -f1)
if [[ ! -f $stamp || $(cat "$stamp") != "$want" ]]; then
    log "installing dependencies into $VENV (first time: several GB, a few minutes)"
    "$VENV/bin/pip" install -q --upgrade pip >&2
    "$VENV/bin/pip" install -q -e "${ROOT}[dev]" >&2
    echo "$want" >"$stamp"
else
    "$VENV/bin/pip" install -q --no-deps --no-build-isolation -e "$ROOT" >&2
fi

# ---------------------------------------------------------------- search server
# OpenSearch's fetch also installs the k-NN plugin, which needs OPENSEARCH_JAVA_HOME (JDK 21+).
for engine in elasticsearch opensearch; do
    bash "$ROOT/scripts/search-server.sh" fetch --engine "$engine" >&2
done

echo "$VENV"
