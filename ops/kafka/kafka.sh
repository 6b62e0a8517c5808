#!/usr/bin/env bash
# The local single-node Apache Kafka broker (KRaft) for development and CI.
#
#   kafka.sh ensure         what you usually want: start this checkout's broker, or use the one
#                           another checkout already runs on the address (left running)
#   kafka.sh fetch          download the broker jars with Maven (once; fast when present)
#   kafka.sh start          fetch, format storage (first time), start, wait until it serves
#                           (fails, naming ensure, when another checkout's holds the port)
#   kafka.sh stop           graceful SIGTERM, SIGKILL after a timeout (this checkout's only)
#   kafka.sh status         exit 0 when running and serving requests, non-zero otherwise
#   kafka.sh logs [-f|-n N] tail the broker log
#   kafka.sh reset          stop and delete all broker data
#   kafka.sh with CMD...    run CMD against a local broker; a broker started here is
#                           stopped afterwards; CMD's exit code is kept
#
# Listens on 127.0.0.1:19092 (controller 127.0.0.1:19093). Process handling (Java, Maven, pid file,
# lock, start with a bounded wait, stop, status, logs, ensure, with, help) is ops/lib/service.sh,
# shared with ops/registry/registry.sh. Jars live in .jars/, data,
# pid file and logs in .data/ next to this script (both git-ignored). The three
# TOOLGATE_KAFKA_{PORT,CONTROLLER_PORT,DATA} knobs select another instance beside it
# (every command, with the same values, acts on that instance only; the jars are shared).
# When TOOLGATE_BOOTSTRAP names another cluster, `with` runs CMD without a local broker.
#
# Environment knobs:
#   TOOLGATE_KAFKA_START_TIMEOUT  seconds to wait for the broker to serve (default 90)
#   TOOLGATE_KAFKA_STOP_TIMEOUT   seconds between SIGTERM and SIGKILL (default 30)
#   TOOLGATE_KAFKA_HEAP           JVM heap (default 512m)
#   TOOLGATE_KAFKA_OPTS           extra JVM options
#   TOOLGATE_KAFKA_PORT           client listener port (default 19092)
#   TOOLGATE_KAFKA_CONTROLLER_PORT  KRaft controller port (default 19093)
#   TOOLGATE_KAFKA_DATA           data, pid file and logs of the instance (default .data/ here)
#   TOOLGATE_KAFKA_SASL_PORT      also a SASL_PLAINTEXT listener (SCRAM-SHA-256/512) on this port,
#                                 with ACLs enforced (StandardAuthorizer; super users: User:ANONYMOUS,
#                                 i.e. the PLAINTEXT and controller listeners, and User:admin)
#   TOOLGATE_KAFKA_SCRAM_USERS    name:password,... SCRAM users added when the storage is formatted
#                                 (first start of a data dir), e.g. admin:pw,toolgate:pw
#   TOOLGATE_KAFKA_SSL_PORT       also an SSL listener that requires a client certificate (mutual
#                                 TLS; CN=NAME is the principal User:NAME), ACLs enforced as above
#   TOOLGATE_KAFKA_SASL_SSL_PORT  also a SASL_SSL listener (SCRAM-SHA-256/512 over TLS), ACLs enforced
#   TOOLGATE_KAFKA_TLS_OTHER_HOST_PORT  an SSL listener presenting a certificate for another host
#   TOOLGATE_KAFKA_TLS_EXPIRED_PORT     an SSL listener presenting an expired certificate (these two
#                                 only show clients' certificate checks failing)
#   TOOLGATE_KAFKA_TLS_DIR        the TLS material of those listeners (default: tls/ in the data dir),
#                                 made by secure/make-certs.sh local DIR when missing
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
POM="$HERE/pom.xml"
TEMPLATE="$HERE/server.properties"
LOG4J="$HERE/log4j2.xml"
JARS="$HERE/.jars"
STAMP="$JARS/.complete"
# shellcheck source=../lib/service.sh
source "$HERE/../lib/service.sh"
DATA="$(absolute "${TOOLGATE_KAFKA_DATA:-$HERE/.data}")"
KRAFT="$DATA/kraft"
LOGS="$DATA/logs"
CONF="$DATA/server.properties"
PIDFILE="$DATA/kafka.pid"
LOCKFILE="$DATA/.lock"
OUT="$LOGS/kafka.out"
LOG="$LOGS/server.log"

