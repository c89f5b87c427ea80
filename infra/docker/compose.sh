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
  _ooo_make_secrets "$envfile" MINIO_ROOT_USER=root MINIO_ROOT_PASSWORD PIPELINE_ACCESS_KEY=pipeline \
    PIPELINE_SECRET_KEY POSTGRES_PASSWORD
  echo "[compose] credentials generated into $envfile (owner-only)"
fi
exec docker compose --env-file "$envfile" -f "$here/docker-compose.yml" "$@"
