#!/usr/bin/env bash
# The image's entrypoint (sparkrunner-node): one image, several roles.
#   master                 Spark standalone master   (SPARK_MASTER_HOST, SPARK_MASTER_PORT=7077, SPARK_MASTER_WEBUI_PORT=8080)
#   worker [MASTER_URL]    Spark standalone worker   (SPARK_MASTER_URL, SPARK_WORKER_HOST, SPARK_WORKER_CORES,
#                                                     SPARK_WORKER_MEMORY, SPARK_WORKER_WEBUI_PORT=8081)
#   notebook               JupyterLab on port 8888   (JUPYTER_TOKEN; SPARK_MASTER_URL becomes the default master)
#   driver ARGS...         spark-submit in client mode (the driver pod of Spark on Kubernetes, or a job)
#   executor               a Spark on Kubernetes executor (configured by the SPARK_* variables Spark sets)
#   anything else          run as a command, e.g. `python train.py` or `bash`
set -euo pipefail
role=${1:-bash}
[ $# -gt 0 ] && shift

spark_class() { exec "$SPARK_HOME/bin/spark-class" "$@"; }
need() { [ -n "${!1:-}" ] || { echo "sparkrunner-node: $role needs $1 ($2)" >&2; exit 64; }; }

case "$role" in
  master)
    spark_class org.apache.spark.deploy.master.Master --host "${SPARK_MASTER_HOST:-$(hostname)}" \
      --port "${SPARK_MASTER_PORT:-7077}" --webui-port "${SPARK_MASTER_WEBUI_PORT:-8080}" "$@" ;;
  worker)
    url=${1:-${SPARK_MASTER_URL:-}}; [ $# -gt 0 ] && shift
    [ -n "$url" ] || { echo "sparkrunner-node: worker needs the master URL: worker spark://HOST:7077 or SPARK_MASTER_URL" >&2; exit 64; }
    opts=(--webui-port "${SPARK_WORKER_WEBUI_PORT:-8081}")
    [ -n "${SPARK_WORKER_HOST:-}" ] && opts+=(--host "$SPARK_WORKER_HOST")
    [ -n "${SPARK_WORKER_CORES:-}" ] && opts+=(--cores "$SPARK_WORKER_CORES")
    [ -n "${SPARK_WORKER_MEMORY:-}" ] && opts+=(--memory "$SPARK_WORKER_MEMORY")
    spark_class org.apache.spark.deploy.worker.Worker "${opts[@]}" "$@" "$url" ;;
  notebook)
    if [ -n "${SPARK_MASTER_URL:-}" ]; then
      grep -qs '^spark.master ' "$SPARK_HOME/conf/spark-defaults.conf" \
        || echo "spark.master $SPARK_MASTER_URL" >> "$SPARK_HOME/conf/spark-defaults.conf"
    fi
    exec jupyter lab --ip 0.0.0.0 --port "${JUPYTER_PORT:-8888}" --no-browser --allow-root \
      --ServerApp.root_dir=/workspace "$@" ;;
  driver)
    opts=(--deploy-mode client)
    if [ -n "${SPARK_DRIVER_BIND_ADDRESS:-}" ]; then
      opts+=(--conf "spark.driver.bindAddress=$SPARK_DRIVER_BIND_ADDRESS"
             --conf "spark.executorEnv.SPARK_DRIVER_POD_IP=$SPARK_DRIVER_BIND_ADDRESS")
    fi
    exec "$SPARK_HOME/bin/spark-submit" "${opts[@]}" "$@" ;;
  executor)
    need SPARK_DRIVER_URL "set by Spark on Kubernetes"; need SPARK_EXECUTOR_ID "set by Spark on Kubernetes"
    java_opts=()
    while IFS='=' read -r name value; do java_opts+=("$value"); done < <(env | grep '^SPARK_JAVA_OPT_' | sort -t_ -k4 -n)
    memory=${SPARK_EXECUTOR_MEMORY:-1g}
    exec java "${java_opts[@]}" -Xms"$memory" -Xmx"$memory" \
      -cp "${SPARK_CLASSPATH:+$SPARK_CLASSPATH:}$SPARK_HOME/conf:$SPARK_HOME/jars/*" \
      org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
      --driver-url "$SPARK_DRIVER_URL" --executor-id "$SPARK_EXECUTOR_ID" \
      --cores "${SPARK_EXECUTOR_CORES:-1}" --app-id "${SPARK_APPLICATION_ID:-}" \
      --hostname "${SPARK_EXECUTOR_POD_IP:-$(hostname -i)}" \
      --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID:-0}" --podName "${SPARK_EXECUTOR_POD_NAME:-$(hostname)}" ;;
  *)
    exec "$role" "$@" ;;
esac
