#!/usr/bin/env bash
# Start/stop a real single-node search server (Elasticsearch or OpenSearch) on loopback,
# without Docker.
#
#   scripts/search-server.sh start|stop|status|url|fetch [options]
#
# fetch downloads and unpacks the distribution only (used by scripts/setup.sh); for
# OpenSearch it also installs the k-NN plugin into the unpacked tree.
#
# Options (accepted by every command):
#   --engine elasticsearch     elasticsearch or opensearch
#   --port 9200                HTTP port (bound to 127.0.0.1 only)
#   --transport-port N         transport port (default: PORT+100)
#   --version V                engine version (default: 9.2.8 for elasticsearch,
#                              3.5.0 for opensearch)
#   --heap 1g                  JVM heap (-Xms/-Xmx), e.g. 512m, 1g
#   --name NAME                instance name (default: es-PORT for elasticsearch, os-PORT
#                              for opensearch); each instance has its own config, data,
#                              logs and pid file
#   --fresh                    (start) wipe the instance data dir before starting
#   --cluster NAME             cluster name (default: the instance name)
#   --seed-hosts H:P,...       form a cluster with the nodes at these transport addresses
#                              (instead of a single-node cluster)
#   --initial-masters N,...    instance names that bootstrap the cluster (first start)
#   --roles R,...              node roles, e.g. master,data or data (OpenSearch: master is
#                              written cluster_manager)
#
# A two-node cluster on loopback:
#   search-server.sh start --port 9290 --name two-a --cluster two --roles master,data \
#       --seed-hosts 127.0.0.1:9390,127.0.0.1:9391 --initial-masters two-a
#   search-server.sh start --port 9291 --name two-b --cluster two --roles data \
#       --seed-hosts 127.0.0.1:9390,127.0.0.1:9391
#
# Distributions (downloaded with `mvn dependency:get` into ~/.m2 when missing):
#   elasticsearch  org.elasticsearch.distribution.integ-test-zip:elasticsearch:VERSION:zip
#   opensearch     org.opensearch.distribution.integ-test-zip:opensearch:VERSION:zip, plus the
#                  k-NN plugin org.opensearch.plugin:opensearch-knn:VERSION.0:zip, installed
#                  into the unpacked tree before it is published
#
# Environment:
#   ES_RAG_CACHE               cache root (default: $HOME/.cache/es-rag, or /var/lib/es-rag as root)
#   ES_JAVA_HOME               JDK for Elasticsearch (default: /usr/lib/jvm/temurin-25-jdk-amd64)
#   OPENSEARCH_JAVA_HOME       JDK for OpenSearch (default: /usr/lib/jvm/temurin-25-jdk-amd64)
#   ES_JAVA_OPTS, OPENSEARCH_JAVA_OPTS
#                              extra JVM options, appended after the heap options
#   ES_RAG_START_TIMEOUT       seconds to wait for yellow health (default: 120)
#
# Layout under the cache root:
#   servers/ENGINE-VERSION/             unpacked distribution, shared, never written to by servers
#   instances/NAME/{config,data,logs,tmp,NAME.pid}
#
# Running as root: neither engine runs as root, so the server runs as the system user
# "esrag" (created once). Because /root is mode 0700 and esrag cannot traverse it, the
# default cache root for root is /var/lib/es-rag (not /root/.cache/es-rag). If ES_RAG_CACHE is
# set explicitly to a path esrag cannot reach, the script adds o+x to the blocking parent
# directories (with a warning). The distribution tree stays root-owned and world-readable;
# only the instance directory is chowned to esrag.
#
# On success `start`, `status` and `url` print the URL (http://127.0.0.1:PORT) as the last
# line of stdout; all diagnostics go to stderr.
set -euo pipefail

PROG=$(basename "$0")
RUN_USER=esrag
DEFAULT_JAVA_HOME=/usr/lib/jvm/temurin-25-jdk-amd64

usage() {
    cat >&2 <<EOF
usage: $PROG start|stop|status|url|fetch [--engine elasticsearch|opensearch] [--port 9200]
                                   [--version V] [--heap 1g] [--name NAME]
                                   [--transport-port N] [--fresh] [--cluster NAME]
                                   [--seed-hosts H:P,...] [--initial-masters N,...]
                                   [--roles R,...]
EOF
}

die() {
    echo "$PROG: $*" >&2
    exit 1
}

