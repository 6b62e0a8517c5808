# shellcheck shell=bash
# The process handling ops/kafka/kafka.sh and ops/registry/registry.sh share: the Java and Maven
# they need, the pid file of an instance, its lock, a port held by another process, start (bounded
# wait until it serves), stop (a grace, then SIGKILL), status, logs, ensure, with, the usage text
# and the command line. Sourced, never run. The sourcing script sets, before calling any function:
#
#   SERVICE       its name in messages (kafka.sh)
#   WHAT          what it runs (broker, registry)
#   ADDRESS       where the instance serves, for messages (127.0.0.1:19092, http://127.0.0.1:18081)
#   HOST          the address ports are checked on (127.0.0.1)
#   PORTS         (array) every port the instance listens on, checked free before it starts
#   DATA PIDFILE LOCKFILE   the instance's folder, pid file and lock file
#   LOG           the log `logs` shows and start-up failures name
#   POM           the pom.xml Maven fetches or builds from
#   JAVA_FOR      who needs Java 17+, for messages (the Kafka 4 broker)
#   START_TIMEOUT seconds to wait for a started instance to serve
#   POLL          seconds between two looks at a starting instance
#   NOT_READY     what did not happen within START_TIMEOUT (did not answer on URL), for messages
#   STOP_TIMEOUT  seconds between SIGTERM and SIGKILL
#   LOCK_WAIT     seconds to wait for another invocation holding the lock
#   PORT_KNOB     the variable that selects another port (TOOLGATE_KAFKA_PORT), for messages
#   COMMANDS      the script's own commands besides the shared ones (fetch reset), each a cmd_NAME
#
# and defines:
#
#   owns_cmdline CMDLINE   true when CMDLINE (a /proc cmdline, spaces between) is this instance's
#   serves                 true when something serving the service's protocol answers at ADDRESS
#   prepare                what start needs before taking the lock (jars, a build)
#   launch                 write the instance's configuration and `spawn` its process
#   ready_line             the line start ends with (Kafka 4.1.2 ready on ...)
#   show_start_log         the end of the log of a start that failed, to stderr
#   cmd_with               `with`: exports what CMD needs, then service_with

say() { printf '%s: %s\n' "$SERVICE" "$*" >&2; }
die() { say "error: $*"; exit 1; }

