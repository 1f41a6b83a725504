#!/usr/bin/env bash
# A standalone Spark cluster on this machine, from what the pyspark package ships (no download):
# a master and N workers (default 2) as separate JVMs, and optionally a Spark Connect server
# whose driver runs its jobs on that cluster.
#
#   scripts/spark-cluster.sh start DIR     master + workers (starts only what is not running)
#   scripts/spark-cluster.sh connect DIR   + a Spark Connect server on the cluster
#   scripts/spark-cluster.sh stop-connect DIR   stop the Spark Connect server only
#   scripts/spark-cluster.sh status DIR    what runs, and the master's view of its workers;
#                                          exit 0 all running, 1 a daemon died, 3 none runs
#   scripts/spark-cluster.sh stop DIR      stop everything started in DIR
#
# Everything goes into DIR: logs (*.log), pid files (master.pid, worker-N.pid, connect.pid),
# executors' working directories (work-N/), and the addresses to use:
#   DIR/master-url    spark://127.0.0.1:PORT   (partialflow serve --spark-master "$(cat ...)")
#   DIR/master-webui  http://127.0.0.1:PORT    (the master's JSON: .../json/)
#   DIR/connect-url   sc://127.0.0.1:PORT      (partialflow serve --spark-master "$(cat ...)")
#   DIR/connect-webui http://127.0.0.1:PORT    (the Connect server's Spark UI and REST API)
# Ports are free ones picked at start. Each daemon leads its own process group (a worker's
# executors are in it too), so stopping one stops what it spawned.
#
# Sizes suit a 2-core machine: each worker offers SPARK_CLUSTER_WORKER_CORES (2) cores and
# SPARK_CLUSTER_WORKER_MEMORY (2g); an application takes 2 cores unless it sets
# spark.cores.max (spark.deploy.defaultCores), one per worker, so two applications (the
# server and `partialflow stress`'s checker) run side by side. Executors run Python (if a job
# ever needs it) with PYSPARK_PYTHON, by default this checkout's .venv/bin/python: the same
# interpreter as the server's driver.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

