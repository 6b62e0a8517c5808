# shellcheck shell=bash
# The process handling ops/kafka/kafka.sh and ops/registry/registry.sh share: the pid file of an
# instance, its lock, a port held by another process, stop, status, logs, ensure and with.
# Sourced, never run. The sourcing script sets, before calling any function here:
#
#   SERVICE       its name in messages (kafka.sh)
#   WHAT          what it runs (broker, registry)
#   ADDRESS       where the instance serves, for messages (127.0.0.1:19092, http://127.0.0.1:18081)
#   HOST          the address ports are checked on (127.0.0.1)
#   DATA PIDFILE LOCKFILE   the instance's folder, pid file and lock file
#   STOP_TIMEOUT  seconds between SIGTERM and SIGKILL
#   LOCK_WAIT     seconds to wait for another invocation holding the lock
#   PORT_KNOB     the variable that selects another port (TOOLGATE_KAFKA_PORT), for messages
#
# and defines:
#
#   owns_cmdline CMDLINE   true when CMDLINE (a /proc cmdline, spaces between) is this instance's
#   serves                 true when something serving the service's protocol answers at ADDRESS
#   cmd_start              start the instance (when not running) and wait until it serves

say() { printf '%s: %s\n' "$SERVICE" "$*" >&2; }
die() { say "error: $*"; exit 1; }

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

# tail FILE, 100 lines unless told otherwise (-f, -n N).
service_logs() {
  local file="$1"
  shift
  [[ -f "$file" ]] || die "no log yet ($file)"
  (($# > 0)) || set -- -n 100
  exec tail "$@" "$file"
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
