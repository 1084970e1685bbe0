#!/usr/bin/env bash
# Keys and a TLS certificate for deploy/compose.yaml (or any lead and its backs).
#
#   deploy/make-secrets.sh [DIR] [HOSTNAME...]
#
# DIR (default deploy/secrets) gets:
#   api_key       the API's Bearer key (clients send it; backs may too)
#   drafter_key   a key that can draft for the lead but not use its API (for the backs)
#   tls_key.pem   the lead's private key
#   tls_cert.pem  its self-signed certificate, for the hostnames given (default: lead,
#                 localhost) and 127.0.0.1; the backs and clients trust it with --ca-file
# Existing files are kept: run it again and nothing changes.
set -euo pipefail
DIR=${1:-$(dirname "$0")/secrets}
shift || true
NAMES=("${@:-lead}")
mkdir -p "$DIR"
umask 077
key() { [[ -s "$DIR/$1" ]] || openssl rand -hex 24 > "$DIR/$1"; }
key api_key
key drafter_key
if [[ ! -s "$DIR/tls_cert.pem" ]]; then
  SAN="DNS:localhost,IP:127.0.0.1"
  for name in "${NAMES[@]}"; do SAN="DNS:$name,$SAN"; done
  openssl req -x509 -newkey rsa:2048 -nodes -days 825 -subj "/CN=${NAMES[0]}" \
    -addext "subjectAltName=$SAN" \
    -keyout "$DIR/tls_key.pem" -out "$DIR/tls_cert.pem" 2>/dev/null
fi
chmod 644 "$DIR/tls_cert.pem"
echo "secrets in $DIR"
