#!/bin/sh
# The compose stack's generated secrets (docs/deploy.md, "Secrets"; docs/security.md). The
# one-shot `secrets-init` service runs it before the services that read them, on every
# `docker compose up`: a secret that is missing gets a random value, in a file owned by the
# one user that reads it, mode 0400, in a named volume mounted only into that reader; a
# secret that exists is kept.
#
#   init-secrets.sh               make the missing ones; say where each is
#   init-secrets.sh show NAME     print NAME (e.g. the ingest token, for a gateway's config)
#   init-secrets.sh rotate NAME   replace NAME with a new random value
#   init-secrets.sh set NAME      replace NAME with the value read from stdin
#
# NAME: ingest-token (read by the ingest service, uid 10001, at its start) or
# grafana-admin-password (read by Grafana, uid 472, when it creates its database).
# Run as root only to hand each file to its reader; without root the files stay the
# caller's (the unit tests run it so).
set -eu

root="${SECRETS_ROOT:-/secrets}"
names="ingest-token grafana-admin-password"

path_of() {
  case "$1" in
    ingest-token) echo "$root/ingest/ingest-token" ;;
    grafana-admin-password) echo "$root/grafana/admin-password" ;;
    *)
      echo "unknown secret '$1' (known: $names)" >&2
      exit 2
      ;;
  esac
}

owner_of() {
  case "$1" in
    ingest-token) echo "${INGEST_UID:-10001}:${INGEST_GID:-10001}" ;;
    grafana-admin-password) echo "${GRAFANA_UID:-472}:${GRAFANA_GID:-0}" ;;
  esac
}

# Where each secret is, as its reader and the operator see it.
where_of() {
  case "$1" in
    ingest-token)
      echo "volume ingest-secrets, /run/secrets/anchorwatch/ingest-token in the ingest" \
        "container; gateways send it as 'Authorization: Bearer <token>'"
      ;;
    grafana-admin-password)
      echo "volume grafana-secrets, /run/secrets/anchorwatch/admin-password in the" \
        "grafana container; Grafana's admin logs in with it"
      ;;
  esac
}

random_value() {
  # 32 random bytes as 64 hex digits: fits a header, a URL and a password field.
  od -An -tx1 -N32 /dev/urandom | tr -d ' \n'
}

# write NAME VALUE: atomically, owned by NAME's reader, readable by it only.
write() {
  file=$(path_of "$1")
  if [ -z "$2" ]; then
    echo "$1: an empty value is no secret; nothing written" >&2
    exit 2
  fi
  mkdir -p "$(dirname "$file")"
  (umask 077 && printf '%s' "$2" >"$file.new")
  if [ "$(id -u)" = 0 ]; then
    chown "$(owner_of "$1")" "$file.new"
  fi
  chmod 0400 "$file.new"
  mv -f "$file.new" "$file"
}

command="${1:-init}"
case "$command" in
  init)
    for name in $names; do
      if [ -s "$(path_of "$name")" ]; then
        echo "$name: kept ($(where_of "$name"))"
      else
        write "$name" "$(random_value)"
        echo "$name: generated ($(where_of "$name"))"
      fi
    done
    echo "read one with: docker compose run --rm -T secrets-init show NAME"
    ;;
  show)
    file=$(path_of "${2:?show: which secret? ($names)}")
    if [ ! -s "$file" ]; then
      echo "${2}: not generated yet (docker compose up creates it)" >&2
      exit 1
    fi
    cat "$file"
    echo
    ;;
  rotate)
    name="${2:?rotate: which secret? ($names)}"
    write "$name" "$(random_value)"
    echo "$name: replaced ($(where_of "$name")); restart its reader (docs/security.md)"
    ;;
  set)
    name="${2:?set: which secret? ($names)}"
    path_of "$name" >/dev/null
    write "$name" "$(cat)"
    echo "$name: replaced from stdin ($(where_of "$name")); restart its reader (docs/security.md)"
    ;;
  *)
    echo "usage: init-secrets.sh [init | show NAME | rotate NAME | set NAME] (NAME: $names)" >&2
    exit 2
    ;;
esac
