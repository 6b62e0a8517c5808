#!/usr/bin/env bash
# Throw-away TLS material for Kafka, made with openssl (nothing here is ever committed).
#
#   make-certs.sh compose         what docker-compose.secure.yml mounts, in this folder:
#                                 ca.key, client/ca.pem, broker/kafka.keystore.p12 (names kafka
#                                 and localhost), broker/keystore_creds; existing files are kept
#   make-certs.sh local DIR       the local TLS broker's set (kafka.sh with TOOLGATE_KAFKA_SSL_PORT
#                                 or TOOLGATE_KAFKA_SASL_SSL_PORT makes it in DIR on first start):
#     ca.pem, ca.key              the CA clients trust (TOOLGATE_SECURITY_SSL_CAFILE)
#     broker.p12                  the broker's key and certificate for localhost and 127.0.0.1
#     broker-other-host.p12       a certificate of the same CA for another host name only
#     broker-expired.p12          a certificate of the same CA for localhost/127.0.0.1, expired
#     keystore.pass               the password of the three keystores
#     admin.pem/.key, toolgate.pem/.key   client certificates (CN=admin, CN=toolgate) for mutual
#                                 TLS; the broker maps CN=NAME to the principal User:NAME
#     other-ca.pem, other-ca.key  a second CA that signed nothing the broker presents
#
# Keys and password files are created with umask 077 (readable by their owner only).
# Requires openssl 1.1.1 or newer (`openssl ca` backdates the expired certificate).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
say() { printf 'make-certs.sh: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

command -v openssl >/dev/null 2>&1 || die "openssl is not on PATH (Debian: apt-get install -y openssl)"
umask 077

# new_ca DIR NAME CN: a self-signed CA, NAME.pem and NAME.key in DIR.
new_ca() {
  openssl req -x509 -newkey rsa:2048 -sha256 -days 3650 -nodes -subj "/CN=$3" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -keyout "$1/$2.key" -out "$1/$2.pem" 2>/dev/null
  chmod 644 "$1/$2.pem"
}

# sign DIR CA NAME CN EXTENSIONS [STARTDATE ENDDATE]: a key NAME.key and a certificate NAME.pem
# signed by CA (CA.pem/CA.key in DIR); with the dates, valid exactly then (`openssl ca`).
sign() {
  local dir="$1" ca="$2" name="$3" cn="$4" ext="$5" start="${6:-}" end="${7:-}"
  local work="$dir/.work-$name"
  mkdir -p "$work"
  openssl req -newkey rsa:2048 -sha256 -nodes -subj "/CN=$cn" -keyout "$dir/$name.key" \
    -out "$work/req.csr" 2>/dev/null
  printf '%s\n' "$ext" >"$work/ext.cnf"
  if [[ -z "$start" ]]; then
    openssl x509 -req -in "$work/req.csr" -CA "$dir/$ca.pem" -CAkey "$dir/$ca.key" -set_serial "0x$(openssl rand -hex 8)" \
      -days 825 -sha256 -extfile "$work/ext.cnf" -out "$dir/$name.pem" 2>/dev/null
  else
    : >"$work/index.txt"
    cat >"$work/ca.cnf" <<EOF
[ca]
default_ca = local
[local]
database = $work/index.txt
new_certs_dir = $work
serial = $work/serial
default_md = sha256
policy = any
copy_extensions = none
unique_subject = no
[any]
commonName = supplied
EOF
    openssl rand -hex 8 >"$work/serial"
    openssl ca -batch -notext -config "$work/ca.cnf" -cert "$dir/$ca.pem" -keyfile "$dir/$ca.key" \
      -startdate "$start" -enddate "$end" -extfile "$work/ext.cnf" -in "$work/req.csr" \
      -out "$dir/$name.pem" 2>"$work/ca.log" || { cat "$work/ca.log" >&2; die "openssl ca failed"; }
  fi
  chmod 644 "$dir/$name.pem"
  rm -rf "$work"
}

# keystore DIR NAME CA PASSFILE: NAME.key + NAME.pem + CA.pem into NAME.p12 (PKCS12, alias NAME).
keystore() {
  openssl pkcs12 -export -name "$2" -in "$1/$2.pem" -inkey "$1/$2.key" -certfile "$1/$3.pem" \
    -passout "file:$4" -out "$1/$2.p12"
}

SERVER_EXT='basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth'
CLIENT_EXT='basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth'

cmd_local() {
  local dir="$1"
  mkdir -p "$dir"
  dir="$(cd "$dir" && pwd)"
  if [[ -f "$dir/.complete" ]]; then
    return 0
  fi
  new_ca "$dir" ca "toolgate local test CA"
  new_ca "$dir" other-ca "toolgate other CA"
  openssl rand -hex 16 >"$dir/keystore.pass"
  sign "$dir" ca broker localhost "$SERVER_EXT
subjectAltName=DNS:localhost,IP:127.0.0.1"
  sign "$dir" ca broker-other-host other.example.invalid "$SERVER_EXT
subjectAltName=DNS:other.example.invalid"
  sign "$dir" ca broker-expired localhost "$SERVER_EXT
subjectAltName=DNS:localhost,IP:127.0.0.1" 20200101000000Z 20200102000000Z
  local name
  for name in broker broker-other-host broker-expired; do
    keystore "$dir" "$name" ca "$dir/keystore.pass"
    rm -f "$dir/$name.key"
  done
  sign "$dir" ca admin admin "$CLIENT_EXT"
  sign "$dir" ca toolgate toolgate "$CLIENT_EXT"
  touch "$dir/.complete"
  say "TLS material for the local broker in $dir"
}

cmd_compose() {
  local dir="$HERE"
  mkdir -p "$dir/broker" "$dir/client"
  if [[ -f "$dir/broker/kafka.keystore.p12" && -f "$dir/client/ca.pem" ]]; then
    say "$dir/broker/kafka.keystore.p12 and $dir/client/ca.pem exist: kept (delete them to make new ones)"
    return 0
  fi
  [[ -f "$dir/ca.key" && -f "$dir/client/ca.pem" ]] || {
    new_ca "$dir" ca "toolgate compose CA"
    mv "$dir/ca.pem" "$dir/client/ca.pem"
  }
  [[ -f "$dir/broker/keystore_creds" ]] || openssl rand -hex 24 >"$dir/broker/keystore_creds"
  cp "$dir/client/ca.pem" "$dir/ca.pem"
  sign "$dir" ca broker kafka "$SERVER_EXT
subjectAltName=DNS:kafka,DNS:localhost"
  openssl pkcs12 -export -name kafka -in "$dir/broker.pem" -inkey "$dir/broker.key" -certfile "$dir/ca.pem" \
    -passout "file:$dir/broker/keystore_creds" -out "$dir/broker/kafka.keystore.p12"
  rm -f "$dir/broker.key" "$dir/broker.pem" "$dir/ca.pem"
  chmod 644 "$dir/client/ca.pem"
  say "made ca.key, client/ca.pem, broker/kafka.keystore.p12 and broker/keystore_creds in $dir"
  say "next: file ownership for the containers and .env, see $dir/README.md"
}

case "${1:-}" in
  local)
    (($# == 2)) || die "usage: make-certs.sh local DIR"
    cmd_local "$2"
    ;;
  compose)
    (($# == 1)) || die "usage: make-certs.sh compose"
    cmd_compose
    ;;
  *)
    sed -n '2,19p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
