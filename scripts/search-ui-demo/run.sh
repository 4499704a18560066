#!/usr/bin/env bash
# Build and serve the Elastic Search UI demo page against an Elasticsearch-compatible
# endpoint (`es-rag serve`, or a plain Elasticsearch that allows the page's origin in CORS).
#
#   bash scripts/search-ui-demo/run.sh --url http://127.0.0.1:8080 --key KEY \
#       --index es-rag-quickstart [--port 8081] [--facet mime_type ...] [--disjunctive]
#
# --key may be empty (no Authorization header is sent); ES_API_KEY is used when --key is not
# given. The page is served on http://127.0.0.1:PORT (default 8081; `es-rag serve` defaults
# to 8080), and that exact origin must be allowed by the service:
#   ES_RAG_SERVE_CORS_ORIGINS=http://127.0.0.1:8081 es-rag serve
# The key is written to config.json (mode 600, git-ignored) and handed to the browser: use
# a read-only key scoped to what the page may show.
set -euo pipefail
DIR=$(cd "$(dirname "$0")" && pwd)

usage() { sed -n '5,6p' "$0" | sed 's/^# *//' >&2; }
URL= INDEX= PORT=8081 DISJUNCTIVE=0
KEY=${ES_API_KEY:-}
FACETS=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --url) URL=${2:?--url needs a value}; shift 2 ;;
        --key) [[ $# -ge 2 ]] || { echo "run.sh: --key needs a value (\"\" for none)" >&2; exit 2; }; KEY=$2; shift 2 ;;
        --index) INDEX=${2:?--index needs a value}; shift 2 ;;
        --port) PORT=${2:?--port needs a value}; shift 2 ;;
        --facet) FACETS+=("${2:?--facet needs a value}"); shift 2 ;;
        --disjunctive) DISJUNCTIVE=1; shift ;;
        -h | --help) usage; exit 0 ;;
        *) echo "run.sh: unknown option: $1" >&2; usage; exit 2 ;;
    esac
done
[[ -n $URL && -n $INDEX ]] || { echo "run.sh: --url and --index are required" >&2; usage; exit 2; }
command -v node >/dev/null || { echo "run.sh: node (>= 20) is required" >&2; exit 1; }

cd "$DIR"
# Install exactly what package-lock.json pins, when missing or older than the lock file.
if [[ ! -f node_modules/.package-lock.json || package-lock.json -nt node_modules/.package-lock.json ]]; then
    echo "run.sh: npm ci" >&2
    npm ci --no-audit --no-fund >&2
fi
node build.mjs >/dev/null

# Write the run-time config (read by the page from ./config.json); values go through the
# environment so that no quoting can break the JSON.
(
    umask 077
    FACETS_CSV=$(IFS=,; echo "${FACETS[*]-}") URL=$URL INDEX=$INDEX KEY=$KEY DISJ=$DISJUNCTIVE node -e '
      const e = process.env;
      const facets = e.FACETS_CSV ? e.FACETS_CSV.split(",") : undefined;
      const cfg = { url: e.URL, index: e.INDEX, apiKey: e.KEY, facets, disjunctiveFacets: e.DISJ === "1" ? facets ?? ["mime_type"] : [] };
      process.stdout.write(JSON.stringify(cfg, null, 2) + "\n");
    ' >config.json
)
echo "run.sh: serving the demo for $URL (index $INDEX); the service must allow the origin http://127.0.0.1:$PORT (ES_RAG_SERVE_CORS_ORIGINS). Ctrl-C stops it." >&2
exec node serve.mjs --port "$PORT" --config config.json