HOST=127.0.0.1
PORT="${TOOLGATE_KAFKA_PORT:-19092}"
CONTROLLER_PORT="${TOOLGATE_KAFKA_CONTROLLER_PORT:-19093}"
LOCAL_BOOTSTRAP="$HOST:$PORT"
SASL_PORT="${TOOLGATE_KAFKA_SASL_PORT:-}"
SCRAM_USERS="${TOOLGATE_KAFKA_SCRAM_USERS:-}"
SSL_PORT="${TOOLGATE_KAFKA_SSL_PORT:-}"
SASL_SSL_PORT="${TOOLGATE_KAFKA_SASL_SSL_PORT:-}"
OTHER_HOST_PORT="${TOOLGATE_KAFKA_TLS_OTHER_HOST_PORT:-}"
EXPIRED_PORT="${TOOLGATE_KAFKA_TLS_EXPIRED_PORT:-}"
TLS_DIR="$(absolute "${TOOLGATE_KAFKA_TLS_DIR:-$DATA/tls}")"
MAKE_CERTS="$HERE/secure/make-certs.sh"

START_TIMEOUT="${TOOLGATE_KAFKA_START_TIMEOUT:-90}"
STOP_TIMEOUT="${TOOLGATE_KAFKA_STOP_TIMEOUT:-30}"
HEAP="${TOOLGATE_KAFKA_HEAP:-512m}"
LOG_OFFSET=0 # size of the server log when this invocation launched the broker

# For ops/lib/service.sh.
SERVICE=kafka.sh
WHAT=broker
ADDRESS="$LOCAL_BOOTSTRAP"
PORT_KNOB=TOOLGATE_KAFKA_PORT
LOCK_WAIT=180
JAVA_FOR="the Kafka 4 broker"
POLL=0.2
NOT_READY="did not serve requests on $LOCAL_BOOTSTRAP"
COMMANDS="fetch reset"

[[ "$PORT" =~ ^[0-9]+$ && "$CONTROLLER_PORT" =~ ^[0-9]+$ && "$PORT" != "$CONTROLLER_PORT" ]] ||
  die "TOOLGATE_KAFKA_PORT ($PORT) and TOOLGATE_KAFKA_CONTROLLER_PORT ($CONTROLLER_PORT) must be two different port numbers"
# Every optional listener: a port number that no other listener of the instance uses.
EXTRA_PORTS=()
for knob in SASL_PORT SSL_PORT SASL_SSL_PORT TLS_OTHER_HOST_PORT TLS_EXPIRED_PORT; do
  var="TOOLGATE_KAFKA_$knob"
  value="${!var:-}"
  [[ -n "$value" ]] || continue
  [[ "$value" =~ ^[0-9]+$ && " $PORT $CONTROLLER_PORT ${EXTRA_PORTS[*]-} " != *" $value "* ]] ||
    die "$var ($value) must be a port number that no other listener of this instance uses"
  EXTRA_PORTS+=("$value")
done
PORTS=("$PORT" "$CONTROLLER_PORT" ${EXTRA_PORTS[@]+"${EXTRA_PORTS[@]}"})
TLS=""
[[ -z "$SSL_PORT$SASL_SSL_PORT$OTHER_HOST_PORT$EXPIRED_PORT" ]] || TLS=1
if [[ -n "$SCRAM_USERS" ]]; then
  [[ -n "$SASL_PORT$SASL_SSL_PORT" ]] ||
    die "TOOLGATE_KAFKA_SCRAM_USERS needs TOOLGATE_KAFKA_SASL_PORT or TOOLGATE_KAFKA_SASL_SSL_PORT (the listener they log in on)"
  [[ "$SCRAM_USERS" =~ ^[A-Za-z0-9._-]+:[A-Za-z0-9._~@%+/-]+(,[A-Za-z0-9._-]+:[A-Za-z0-9._~@%+/-]+)*$ ]] ||
    die "TOOLGATE_KAFKA_SCRAM_USERS must be name:password[,name:password...] (names [A-Za-z0-9._-], passwords [A-Za-z0-9._~@%+/-])"