log() { echo "$PROG: $*" >&2; }

# ---------------------------------------------------------------- arguments
[[ $# -ge 1 ]] || { usage; exit 2; }
CMD=$1
shift
case "$CMD" in
    start | stop | status | url | fetch) ;;
    -h | --help | help) usage; exit 0 ;;
    *) echo "$PROG: unknown command: $CMD" >&2; usage; exit 2 ;;
esac

ENGINE=elasticsearch
PORT=9200
VERSION=
HEAP=1g
NAME=
TRANSPORT_PORT=
FRESH=0
CLUSTER=
SEED_HOSTS=
INITIAL_MASTERS=
ROLES=

need_val() { [[ $# -ge 2 && -n $2 ]] || { echo "$PROG: $1 needs a value" >&2; usage; exit 2; }; }
while [[ $# -gt 0 ]]; do
    case "$1" in
        --engine) need_val "$@"; ENGINE=$2; shift 2 ;;
        --engine=*) ENGINE=${1#*=}; shift ;;
        --port) need_val "$@"; PORT=$2; shift 2 ;;
        --port=*) PORT=${1#*=}; shift ;;
        --transport-port) need_val "$@"; TRANSPORT_PORT=$2; shift 2 ;;
        --transport-port=*) TRANSPORT_PORT=${1#*=}; shift ;;
        --version) need_val "$@"; VERSION=$2; shift 2 ;;
        --version=*) VERSION=${1#*=}; shift ;;
        --heap) need_val "$@"; HEAP=$2; shift 2 ;;
        --heap=*) HEAP=${1#*=}; shift ;;
        --name) need_val "$@"; NAME=$2; shift 2 ;;
        --name=*) NAME=${1#*=}; shift ;;
        --fresh) FRESH=1; shift ;;
        --cluster) need_val "$@"; CLUSTER=$2; shift 2 ;;
        --seed-hosts) need_val "$@"; SEED_HOSTS=$2; shift 2 ;;
        --initial-masters) need_val "$@"; INITIAL_MASTERS=$2; shift 2 ;;
        --roles) need_val "$@"; ROLES=$2; shift 2 ;;
        -h | --help) usage; exit 0 ;;
        *) echo "$PROG: unknown option: $1" >&2; usage; exit 2 ;;
    esac
done

# Per-engine knobs. ENV_PREFIX names the launcher's environment variables:
# ${ENV_PREFIX}_JAVA_HOME, _JAVA_OPTS, _PATH_CONF and _TMPDIR.
case "$ENGINE" in
    elasticsearch)
        DEFAULT_VERSION=9.2.8
        NAME_PREFIX=es
        ENV_PREFIX=ES
        ;;
    opensearch)
        DEFAULT_VERSION=3.5.0
        NAME_PREFIX=os
        ENV_PREFIX=OPENSEARCH
        ;;
    *)
        echo "$PROG: unknown engine: $ENGINE (supported: elasticsearch, opensearch)" >&2
        exit 2
        ;;
esac
VERSION=${VERSION:-$DEFAULT_VERSION}

if ! [[ $PORT =~ ^[0-9]+$ ]] || ((PORT <= 0 || PORT >= 65536)); then
    die "invalid --port: $PORT"
fi
TRANSPORT_PORT=${TRANSPORT_PORT:-$((PORT + 100))}
if ! [[ $TRANSPORT_PORT =~ ^[0-9]+$ ]] || ((TRANSPORT_PORT <= 0 || TRANSPORT_PORT >= 65536)); then
    die "invalid --transport-port: $TRANSPORT_PORT"
fi
[[ $HEAP =~ ^[0-9]+[kKmMgG]$ ]] || die "invalid --heap: $HEAP (expected e.g. 512m or 1g)"
[[ $VERSION =~ ^[0-9A-Za-z._-]+$ ]] || die "invalid --version: $VERSION"
NAME=${NAME:-$NAME_PREFIX-$PORT}
[[ $NAME =~ ^[A-Za-z0-9][A-Za-z0-9._-]*$ ]] || die "invalid --name: $NAME (use letters, digits, . _ -)"
CLUSTER=${CLUSTER:-$NAME}
[[ $CLUSTER =~ ^[A-Za-z0-9][A-Za-z0-9._-]*$ ]] || die "invalid --cluster: $CLUSTER"
[[ -z $SEED_HOSTS || $SEED_HOSTS =~ ^[0-9A-Za-z.:,_-]+$ ]] || die "invalid --seed-hosts: $SEED_HOSTS"
[[ -z $INITIAL_MASTERS || $INITIAL_MASTERS =~ ^[A-Za-z0-9._,-]+$ ]] || die "invalid --initial-masters"
[[ -z $ROLES || $ROLES =~ ^[a-z_,]+$ ]] || die "invalid --roles: $ROLES"

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
PID_FILE=$INST_DIR/$NAME.pid
URL=http://127.0.0.1:$PORT
START_TIMEOUT=${ES_RAG_START_TIMEOUT:-120}
M2_REPO=$HOME/.m2/repository