# The script's leading comment block, as its help; exit 2.
usage() {
  sed -n '2,/^[^#]/{/^#/p}' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

# A relative path made absolute against the caller's folder.
absolute() { if [[ "$1" == /* ]]; then echo "$1"; else echo "$PWD/$1"; fi; }

need_java() {
  command -v java >/dev/null 2>&1 ||
    die "java is not on PATH: $JAVA_FOR needs a Java 17+ runtime (Debian: apt-get install -y openjdk-17-jre-headless)"
  local v
  v="$(java -version 2>&1 | sed -n '1s/.*version "\([0-9]*\).*/\1/p' || true)"
  if [[ -n "$v" && "$v" -lt 17 ]]; then
    die "java on PATH is version $v; $JAVA_FOR needs Java 17 or newer"
  fi
}

# Hash of what decides a fetch or build; stored in STAMP after a complete one.
pom_hash() { sha256sum "$POM" | cut -d' ' -f1; }

# True when STAMP ($1) says the folder holds what the current pom.xml makes.
pom_current() { [[ -f "$1" && "$(cat "$1")" == "$(pom_hash)" ]]; }

# Before a fetch or build of WHAT ($1, e.g. "the registry in DIR is"): mvn and java are there.
need_maven() {
  command -v mvn >/dev/null 2>&1 ||
    die "$1 missing or older than pom.xml, and mvn is not on PATH (Debian: apt-get install -y maven)"
  need_java
}

# run_maven LOG TO ARGS...: mvn -B -f $POM ARGS, its output in LOG; when it fails, its [ERROR]
# lines (else its last 40) and one line: Maven could not TO (full output: LOG).
run_maven() {
  local log="$1" to="$2"
  shift 2
  if ! mvn -B -f "$POM" "$@" >"$log" 2>&1; then
    grep -E '^\[ERROR\]' "$log" | head -n 20 >&2 || tail -n 40 "$log" >&2 || true
    die "Maven could not $to (full output: $log)"
  fi
}

# install_built FRESH DEST: FRESH, stamped with the pom's hash, replaces DEST in one move; the
# EXIT trap that removed a half-made FRESH is cleared.
install_built() {
  pom_hash >"$1/.complete"
  rm -rf "$2"
  mv "$1" "$2"
  trap - EXIT
}

# Something accepts TCP connections on port $1 of $HOST? (bash's /dev/tcp, bounded to 2 s)
port_open() { timeout 2 bash -c "exec 3<>/dev/tcp/$HOST/$1" 2>/dev/null; }

# Which process listens on port $1 (as ss tells it, when it can), for messages.
port_owner() {
  if command -v ss >/dev/null 2>&1; then
    ss -Hltnp "sport = :$1" 2>/dev/null | sed -n '1s/.*users:((\(.*\)))/\1/p' || true
  fi
}

# Pid of this instance's process if it is alive, else nothing (a stale pid file is removed).
service_pid() {
  [[ -f "$PIDFILE" ]] || return 0
  local pid cmdline=""
  pid="$(cat "$PIDFILE" 2>/dev/null || true)"
  if [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null; then
    cmdline="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null || true)"
  fi
  if [[ -n "$cmdline" ]] && owns_cmdline "$cmdline"; then
    echo "$pid"
  else
    rm -f "$PIDFILE"
  fi
}

# One start or stop of the instance at a time (fd 9; the started process must not inherit it).
with_lock() {
  mkdir -p "$DATA"
  exec 9>"$LOCKFILE"
  flock -w "$LOCK_WAIT" 9 || die "another $SERVICE holds $LOCKFILE for too long"
}

# The end of start-up when port $1 is taken by a process that is not this instance: one line
# saying whose it is and, when a $WHAT of another checkout serves there, that ensure uses it.
refuse_taken_port() {
  local owner
  owner="$(port_owner "$1")"
  if [[ "$1" == "${ADDRESS##*:}" ]] && serves; then
    die "a $WHAT of another checkout${owner:+ ($owner)} already serves $ADDRESS: \`$SERVICE ensure\` uses it (and leaves it running); \`start\` starts this checkout's own, on another port ($PORT_KNOB)"
  fi
  die "port $HOST:$1 is taken by another process${owner:+ ($owner)}, not by this $WHAT; stop it or set $PORT_KNOB"
}

# Run CMD in the background as this instance: stdin from /dev/null and both outputs appended to
# LOG ($1), so it never holds the caller's terminal or pipe; the lock (fd 9) is not inherited.
# Its pid goes to PIDFILE and SPAWNED.
spawn() {
  local log="$1"
  shift
  nohup "$@" </dev/null >>"$log" 2>&1 9>&- &
  SPAWNED=$!
  echo "$SPAWNED" >"$PIDFILE"
}

# Wait, at most START_TIMEOUT seconds from STARTED ($2, in $SECONDS), until process PID ($1)
# serves; when it exits first or the time is up (then it is stopped), its log and one line.
wait_ready() {
  local pid="$1" deadline=$(($2 + START_TIMEOUT))
  while ! serves; do
    if ! kill -0 "$pid" 2>/dev/null; then
      rm -f "$PIDFILE"
      show_start_log
      die "the $WHAT exited during start-up (see above; full log: $LOG)"
    fi
    if ((SECONDS >= deadline)); then
      show_start_log
      say "stopping the $WHAT that did not become ready"
      kill_and_wait "$pid"
      die "the $WHAT $NOT_READY within ${START_TIMEOUT}s"
    fi
    sleep "$POLL"
  done
}

# Start this instance and wait until it serves; when it runs already, only wait. Refuses, naming
# the port and its owner, when a port of PORTS is taken by another process.
cmd_start() {
  prepare
  with_lock
  local pid
  pid="$(service_pid)"
  if [[ -n "$pid" ]]; then
    wait_ready "$pid" "$SECONDS"
    say "already running (pid $pid) on $ADDRESS"
    return 0
  fi
  local p t0=$SECONDS
  for p in "${PORTS[@]}"; do
    if port_open "$p"; then refuse_taken_port "$p"; fi
  done
  launch
  wait_ready "$SPAWNED" "$t0"
  say "$(ready_line) (pid $SPAWNED, $((SECONDS - t0))s)"
}

kill_and_wait() {
  local pid="$1" waited=0
  kill -TERM "$pid" 2>/dev/null || return 0
  while kill -0 "$pid" 2>/dev/null; do
    if ((waited >= STOP_TIMEOUT * 10)); then
      say "$WHAT (pid $pid) ignored SIGTERM for ${STOP_TIMEOUT}s, sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      break
    fi
    sleep 0.1
    waited=$((waited + 1))
  done
  while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
  rm -f "$PIDFILE"
}

# Stop this instance (another checkout's is never touched).
cmd_stop() {
  with_lock
  local pid
  pid="$(service_pid)"
  if [[ -z "$pid" ]]; then
    if serves; then
      say "not running here (the $WHAT serving $ADDRESS is another checkout's: left running)"
    else
      say "not running"
    fi
    return 0
  fi
  kill_and_wait "$pid"
  say "stopped (pid $pid)"
}

# Exit 0 when this instance runs and serves, 1 when it runs but does not serve yet, 3 when it
# does not run (saying whether another process holds its address).
cmd_status() {
  local pid
  pid="$(service_pid)"
  if [[ -z "$pid" ]]; then
    if serves; then
      say "not running here; a $WHAT of another checkout serves $ADDRESS (\`$SERVICE ensure\` uses it)"
    elif port_open "${ADDRESS##*:}"; then
      say "not running (port ${ADDRESS##*:} is used by another process)"
    else
      say "not running"
    fi
    return 3
  fi
  if serves; then
    say "running (pid $pid), serving $ADDRESS"
    return 0
  fi
  say "running (pid $pid) but not serving $ADDRESS yet"
  return 1
}

# tail LOG, 100 lines unless told otherwise (-f, -n N).
cmd_logs() {
  [[ -f "$LOG" ]] || die "no log yet ($LOG)"
  (($# > 0)) || set -- -n 100
  exec tail "$@" "$LOG"
}

# start, unless a $WHAT of another checkout already serves the address: then use it, leave it running.
cmd_ensure() {
  if [[ -z "$(service_pid)" ]] && serves; then
    say "a $WHAT already serves $ADDRESS (not started here): using it, leaving it running"
    return 0
  fi
  cmd_start
}

# Run CMD with an instance: this checkout's (waited for), another checkout's that serves the
# address, or one started here and stopped afterwards. CMD's exit code is kept.
service_with() {
  (($# > 0)) || die "usage: $SERVICE with CMD [ARGS...]"
  if [[ -n "$(service_pid)" ]]; then
    (cmd_start) # waits until it serves, in case another invocation is still starting it
    exec "$@"
  fi
  if serves; then
    say "a $WHAT already serves $ADDRESS (not started here): using it"
    exec "$@"
  fi
  (cmd_start)
  trap '(cmd_stop) || true' EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  local rc=0
  "$@" || rc=$?
  exit "$rc"
}

# The command line: a shared command, one of the script's COMMANDS, or help.
service_main() {
  (($# > 0)) || usage
  local cmd="$1" known
  shift
  for known in start ensure stop status logs with $COMMANDS; do
    if [[ "$cmd" == "$known" ]]; then
      "cmd_$cmd" "$@"
      return
    fi
  done
  case "$cmd" in
    -h | --help | help) usage ;;
    *) say "unknown command: $cmd"; usage ;;
  esac
}