fi

python() {
  if command -v python3 >/dev/null 2>&1; then
    python3 "$@"
  elif [[ -x "$REPO/.venv/bin/python" ]]; then
    "$REPO/.venv/bin/python" "$@"
  else
    die "python3 is not on PATH (needed to probe the broker)"
  fi
}

# The broker jars (.jars/.complete holds the hash of the pom.xml they were fetched for).
cmd_fetch() {
  pom_current "$STAMP" && return 0
  need_maven "the broker jars in $JARS are"
  say "fetching the Kafka broker jars with Maven (first time only)..."
  local tmp="$DATA/jars.tmp.$$" fetch_log="$DATA/fetch.log"
  mkdir -p "$DATA"
  rm -rf "$tmp"
  # shellcheck disable=SC2064
  trap "rm -rf '$tmp'" EXIT
  run_maven "$fetch_log" "fetch the broker jars" -q dependency:copy-dependencies \
    -DoutputDirectory="$tmp" -DincludeScope=runtime
  rm -f "$fetch_log"
  install_built "$tmp" "$JARS"
  say "jars ready in $JARS ($(find "$JARS" -name '*.jar' | wc -l) jars)"
}

# Runs a real Kafka request/response round trip using only the Python standard
# library (works before any venv exists): ApiVersions, then Metadata, which lists
# the broker only once it is registered and unfenced. A bare TCP connect is not
# enough: the port is bound well before the broker processes requests.
# Exit 0 = serving, 1 = no answer, 2 = something answered but it is not a usable broker.
probe() {
  python - "$1" "$2" <<'PY'
import socket, struct, sys

host, port = sys.argv[1], int(sys.argv[2])

def call(sock, api_key, version, corr, body=b""):
    client = b"toolgate-kafka-sh"
    header = struct.pack(">hhih", api_key, version, corr, len(client)) + client
    msg = header + body
    sock.sendall(struct.pack(">i", len(msg)) + msg)
    size = struct.unpack(">i", recv(sock, 4))[0]
    data = recv(sock, size)
    if struct.unpack(">i", data[:4])[0] != corr:
        raise ValueError("correlation id mismatch")
    return data[4:]

def recv(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed by peer")
        buf += chunk
    return buf

try:
    sock = socket.create_connection((host, port), timeout=2.0)
except OSError:
    sys.exit(1)
try:
    sock.settimeout(3.0)
    # ApiVersions v0: error_code, [api_key, min, max]
    resp = call(sock, 18, 0, 1)
    (err,) = struct.unpack(">h", resp[:2])
    if err != 0:
        sys.exit(1)
    (n,) = struct.unpack(">i", resp[2:6])
    versions = {}
    for i in range(n):
        k, lo, hi = struct.unpack(">hhh", resp[6 + 6 * i : 12 + 6 * i])
        versions[k] = (lo, hi)
    lo, hi = versions.get(3, (99, -1))
    if not lo <= 4 <= hi:
        sys.exit(2)
    # Metadata v4, no topics: throttle_time_ms, brokers[...]
    resp = call(sock, 3, 4, 2, struct.pack(">ib", 0, 0))
    (brokers,) = struct.unpack(">i", resp[4:8])
    sys.exit(0 if brokers > 0 else 1)
except (OSError, ValueError, struct.error):
    sys.exit(1)
finally:
    sock.close()
PY
}

# The instance's broker process (its own server.properties).
owns_cmdline() { [[ "$1" == *"kafka.Kafka $CONF"* ]]; }

# A Kafka broker serves the address (a real request, see probe).
serves() { probe "$HOST" "$PORT"; }

write_conf() {
  mkdir -p "$KRAFT" "$LOGS"
  sed -e "s#^log\.dirs=.*#log.dirs=$KRAFT#" \
    -e "s#^listeners=.*#listeners=PLAINTEXT://$HOST:$PORT,CONTROLLER://$HOST:$CONTROLLER_PORT#" \
    -e "s#^advertised\.listeners=.*#advertised.listeners=PLAINTEXT://$HOST:$PORT#" \
    -e "s#^controller\.quorum\.voters=.*#controller.quorum.voters=1@$HOST:$CONTROLLER_PORT#" \
    "$TEMPLATE" >"$CONF"
  [[ -z "$SASL_PORT$SASL_SSL_PORT$SSL_PORT" ]] || add_sasl_conf
  [[ -z "$TLS" ]] || add_tls_conf
}

# add_listener NAME PROTOCOL PORT: one more listener on $HOST, advertised as it is.
add_listener() {
  sed -i -e "s#^listeners=.*#&,$1://$HOST:$3#" \
    -e "s#^advertised\.listeners=.*#&,$1://$HOST:$3#" \
    -e "s#^listener\.security\.protocol\.map=.*#&,$1:$2#" "$CONF"
}

# The SASL_PLAINTEXT listener of TOOLGATE_KAFKA_SASL_PORT: SCRAM logins, ACLs enforced.
add_sasl_conf() {
  [[ -z "$SASL_PORT" ]] || add_listener SASL_PLAINTEXT SASL_PLAINTEXT "$SASL_PORT"
  cat >>"$CONF" <<'EOF'

# TOOLGATE_KAFKA_SASL_PORT, _SASL_SSL_PORT, _SSL_PORT: SCRAM logins (client certificates on the
# SSL listener) and ACLs enforced.
# PLAINTEXT and CONTROLLER authenticate nobody (User:ANONYMOUS): the broker's own requests
# and kafka.sh's probe use them, so ANONYMOUS is a super user (a local instance only);
# so is admin, who creates the topics and the ACLs.
sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512
listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:ANONYMOUS;User:admin
allow.everyone.if.no.acl.found=false
EOF
}

# The TLS listeners: certificates from $TLS_DIR (made there on first use); the CA's PEM file is
# the truststore for client certificates.
add_tls_conf() {
  bash "$MAKE_CERTS" local "$TLS_DIR" || die "making the TLS material in $TLS_DIR failed"
  local pass
  pass="$(cat "$TLS_DIR/keystore.pass")"
  [[ -z "$SSL_PORT" ]] || add_listener SSL SSL "$SSL_PORT"
  [[ -z "$SASL_SSL_PORT" ]] || add_listener SASL_SSL SASL_SSL "$SASL_SSL_PORT"
  [[ -z "$OTHER_HOST_PORT" ]] || add_listener OTHERHOST SSL "$OTHER_HOST_PORT"
  [[ -z "$EXPIRED_PORT" ]] || add_listener EXPIRED SSL "$EXPIRED_PORT"
  cat >>"$CONF" <<EOF

# TLS (secure/make-certs.sh local $TLS_DIR): the broker's certificate names localhost and
# 127.0.0.1. The SSL listener requires a client certificate of the same CA, whose CN is the
# principal (CN=toolgate is User:toolgate). OTHERHOST and EXPIRED present broken certificates.
ssl.keystore.type=PKCS12
ssl.keystore.location=$TLS_DIR/broker.p12
ssl.keystore.password=$pass
ssl.key.password=$pass
ssl.truststore.type=PEM
ssl.truststore.location=$TLS_DIR/ca.pem
ssl.principal.mapping.rules=RULE:^CN=([A-Za-z0-9._-]+)\$/\$1/,DEFAULT
listener.name.ssl.ssl.client.auth=required
listener.name.otherhost.ssl.keystore.type=PKCS12
listener.name.otherhost.ssl.keystore.location=$TLS_DIR/broker-other-host.p12
listener.name.otherhost.ssl.keystore.password=$pass
listener.name.otherhost.ssl.key.password=$pass
listener.name.expired.ssl.keystore.type=PKCS12
listener.name.expired.ssl.keystore.location=$TLS_DIR/broker-expired.p12
listener.name.expired.ssl.keystore.password=$pass
listener.name.expired.ssl.key.password=$pass
EOF
}

java_base() {
  # shellcheck disable=SC2206
  JAVA_CMD=(java "-Xms$HEAP" "-Xmx$HEAP" -XX:+UseG1GC -XX:MaxGCPauseMillis=20
    -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true -Dlog4j2.shutdownHookEnabled=false
    "-Dlog4j2.configurationFile=$LOG4J" "-Dtoolgate.kafka.logs.dir=$LOGS"
    ${TOOLGATE_KAFKA_OPTS:-} -cp "$JARS/*")
}

format_storage() {
  [[ -f "$KRAFT/meta.properties" && -n "$SCRAM_USERS" ]] &&
    say "$KRAFT is formatted already: TOOLGATE_KAFKA_SCRAM_USERS only applies to a fresh data dir (kafka.sh reset)"
  [[ -f "$KRAFT/meta.properties" ]] && return 0
  local id
  id="$(python -c 'import base64, uuid
while True:
    s = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    if not s.startswith("-"):
        print(s)
        break')"
  # TOOLGATE_KAFKA_SCRAM_USERS: each user gets SCRAM-SHA-256 and SCRAM-SHA-512 credentials.
  local scram=() users user
  IFS=, read -ra users <<<"$SCRAM_USERS"
  for user in ${users[@]+"${users[@]}"}; do
    scram+=(--add-scram "SCRAM-SHA-256=[name=${user%%:*},password=${user#*:}]"
      --add-scram "SCRAM-SHA-512=[name=${user%%:*},password=${user#*:}]")
  done
  java_base
  if ! "${JAVA_CMD[@]}" kafka.tools.StorageTool format --cluster-id "$id" --config "$CONF" \
      ${scram[@]+"${scram[@]}"} >"$LOGS/format.log" 2>&1; then
    cat "$LOGS/format.log" >&2
    die "formatting the broker storage in $KRAFT failed"
  fi
}

# The end of what this start wrote to the server log (older runs' lines are left out).
show_start_log() {
  local size=0
  [[ -f "$LOG" ]] && size="$(stat -c %s "$LOG")"
  if ((size < LOG_OFFSET)); then
    LOG_OFFSET=0 # rolled over meanwhile
  fi
  if ((size > LOG_OFFSET)); then
    say "last lines of $LOG:"
    tail -c "+$((LOG_OFFSET + 1))" "$LOG" | tail -n 40 >&2 || true
  else
    say "nothing new in $LOG"
  fi
  if [[ -s "$OUT" ]]; then
    say "last lines of $OUT (JVM stdout/stderr):"
    tail -n 15 "$OUT" >&2 || true
  fi
}

prepare() {
  need_java
  cmd_fetch
}

launch() {
  write_conf
  format_storage
  java_base
  : >"$OUT"
  LOG_OFFSET=0
  [[ -f "$LOG" ]] && LOG_OFFSET="$(stat -c %s "$LOG")"
  spawn "$OUT" "${JAVA_CMD[@]}" kafka.Kafka "$CONF"
}

ready_line() {
  echo "Kafka $(kafka_version) ready on $LOCAL_BOOTSTRAP${SASL_PORT:+, SASL_PLAINTEXT (SCRAM) on $HOST:$SASL_PORT}${SSL_PORT:+, SSL (client certificates) on $HOST:$SSL_PORT}${SASL_SSL_PORT:+, SASL_SSL (SCRAM) on $HOST:$SASL_SSL_PORT}"
}

kafka_version() {
  local v
  v="$(find "$JARS" -maxdepth 1 -name 'kafka_2.13-*.jar' -printf '%f\n' 2>/dev/null |
    sed -n 's/^kafka_2\.13-\(.*\)\.jar$/\1/p' || true)"
  echo "${v:-?}"
}

cmd_reset() {
  cmd_stop
  rm -rf "$DATA"
  say "deleted $DATA"
}

cmd_with() {
  if [[ -n "${TOOLGATE_BOOTSTRAP:-}" && "$TOOLGATE_BOOTSTRAP" != "$LOCAL_BOOTSTRAP" ]]; then
    say "TOOLGATE_BOOTSTRAP=$TOOLGATE_BOOTSTRAP: not starting a local broker"
    exec "$@"
  fi
  export TOOLGATE_BOOTSTRAP="$LOCAL_BOOTSTRAP"
  service_with "$@"
}

service_main "$@"