# ---------------------------------------------------------------- helpers
pid_alive() { [[ -n ${1:-} ]] && kill -0 "$1" 2>/dev/null; }

read_pid() {
    local pid=
    [[ -f $PID_FILE ]] && pid=$(tr -dc '0-9' <"$PID_FILE" 2>/dev/null || true)
    echo "$pid"
}

# Is something accepting TCP connections on 127.0.0.1:$1?
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Run a command as the unprivileged server user (as root) or as ourselves.
run_as_server_user() {
    if ((IS_ROOT)); then
        setpriv --reuid="$RUN_USER" --regid="$RUN_USER" --init-groups -- "$@"
    else
        "$@"
    fi
}

ensure_server_user() {
    ((IS_ROOT)) || return 0
    if ! getent passwd "$RUN_USER" >/dev/null; then
        log "creating system user $RUN_USER"
        useradd --system --no-create-home --home-dir /nonexistent \
            --shell /usr/sbin/nologin --user-group "$RUN_USER" ||
            die "could not create system user $RUN_USER"
    fi
    command -v setpriv >/dev/null || die "setpriv not found (install util-linux)"
}

# As root: make sure $RUN_USER can traverse every parent of $1 (adds o+x where needed).
ensure_traversable() {
    ((IS_ROOT)) || return 0
    local dir
    dir=$(cd "$1" && pwd -P)
    local parts=() d=$dir
    while [[ $d != / ]]; do
        parts=("$d" "${parts[@]}")
        d=$(dirname "$d")
    done
    for d in "${parts[@]}"; do
        if ! setpriv --reuid="$RUN_USER" --regid="$RUN_USER" --init-groups -- test -x "$d"; then
            log "warning: adding o+x to $d so user $RUN_USER can reach $dir"
            chmod o+x "$d"
        fi
    done
}

health_json() {
    curl -sS --max-time "${2:-5}" \
        "$URL/_cluster/health?wait_for_status=yellow&timeout=${1:-1s}" 2>/dev/null
}

# 0 if the server on $PORT answers yellow/green health for cluster $NAME.
is_healthy() {
    local json
    json=$(health_json 1s 5) || return 1
    [[ $json == *"\"cluster_name\":\"$CLUSTER\""* ]] || return 1
    [[ $json == *'"status":"green"'* || $json == *'"status":"yellow"'* ]]
}

# JDK for the engine: ES_JAVA_HOME or OPENSEARCH_JAVA_HOME, else DEFAULT_JAVA_HOME.
java_home() {
    local var=${ENV_PREFIX}_JAVA_HOME home
    home=${!var:-$DEFAULT_JAVA_HOME}
    [[ -x $home/bin/java ]] ||
        die "no java at $home/bin/java; set $var to a JDK 21+ (e.g. temurin-25)"
    echo "$home"
}

# ---------------------------------------------------------------- distribution
srv_home() { echo "$CACHE/servers/$ENGINE-$VERSION"; }

srv_zip() {
    case "$ENGINE" in
        elasticsearch)
            echo "$M2_REPO/org/elasticsearch/distribution/integ-test-zip/elasticsearch/$VERSION/elasticsearch-$VERSION.zip"
            ;;
        opensearch)
            echo "$M2_REPO/org/opensearch/distribution/integ-test-zip/opensearch/$VERSION/opensearch-$VERSION.zip"
            ;;
    esac
}

srv_artifact() {
    case "$ENGINE" in
        elasticsearch) echo "org.elasticsearch.distribution.integ-test-zip:elasticsearch:$VERSION:zip" ;;
        opensearch) echo "org.opensearch.distribution.integ-test-zip:opensearch:$VERSION:zip" ;;
    esac
}

