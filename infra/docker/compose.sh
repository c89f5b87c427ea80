#!/usr/bin/env bash
# docker compose for infra/docker/docker-compose.yml with credentials generated on first use.
#
#   bash infra/docker/compose.sh up --build      (any docker compose arguments)
#
# The first call writes random passwords and keys, owner-only (mode 0600), to
# $OOO_LOCAL/docker/compose.env: MinIO's root user (buckets, users, policies), the pipeline's own
# MinIO user (the deployment's buckets only), PostgreSQL's password. Later calls reuse them. The
# compose file refuses to start without them; nothing in the repository is a credential.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/../env.sh"
envfile="$OOO_LOCAL/docker/compose.env"
if [ ! -s "$envfile" ]; then
  mkdir -p "$(dirname "$envfile")"
  (umask 077; "$OOO_PYTHON" -c 'import secrets
t = secrets.token_urlsafe
print(f"MINIO_ROOT_USER=root-{secrets.token_hex(4)}")
print(f"MINIO_ROOT_PASSWORD={t(30)}")
print(f"PIPELINE_ACCESS_KEY=pipeline-{secrets.token_hex(4)}")
print(f"PIPELINE_SECRET_KEY={t(30)}")
print(f"POSTGRES_PASSWORD={t(30)}")' >"$envfile.tmp")
  mv "$envfile.tmp" "$envfile"
  echo "[compose] credentials generated into $envfile (owner-only)"
fi
exec docker compose --env-file "$envfile" -f "$here/docker-compose.yml" "$@"
