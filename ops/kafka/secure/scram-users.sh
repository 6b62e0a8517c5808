#!/usr/bin/env bash
# Creates (or updates) the SCRAM-SHA-512 credentials of docker-compose.secure.yml's users.
#
# Runs in the kafka-users service, which shares the broker container's network namespace:
# 127.0.0.1:9092 is the broker's loopback-only PLAINTEXT listener (User:ANONYMOUS, a super
# user there), which nothing outside that namespace can reach.
#
# SCRAM_USERS: name:password,... (compose fills it in from .env). Passwords of letters,
# digits, '-' and '_' only (nothing kafka-configs.sh's --add-config parser treats specially).
set -euo pipefail

: "${SCRAM_USERS:?name:password,... of every SCRAM user}"
BOOTSTRAP="${SCRAM_BOOTSTRAP:-127.0.0.1:9092}"
KAFKA_CONFIGS="${KAFKA_CONFIGS:-/opt/kafka/bin/kafka-configs.sh}"

IFS=, read -ra users <<<"$SCRAM_USERS"
for user in "${users[@]}"; do # all checked before any is created
  if [[ ! "$user" =~ ^[A-Za-z0-9._-]+:[A-Za-z0-9_-]+$ ]]; then
    echo "scram-users.sh: SCRAM_USERS entry '${user%%:*}' is not name:password (password [A-Za-z0-9_-]+)" >&2
    exit 1
  fi
done
for user in "${users[@]}"; do
  "$KAFKA_CONFIGS" --bootstrap-server "$BOOTSTRAP" --alter --entity-type users --entity-name "${user%%:*}" \
    --add-config "SCRAM-SHA-512=[iterations=8192,password=${user#*:}]"
done
echo "scram-users.sh: ${#users[@]} SCRAM-SHA-512 users ready"