# OpenSearch plugins are versioned SERVER_VERSION.0 (3.5.0 -> 3.5.0.0).
knn_version() { echo "$VERSION.0"; }
knn_zip() { echo "$M2_REPO/org/opensearch/plugin/opensearch-knn/$(knn_version)/opensearch-knn-$(knn_version).zip"; }
knn_artifact() { echo "org.opensearch.plugin:opensearch-knn:$(knn_version):zip"; }

# 0 if $1 is a complete unpacked tree for $ENGINE (for OpenSearch: k-NN plugin installed).
srv_complete() {
    [[ -x $1/bin/$ENGINE ]] || return 1
    [[ $ENGINE != opensearch ]] || [[ -d $1/plugins/opensearch-knn ]]
}

# mvn_fetch ARTIFACT FILE LABEL: download ARTIFACT with Maven unless FILE already exists.
mvn_fetch() {
    local artifact=$1 file=$2 label=$3
    [[ -f $file ]] && return 0
    if ! command -v mvn >/dev/null; then
        if ((IS_ROOT)) && command -v apt-get >/dev/null; then
            log "installing maven with apt-get"
            { apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq maven >&2; } ||
                die "apt-get install maven failed"
        else
            die "mvn not found; install Maven or place the zip at $file"
        fi
    fi
    log "downloading $label from Maven Central"
    # maven.repo.local: mvn derives ~ from the passwd entry, not $HOME; download to where we look.
    mvn -q -B dependency:get "-Dmaven.repo.local=$M2_REPO" "-Dartifact=$artifact" -Dtransitive=false >&2 ||
        die "mvn dependency:get failed for $artifact"
    [[ -f $file ]] || die "download finished but $file is missing"
}

srv_download() {
    mvn_fetch "$(srv_artifact)" "$(srv_zip)" "$ENGINE $VERSION (integ-test-zip)"
    if [[ $ENGINE == opensearch ]]; then
        mvn_fetch "$(knn_artifact)" "$(knn_zip)" "opensearch-knn $(knn_version) plugin"
    fi
}

# Install the k-NN plugin into the (not yet published) OpenSearch tree $1 with JDK $2, as
# ourselves (the tree stays owned by the invoking user, world-readable).
os_install_knn() {
    local tree=$1 java=$2 zip
    zip=$(knn_zip)
    log "installing opensearch-knn $(knn_version) into the unpacked tree"
    env OPENSEARCH_JAVA_HOME="$java" OPENSEARCH_PATH_CONF="$tree/config" \
        "$tree/bin/opensearch-plugin" install --batch "file://$zip" </dev/null >&2 ||
        return 1
    [[ -d $tree/plugins/opensearch-knn ]]
}

srv_unpack() {
    local home zip tmp tree java=
    home=$(srv_home)
    srv_complete "$home" && return 0
    if [[ $ENGINE == opensearch ]]; then
        java=$(java_home) # bin/opensearch-plugin needs a JDK 21+ too
    fi
    srv_download
    zip=$(srv_zip)
    command -v unzip >/dev/null || die "unzip not found (apt-get install unzip)"
    mkdir -p "$CACHE/servers"
    # Serialize concurrent unpacks; unpack into a temp dir on the same filesystem and
    # rename atomically, so a half-unpacked tree is never picked up.
    exec 8>"$CACHE/servers/.unpack.lock"
    flock 8
    if ! srv_complete "$home"; then
        log "unpacking $(basename "$zip") into $home"
        tmp=$(mktemp -d "$CACHE/servers/.unpack.XXXXXX")
        tree=$tmp/$ENGINE-$VERSION
        if ! unzip -q "$zip" -d "$tmp"; then
            rm -rf "$tmp"
            die "failed to unzip $zip"
        fi
        [[ -x $tree/bin/$ENGINE ]] || {
            rm -rf "$tmp"
            die "unexpected zip layout in $zip (no $ENGINE-$VERSION/bin/$ENGINE)"
        }
        if [[ $ENGINE == opensearch ]] && ! os_install_knn "$tree" "$java"; then
            rm -rf "$tmp"
            die "installing the k-NN plugin ($(knn_zip)) failed"
        fi
        chmod -R a+rX "$tree"
        rm -rf "$home" # leftover that is not complete = broken tree
        mv -T "$tree" "$home"
        rm -rf "$tmp"
    fi
    flock -u 8
    exec 8>&-
}

