#!/usr/bin/env bash
# The local schema registry (Apicurio Registry, in-memory storage) for development and CI.
# toolgate talks to it through its Confluent-compatible API, /apis/ccompat/v7.
#
#   registry.sh ensure         what you usually want: start this checkout's registry, or use the
#                              one another checkout already runs on the port (left running)
#   registry.sh build          build the registry with Maven into .build/ (once; fast when present)
#   registry.sh start          build, start this checkout's own, wait until it answers (fails,
#                              naming ensure, when another checkout's holds the port)
#   registry.sh stop           graceful SIGTERM, SIGKILL after a timeout (this checkout's only)
#   registry.sh status         exit 0 when running and answering, non-zero otherwise
#   registry.sh logs [-f|-n N] tail the registry's log
#   registry.sh with CMD...    run CMD with a registry; one started here is stopped afterwards;
#                              CMD's exit code is kept. Exports TOOLGATE_REGISTRY_URL
#                              (the Confluent-compatible API, .../apis/ccompat/v7).
#
# Listens on 127.0.0.1:18081. Process handling (Java, Maven, pid file, lock, start with a bounded
# wait, stop, status, logs, ensure, with, help) is ops/lib/service.sh, shared with
# ops/kafka/kafka.sh. The build lives in .build/ (app/ holds the runnable jar), the pid
# file and the log in .data/ next to this script (both git-ignored). Storage is in memory: a
# restart starts empty.
#
# Environment knobs:
#   TOOLGATE_APICURIO_PORT           HTTP port (default 18081)
#   TOOLGATE_APICURIO_DATA           pid file and log of the instance (default .data/ here)
#   TOOLGATE_APICURIO_START_TIMEOUT  seconds to wait for it to answer (default 120)
#   TOOLGATE_APICURIO_STOP_TIMEOUT   seconds between SIGTERM and SIGKILL (default 20)
#   TOOLGATE_APICURIO_HEAP           JVM heap (default 384m)
#   TOOLGATE_APICURIO_TLS_PORT       also serve https on this port, with the certificate for
#                                    localhost and 127.0.0.1 of ops/kafka/secure/make-certs.sh local
#   TOOLGATE_APICURIO_TLS_DIR        that TLS material (default: tls/ in the data dir; made when
#                                    missing); clients trust its ca.pem
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
POM="$HERE/pom.xml"
BUILD="$HERE/.build"
APP="$BUILD/app"
STAMP="$APP/.complete"
# shellcheck source=../lib/service.sh
source "$HERE/../lib/service.sh"
DATA="$(absolute "${TOOLGATE_APICURIO_DATA:-$HERE/.data}")"
PORT="${TOOLGATE_APICURIO_PORT:-18081}"
HOST=127.0.0.1
PIDFILE="$DATA/registry-$PORT.pid"
LOCKFILE="$DATA/.lock"
LOG="$DATA/registry-$PORT.log"
START_TIMEOUT="${TOOLGATE_APICURIO_START_TIMEOUT:-120}"
STOP_TIMEOUT="${TOOLGATE_APICURIO_STOP_TIMEOUT:-20}"
HEAP="${TOOLGATE_APICURIO_HEAP:-384m}"
URL="http://$HOST:$PORT"
TLS_PORT="${TOOLGATE_APICURIO_TLS_PORT:-}"
TLS_DIR="$(absolute "${TOOLGATE_APICURIO_TLS_DIR:-$DATA/tls}")"
MAKE_CERTS="$HERE/../kafka/secure/make-certs.sh"
PROBE="$URL/apis/ccompat/v7/subjects"

# For ops/lib/service.sh.
SERVICE=registry.sh
WHAT=registry
ADDRESS="$URL"
PORT_KNOB=TOOLGATE_APICURIO_PORT
LOCK_WAIT=300
JAVA_FOR="the registry"
POLL=0.5
NOT_READY="did not answer on $PROBE"
COMMANDS="build"
PORTS=("$PORT" ${TLS_PORT:+"$TLS_PORT"})

[[ "$PORT" =~ ^[0-9]+$ ]] && ((PORT > 0 && PORT < 65536)) ||
  die "TOOLGATE_APICURIO_PORT ($PORT) must be a port number (1-65535)"