usage() {
    echo "usage: $0 start|connect|stop-connect|status|stop DIR" >&2
    exit 2
}
[ $# -eq 2 ] || usage
CMD=$1
GIVEN=$2  # DIR as the user wrote it, for messages
mkdir -p "$2"
DIR=$(cd "$2" && pwd)  # absolute: the daemons run with their own working directories

PY=${PYTHON:-$ROOT/.venv/bin/python}
[ -x "$PY" ] || { echo "error: no $PY; run scripts/bootstrap.sh first" >&2; exit 1; }
SPARK_HOME=$("$PY" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')
export SPARK_HOME
export SPARK_LOCAL_IP=127.0.0.1
export PYSPARK_PYTHON=${PYSPARK_PYTHON:-$PY}
# The master and workers only schedule; the executors (their children) do the work.
export SPARK_DAEMON_MEMORY=${SPARK_DAEMON_MEMORY:-256m}
# No REST submission server: it would take the fixed port 6066.
export SPARK_MASTER_OPTS="-Dspark.deploy.defaultCores=2 -Dspark.master.rest.enabled=false"
WORKERS=${SPARK_CLUSTER_WORKERS:-2}
WORKER_CORES=${SPARK_CLUSTER_WORKER_CORES:-2}
WORKER_MEMORY=${SPARK_CLUSTER_WORKER_MEMORY:-2g}
START_TIMEOUT=${SPARK_CLUSTER_START_TIMEOUT:-120}

free_port() {
    "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

alive() {  # alive NAME: the daemon of DIR/NAME.pid runs
    local pid
    pid=$(cat "$DIR/$1.pid" 2>/dev/null) || return 1
    kill -0 "$pid" 2>/dev/null
}

launch() {  # launch NAME COMMAND...: in its own process group, log and pid file in DIR
    local name=$1
    shift
    setsid "$@" >>"$DIR/$name.log" 2>&1 </dev/null &
    echo $! >"$DIR/$name.pid"
}

master_json() {
    "$PY" - "$(cat "$DIR/master-webui")/json/" <<'EOF'
import json, sys, urllib.request
try:
    with urllib.request.urlopen(sys.argv[1], timeout=5) as r:
        print(json.dumps(json.load(r)))
except (OSError, ValueError):  # not up yet, or not serving JSON yet
    sys.exit(1)
EOF
}

alive_workers() {
    master_json 2>/dev/null | "$PY" -c 'import json, sys; print(json.load(sys.stdin)["aliveworkers"])' \
        2>/dev/null || echo 0
}

wait_for() {  # wait_for NAME WHAT COMMAND...: poll until COMMAND succeeds; give up when
    # the daemon NAME exits or the timeout passes
    local name=$1 what=$2 deadline=$((SECONDS + START_TIMEOUT))
    shift 2
    until "$@"; do
        if ! alive "$name"; then
            echo "error: $what exited; the end of $DIR/$name.log:" >&2
            tail -n 5 "$DIR/$name.log" >&2
            exit 1
        fi
        if [ $SECONDS -ge $deadline ]; then
            echo "error: $what not up after ${START_TIMEOUT}s; see the logs in $DIR" >&2
            exit 1
        fi
        sleep 1
    done
}

workers_up() { [ "$(alive_workers)" -ge "$WORKERS" ]; }

port_open() {
    "$PY" -c 'import socket, sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1).close()' \
        "$1" 2>/dev/null
}

start() {
    if ! alive master; then
        local port ui
        port=$(free_port)
        ui=$(free_port)
        echo "spark://127.0.0.1:$port" >"$DIR/master-url"
        echo "http://127.0.0.1:$ui" >"$DIR/master-webui"
        launch master "$SPARK_HOME/bin/spark-class" org.apache.spark.deploy.master.Master \
            --host 127.0.0.1 --port "$port" --webui-port "$ui"
        wait_for master "the master" master_json >/dev/null
    fi
    local i
    for i in $(seq 1 "$WORKERS"); do
        if ! alive "worker-$i"; then
            mkdir -p "$DIR/work-$i"
            launch "worker-$i" "$SPARK_HOME/bin/spark-class" org.apache.spark.deploy.worker.Worker \
                --host 127.0.0.1 --port 0 --webui-port 0 --cores "$WORKER_CORES" \
                --memory "$WORKER_MEMORY" --work-dir "$DIR/work-$i" "$(cat "$DIR/master-url")"
        fi
    done
    wait_for master "$WORKERS workers" workers_up
    echo "master $(cat "$DIR/master-url") with $WORKERS workers (web UI $(cat "$DIR/master-webui"))"
}

connect() {
    alive master || start >/dev/null
    if ! alive connect; then
        local port ui
        port=$(free_port)
        ui=$(free_port)
        echo "sc://127.0.0.1:$port" >"$DIR/connect-url"
        echo "http://127.0.0.1:$ui" >"$DIR/connect-webui"
        # --wait keeps it in the foreground of its process group (spark-daemon.sh would fork
        # it away and write its own pid file elsewhere).
        # spark-class sizes the Connect server like a daemon (SPARK_DAEMON_MEMORY), but it
        # is a driver: give it the driver's memory.
        SPARK_DAEMON_MEMORY=1g SPARK_PID_DIR=$DIR SPARK_LOG_DIR=$DIR launch connect \
            "$SPARK_HOME/sbin/start-connect-server.sh" --wait \
            --master "$(cat "$DIR/master-url")" \
            --conf "spark.connect.grpc.binding.port=$port" \
            --conf "spark.connect.grpc.binding.address=127.0.0.1" \
            --conf "spark.ui.port=$ui" --conf spark.ui.showConsoleProgress=false \
            --conf spark.sql.shuffle.partitions=2 --conf spark.default.parallelism=2 \
            --conf "spark.pyspark.python=$PYSPARK_PYTHON"
        wait_for connect "the Spark Connect server" port_open "$port"
    fi
    echo "Spark Connect $(cat "$DIR/connect-url") on $(cat "$DIR/master-url")"
}

status() {
    local name rc=0
    if ! ls "$DIR"/*.pid >/dev/null 2>&1; then
        # Never started here, or stopped (stop removes the pid files): say so, with the
        # status LSB init scripts use for "not running".
        echo "no Spark cluster runs in $GIVEN (start one: scripts/spark-cluster.sh start $GIVEN)"
        return 3
    fi
    for name in master $(seq -f "worker-%g" 1 "$WORKERS") connect; do
        if alive "$name"; then
            echo "$name: running (pid $(cat "$DIR/$name.pid"))"
        elif [ -f "$DIR/$name.pid" ]; then
            echo "$name: not running"
            [ "$name" = connect ] || rc=1
        fi
    done
    if alive master; then
        echo "master $(cat "$DIR/master-url"): $(alive_workers) workers alive"
    else
        rc=1
    fi
    return $rc
}

stop_one() {  # TERM the daemon's process group, KILL it after 20 s
    local name=$1 pid i
    pid=$(cat "$DIR/$name.pid" 2>/dev/null) || return 0
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM -- "-$pid" 2>/dev/null || true
        for i in $(seq 1 40); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.5
        done
        kill -KILL -- "-$pid" 2>/dev/null || true
        echo "stopped $name"
    fi
    rm -f "$DIR/$name.pid"
}

stop() {
    local f
    stop_one connect
    for f in "$DIR"/worker-*.pid; do
        [ -e "$f" ] && stop_one "$(basename "$f" .pid)"
    done
    stop_one master
}

case $CMD in
    start) start ;;
    connect) connect ;;
    stop-connect) stop_one connect ;;
    status) status ;;
    stop) stop ;;
    *) usage ;;
esac
