#!/usr/bin/env bash
# The local toolgate worker for `make run`: start | stop | status | logs.
# Runs `toolgate run` in the background on the bundled contracts and the sample
# keyring, logs JSON lines to ops/.run/worker.log, and waits until /readyz answers.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
run_dir="$here/.run"
pid_file="$run_dir/worker.pid"
log_file="$run_dir/worker.log"
bin="$root/.venv/bin"
port="${TOOLGATE_METRICS_PORT:-9464}"

running() { [[ -f "$pid_file" ]] && kill -0 "$(cat "$pid_file")" 2>/dev/null; }

ready() {
  "$bin/python" - "$port" <<'PY'
import sys, urllib.request
try:
    urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/readyz", timeout=2)
except Exception:
    sys.exit(1)
PY
}

start() {
  if running; then echo "worker.sh: already running (pid $(cat "$pid_file"))"; return 0; fi
  mkdir -p "$run_dir"
  cd "$root"
  nohup "$bin/toolgate" run --contracts "$root/contracts" \
    --keyring "$root/contracts/fixtures-keyring.toml" >>"$log_file" 2>&1 &
  echo $! >"$pid_file"
  for _ in $(seq 1 120); do
    if ! running; then
      echo "worker.sh: the worker exited; last log lines:" >&2; tail -n 20 "$log_file" >&2; exit 1
    fi
    if ready; then echo "worker.sh: worker ready (pid $(cat "$pid_file")), metrics on :$port"; return 0; fi
    sleep 0.5
  done
  echo "worker.sh: not ready after 60 s; see $log_file" >&2
  exit 1
}

stop() {
  if ! running; then rm -f "$pid_file"; echo "worker.sh: not running"; return 0; fi
  local pid; pid="$(cat "$pid_file")"
  kill -TERM "$pid"
  for _ in $(seq 1 60); do
    kill -0 "$pid" 2>/dev/null || { rm -f "$pid_file"; echo "worker.sh: stopped"; return 0; }
    sleep 0.5
  done
  kill -KILL "$pid" 2>/dev/null || true
  rm -f "$pid_file"
  echo "worker.sh: killed after 30 s"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) if running; then echo "worker.sh: running (pid $(cat "$pid_file"))"; else echo "worker.sh: not running"; exit 1; fi ;;
  logs) tail -n "${2:-50}" "$log_file" ;;
  *) echo "usage: ops/worker.sh start|stop|status|logs [N]" >&2; exit 2 ;;
esac
