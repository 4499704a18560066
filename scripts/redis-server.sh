#!/usr/bin/env bash
# Start/stop a throwaway Redis on loopback, without Docker, using Debian's redis-server.
#
#   scripts/redis-server.sh start|stop|status [--port 6379] [--name NAME]
#
# Each instance (default name redis-PORT) keeps its working dir, pid file and log under
# ${ES_RAG_CACHE}/instances/NAME/ (ES_RAG_CACHE defaults to $HOME/.cache/es-rag, or to
# /var/lib/es-rag as root, matching scripts/search-server.sh). The append-only file is on
# (fsync every second, no RDB snapshots): Redis is the ingest queue, and a restart must not
# lose the tasks waiting in it.
#
# On success `start` and `status` print redis://127.0.0.1:PORT/0 as the last line of stdout;
# diagnostics go to stderr.
set -euo pipefail

PROG=$(basename "$0")

usage() {
    echo "usage: $PROG start|stop|status [--port 6379] [--name NAME]" >&2
}

die() {
    echo "$PROG: $*" >&2
    exit 1
}

log() { echo "$PROG: $*" >&2; }

[[ $# -ge 1 ]] || { usage; exit 2; }
CMD=$1
shift
case "$CMD" in
    start | stop | status) ;;
    -h | --help | help) usage; exit 0 ;;
    *) echo "$PROG: unknown command: $CMD" >&2; usage; exit 2 ;;
esac

PORT=6379
NAME=
need_val() { [[ $# -ge 2 && -n $2 ]] || { echo "$PROG: $1 needs a value" >&2; usage; exit 2; }; }
while [[ $# -gt 0 ]]; do
    case "$1" in
        --port) need_val "$@"; PORT=$2; shift 2 ;;
        --port=*) PORT=${1#*=}; shift ;;
        --name) need_val "$@"; NAME=$2; shift 2 ;;
        --name=*) NAME=${1#*=}; shift ;;
        -h | --help) usage; exit 0 ;;
        *) echo "$PROG: unknown option: $1" >&2; usage; exit 2 ;;
    esac
done

[[ $PORT =~ ^[0-9]+$ ]] && ((PORT > 0 && PORT < 65536)) || die "invalid --port: $PORT"
NAME=${NAME:-redis-$PORT}
[[ $NAME =~ ^[A-Za-z0-9][A-Za-z0-9._-]*$ ]] || die "invalid --name: $NAME (use letters, digits, . _ -)"

IS_ROOT=0
[[ $(id -u) -eq 0 ]] && IS_ROOT=1
if [[ -n ${ES_RAG_CACHE:-} ]]; then
    CACHE=$ES_RAG_CACHE
elif ((IS_ROOT)); then
    CACHE=/var/lib/es-rag
else
    CACHE=${HOME:?HOME is not set}/.cache/es-rag
fi
INST_DIR=$CACHE/instances/$NAME
PID_FILE=$INST_DIR/redis.pid
LOG_FILE=$INST_DIR/redis.log
URL=redis://127.0.0.1:$PORT/0

pid_alive() { [[ -n ${1:-} ]] && kill -0 "$1" 2>/dev/null; }

read_pid() {
    local pid=
    [[ -f $PID_FILE ]] && pid=$(tr -dc '0-9' <"$PID_FILE" 2>/dev/null || true)
    echo "$pid"
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

pong() { [[ $(redis-cli -h 127.0.0.1 -p "$PORT" ping 2>/dev/null) == PONG ]]; }

ensure_redis() {
    command -v redis-server >/dev/null && command -v redis-cli >/dev/null && return 0
    if ((IS_ROOT)) && command -v apt-get >/dev/null; then
        log "installing redis-server with apt-get"
        apt-get update -qq >&2 &&
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >&2 ||
            die "apt-get install redis-server failed"
    else
        die "redis-server/redis-cli not found; install them (Debian: apt-get install redis-server)"
    fi
}

redis_stop() {
    local pid i
    pid=$(read_pid)
    if ! pid_alive "$pid"; then
        rm -f "$PID_FILE"
        log "instance $NAME is not running"
        return 0
    fi
    log "stopping instance $NAME (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 300; i++)); do
        pid_alive "$pid" || break
        sleep 0.1
    done
    if pid_alive "$pid"; then
        log "pid $pid still alive after 30s, sending KILL"
        kill -KILL "$pid" 2>/dev/null || true
        sleep 0.5
    fi
    rm -f "$PID_FILE"
    log "stopped"
}

redis_fail() {
    echo "$PROG: $1" >&2
    if [[ -s $LOG_FILE ]]; then
        echo "---- tail of $LOG_FILE ----" >&2
        tail -n 30 "$LOG_FILE" >&2
    fi
    redis_stop >/dev/null 2>&1 || true
    exit 1
}

redis_start() {
    local pid i
    ensure_redis
    pid=$(read_pid)
    if pid_alive "$pid"; then
        if pong; then
            log "instance $NAME already running (pid $pid)"
            echo "$URL"
            return 0
        fi
        log "instance $NAME (pid $pid) is running but not answering on port $PORT yet; waiting"
    else
        [[ -n $pid ]] && rm -f "$PID_FILE"
        port_open "$PORT" &&
            die "port $PORT is already in use by another process (not instance $NAME); choose another --port"
        mkdir -p "$INST_DIR"
        : >"$LOG_FILE"
        log "starting redis-server as instance $NAME on 127.0.0.1:$PORT"
        redis-server --daemonize yes --bind 127.0.0.1 --port "$PORT" \
            --dir "$INST_DIR" --pidfile "$PID_FILE" --logfile "$LOG_FILE" \
            --save '' --appendonly yes --appendfsync everysec >&2 ||
            redis_fail "redis-server failed to start"
    fi
    for ((i = 0; i < 100; i++)); do
        pong && break
        sleep 0.1
    done
    pong || redis_fail "redis did not answer PING on port $PORT within 10s"
    log "instance $NAME is up (pid $(read_pid))"
    echo "$URL"
}

redis_status() {
    local pid
    pid=$(read_pid)
    if pid_alive "$pid" && pong; then
        log "instance $NAME running (pid $pid)"
        echo "$URL"
        return 0
    fi
    log "instance $NAME not running"
    return 1
}

case "$CMD" in
    start) redis_start ;;
    stop) redis_stop ;;
    status) redis_status ;;
esac