[[ -z "$TLS_PORT" || ("$TLS_PORT" =~ ^[0-9]+$ && "$TLS_PORT" != "$PORT") ]] ||
  die "TOOLGATE_APICURIO_TLS_PORT ($TLS_PORT) must be a port number other than TOOLGATE_APICURIO_PORT"
[[ "$START_TIMEOUT" =~ ^[0-9]+$ && "$STOP_TIMEOUT" =~ ^[0-9]+$ ]] ||
  die "TOOLGATE_APICURIO_START_TIMEOUT and TOOLGATE_APICURIO_STOP_TIMEOUT must be whole seconds"

# The runnable registry in .build/app (its .complete holds the hash of the pom.xml it was built from).
cmd_build() {
  pom_current "$STAMP" && return 0
  need_maven "the registry in $APP is"
  say "building the registry with Maven (first time only, a few minutes)..."
  mkdir -p "$BUILD"
  local target="$BUILD/target.$$" build_log="$BUILD/build.log"
  rm -rf "$target"
  # shellcheck disable=SC2064
  trap "rm -rf '$target'" EXIT
  run_maven "$build_log" "build the registry" package -DskipTests -Dquarkus.profile=prod \
    "-Dtoolgate.registry.build=$target"
  [[ -f "$target/toolgate-registry-1-runner.jar" && -d "$target/lib" ]] ||
    die "Maven built no $target/toolgate-registry-1-runner.jar (full output: $build_log)"
  local fresh="$BUILD/app.tmp.$$"
  rm -rf "$fresh"
  mkdir -p "$fresh"
  mv "$target/toolgate-registry-1-runner.jar" "$fresh/registry.jar"
  mv "$target/lib" "$fresh/lib"
  rm -rf "$target" "$build_log"
  install_built "$fresh" "$APP"
  say "registry ready in $APP ($(find "$APP/lib" -name '*.jar' | wc -l) jars)"
}

# HTTP 200 with a JSON array from the subjects listing: the registry serves (the standard
# library's HTTP client: no curl needed).
serves() {
  python3 - "$PROBE" <<'PY'
import json, sys, urllib.request
try:
    with urllib.request.urlopen(sys.argv[1], timeout=3) as response:
        sys.exit(0 if isinstance(json.loads(response.read()), list) else 1)
except (OSError, ValueError):
    sys.exit(1)
PY
}

# This instance's java process (its port and this checkout's jar).
owns_cmdline() { [[ "$1" == *"-Dquarkus.http.port=$PORT "*"$APP/registry.jar"* ]]; }

show_start_log() { tail -n 30 "$LOG" >&2 || true; }

prepare() {
  need_java
  cmd_build
}

launch() {
  local tls=()
  if [[ -n "$TLS_PORT" ]]; then
    bash "$MAKE_CERTS" local "$TLS_DIR" >/dev/null || die "making the TLS material in $TLS_DIR failed"
    tls=("-Dquarkus.http.ssl-port=$TLS_PORT" "-Dquarkus.http.ssl.certificate.key-store-file=$TLS_DIR/broker.p12"
      "-Dquarkus.http.ssl.certificate.key-store-file-type=PKCS12")
    # The keystore's password through the environment, not the command line others can read.
    QUARKUS_HTTP_SSL_CERTIFICATE_KEY_STORE_PASSWORD="$(cat "$TLS_DIR/keystore.pass")"
    export QUARKUS_HTTP_SSL_CERTIFICATE_KEY_STORE_PASSWORD
  fi
  : >"$LOG"
  spawn "$LOG" java "-Xms64m" "-Xmx$HEAP" -XX:+ExitOnOutOfMemoryError -XX:TieredStopAtLevel=1 \
    "-Dquarkus.http.port=$PORT" "-Dquarkus.http.host=$HOST" -Dquarkus.log.level=WARN \
    -Dquarkus.log.category.io.quarkus.level=INFO ${tls[@]+"${tls[@]}"} -jar "$APP/registry.jar"
}

ready_line() {
  echo "Apicurio Registry ready on $URL${TLS_PORT:+ and https://$HOST:$TLS_PORT (CA: $TLS_DIR/ca.pem)}"
}

cmd_with() {
  export TOOLGATE_REGISTRY_URL="$URL/apis/ccompat/v7"
  service_with "$@"
}

service_main "$@"