# ---------------------------------------------------------------- server
srv_stop() {
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
        for ((i = 0; i < 50; i++)); do
            pid_alive "$pid" || break
            sleep 0.1
        done
    fi
    rm -f "$PID_FILE"
    log "stopped"
}

srv_fail() {
    local msg=$1 logf
    echo "$PROG: $msg" >&2
    for logf in "$INST_DIR/logs/startup.out" "$INST_DIR/logs/$NAME.log"; do
        if [[ -s $logf ]]; then
            echo "---- tail of $logf ----" >&2
            tail -n 40 "$logf" >&2
        fi
    done
    srv_stop >/dev/null 2>&1 || true
    exit 1
}

# Engine-specific -E settings for the unpacked tree $1, one per line. A setting is only
# accepted when the module/plugin registering it ships in the tree, otherwise the node dies
# with "unknown setting".
engine_settings() {
    local home=$1
    case "$ENGINE" in
        elasticsearch)
            # Verified on the 9.2.8 integ-test-zip (modules: apm, transport-netty4,
            # x-pack-core, x-pack-security): xpack.ml.enabled is registered by x-pack-core
            # (accepted, a no-op there), while ingest.geoip.downloader.enabled is rejected
            # (no ingest-geoip module).
            [[ -d $home/modules/x-pack-security ]] && echo -Expack.security.enabled=false
            [[ -d $home/modules/x-pack-core ]] && echo -Expack.ml.enabled=false
            [[ -d $home/modules/ingest-geoip ]] && echo -Eingest.geoip.downloader.enabled=false
            ;;
        opensearch)
            # The integ-test-zip has no security plugin (plain HTTP already); a full
            # distribution would need it disabled. OpenSearch's ingest-geoip has no downloader.
            [[ -d $home/plugins/opensearch-security ]] && echo -Eplugins.security.disabled=true
            ;;
    esac
    return 0
}

