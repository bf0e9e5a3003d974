#!/bin/sh
# Write the Redis ACL file from its (commented) template and the passwords in the environment,
# then run the command given (redis-server, or the image's entrypoint).
#
#   REDIS_RELEVO_PASSWORD, REDIS_PRODUCER_PASSWORD, REDIS_OPERATOR_PASSWORD
#       letters and digits only (e.g. `openssl rand -hex 32`): they go into a URL
#       and into the ACL file unescaped.
#   REDIS_VIEWER_PASSWORD
#       the same, for the console's viewer role: unset, that user is left out.
#   REDIS_REPLICA_PASSWORD, REDIS_SENTINEL_PASSWORD
#       the same, for Sentinel deployments only: unset, those users are left out.
#   ACL_TEMPLATE  the template (default: users.acl.in next to this script)
#   ACL_FILE      where the rendered file goes (default: /data/users.acl)
set -eu

here=$(dirname "$0")
template=${ACL_TEMPLATE:-$here/users.acl.in}
target=${ACL_FILE:-/data/users.acl}

drop=""
for name in REDIS_RELEVO_PASSWORD REDIS_PRODUCER_PASSWORD REDIS_OPERATOR_PASSWORD \
            REDIS_VIEWER_PASSWORD REDIS_REPLICA_PASSWORD REDIS_SENTINEL_PASSWORD; do
  eval "value=\${$name:-}"
  case $name:$value in
    REDIS_VIEWER_PASSWORD: | REDIS_REPLICA_PASSWORD: | REDIS_SENTINEL_PASSWORD:)
      user=${name#REDIS_}; user=${user%_PASSWORD}
      drop="$drop -e /@${user}_PASSWORD@/d"
      continue ;;
  esac
  case $value in
    "") echo "start.sh: $name is not set" >&2; exit 1 ;;
    *[!A-Za-z0-9]*) echo "start.sh: $name must be letters and digits only" >&2; exit 1 ;;
  esac
  if [ ${#value} -lt 16 ]; then
    echo "start.sh: $name is shorter than 16 characters" >&2
    exit 1
  fi
done

umask 077
# Redis refuses comments in an ACL file: the template's are dropped here.
# shellcheck disable=SC2086 # $drop is a list of sed arguments
sed -e '/^[[:space:]]*#/d' $drop \
    -e "s/@RELEVO_PASSWORD@/$REDIS_RELEVO_PASSWORD/" \
    -e "s/@PRODUCER_PASSWORD@/$REDIS_PRODUCER_PASSWORD/" \
    -e "s/@OPERATOR_PASSWORD@/$REDIS_OPERATOR_PASSWORD/" \
    -e "s/@VIEWER_PASSWORD@/${REDIS_VIEWER_PASSWORD:-}/" \
    -e "s/@REPLICA_PASSWORD@/${REDIS_REPLICA_PASSWORD:-}/" \
    -e "s/@SENTINEL_PASSWORD@/${REDIS_SENTINEL_PASSWORD:-}/" \
    "$template" > "$target"
exec "$@"