# Discovery and roles: a single-node cluster, or a node of a cluster (--seed-hosts).
cluster_settings() {
    local masters_key=cluster.initial_master_nodes roles=$ROLES
    if [[ $ENGINE == opensearch ]]; then
        masters_key=cluster.initial_cluster_manager_nodes
        roles=${roles//master/cluster_manager}
    fi
    if [[ -n $SEED_HOSTS ]]; then
        echo "-Ediscovery.seed_hosts=$SEED_HOSTS"
        [[ -n $INITIAL_MASTERS ]] && echo "-E$masters_key=$INITIAL_MASTERS"
    else
        echo "-Ediscovery.type=single-node"
    fi
    [[ -n $roles ]] && echo "-Enode.roles=$roles"
    return 0
}

srv_start() {
    local pid home java heap_opts opts_var extra=() cluster=() start_rc waited other
    # An instance dir belongs to one engine (its data is not readable by the other); check
    # before anything else, so a running instance of the other engine is left alone.
    for other in elasticsearch opensearch; do
        if [[ $other != "$ENGINE" && -f $INST_DIR/config/$other.yml ]]; then
            die "instance $NAME was created for $other; choose another --name or remove $INST_DIR"
        fi
    done
    pid=$(read_pid)
    if ((FRESH)) && pid_alive "$pid"; then
        log "instance $NAME is running; restarting it with empty data (--fresh)"
        srv_stop
        pid=
    fi
    if pid_alive "$pid"; then
        if is_healthy; then
            log "instance $NAME already running (pid $pid)"
            echo "$URL"
            return 0
        fi
        log "instance $NAME (pid $pid) is running but not healthy on $URL yet; waiting"
    else
        [[ -n $pid ]] && rm -f "$PID_FILE"
        if port_open "$PORT"; then
            die "port $PORT is already in use by another process (not instance $NAME); choose another --port"
        fi
        if port_open "$TRANSPORT_PORT"; then
            die "transport port $TRANSPORT_PORT is in use; pass --transport-port"
        fi
    fi

    if ! pid_alive "$(read_pid)"; then
        java=$(java_home)
        command -v curl >/dev/null || die "curl not found"

        srv_unpack
        home=$(srv_home)
        ensure_server_user

        mkdir -p "$CACHE/instances"
        ((FRESH)) && { log "wiping $INST_DIR/data (--fresh)"; rm -rf "$INST_DIR/data"; }
        mkdir -p "$INST_DIR/data" "$INST_DIR/logs" "$INST_DIR/tmp"
        # Per-instance config dir: the node writes its keystore there, so instances must
        # not share it.
        if [[ ! -f $INST_DIR/config/$ENGINE.yml ]]; then
            rm -rf "$INST_DIR/config"
            cp -R "$home/config" "$INST_DIR/config"
        fi
        if [[ $ENGINE == opensearch ]]; then
            # bin/opensearch runs from OPENSEARCH_HOME (the shared, read-only tree), and the
            # stock jvm.options writes gc.log, hs_err and heap dumps to paths relative to it.
            # Point them at this instance (regenerated each start, so it follows the tree).
            sed -e "s|file=logs/|file=$INST_DIR/logs/|" \
                -e "s|-Xloggc:logs/|-Xloggc:$INST_DIR/logs/|" \
                -e "s|-XX:ErrorFile=logs/|-XX:ErrorFile=$INST_DIR/logs/|" \
                -e "s|-XX:HeapDumpPath=data\$|-XX:HeapDumpPath=$INST_DIR/data|" \
                "$home/config/jvm.options" >"$INST_DIR/config/jvm.options"
        fi
        rm -f "$INST_DIR/logs/startup.out"
        if ((IS_ROOT)); then
            chown -R "$RUN_USER:$RUN_USER" "$INST_DIR"
            ensure_traversable "$home"
            ensure_traversable "$INST_DIR"
        fi

        mapfile -t extra < <(engine_settings "$home")
        mapfile -t cluster < <(cluster_settings)

        heap_opts="-Xms$HEAP -Xmx$HEAP"
        opts_var=${ENV_PREFIX}_JAVA_OPTS
        log "starting $ENGINE $VERSION as instance $NAME on $URL (heap $HEAP)"
        start_rc=0
        (
            cd "$INST_DIR"
            # Lucene wants many fds; raise the soft limit where the hard limit allows it.
            ulimit -n 65535 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
            run_as_server_user env \
                HOME="$INST_DIR" \
                "${ENV_PREFIX}_JAVA_HOME=$java" \
                "${ENV_PREFIX}_JAVA_OPTS=$heap_opts ${!opts_var:-}" \
                "${ENV_PREFIX}_PATH_CONF=$INST_DIR/config" \
                "${ENV_PREFIX}_TMPDIR=$INST_DIR/tmp" \
                "$home/bin/$ENGINE" -d -p "$PID_FILE" \
                -Ecluster.name="$CLUSTER" \
                -Enode.name="$NAME" \
                "${cluster[@]}" \
                -Enetwork.host=127.0.0.1 \
                -Ehttp.port="$PORT" \
                -Etransport.port="$TRANSPORT_PORT" \
                -Epath.data="$INST_DIR/data" \
                -Epath.logs="$INST_DIR/logs" \
                -Ecluster.routing.allocation.disk.threshold_enabled=false \
                -Eaction.destructive_requires_name=false \
                "${extra[@]}" \
                </dev/null >"$INST_DIR/logs/startup.out" 2>&1
        ) || start_rc=$?
        ((start_rc == 0)) || srv_fail "bin/$ENGINE exited with status $start_rc"
    fi

    waited=0
    while ((waited < START_TIMEOUT)); do
        is_healthy && break
        pid=$(read_pid)
        if [[ -n $pid ]] && ! pid_alive "$pid"; then
            srv_fail "$ENGINE (pid $pid) died during startup"
        fi
        sleep 1
        waited=$((waited + 1))
    done
    is_healthy || srv_fail "$ENGINE did not reach yellow health on $URL within ${START_TIMEOUT}s"
    log "instance $NAME is up (pid $(read_pid))"
    echo "$URL"
}

srv_status() {
    local pid
    pid=$(read_pid)
    if pid_alive "$pid" && is_healthy; then
        log "instance $NAME running (pid $pid)"
        echo "$URL"
        return 0
    fi
    if pid_alive "$pid"; then
        log "instance $NAME running (pid $pid) but not healthy on $URL"
    else
        log "instance $NAME not running"
    fi
    return 1
}

# ---------------------------------------------------------------- dispatch
case "$CMD" in
    start) srv_start ;;
    stop) srv_stop ;;
    status) srv_status ;;
    url) echo "$URL" ;;
    fetch)
        srv_unpack
        log "$ENGINE $VERSION ready in $(srv_home)"
        ;;
esac
