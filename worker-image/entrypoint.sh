#!/bin/sh
# Worker container entrypoint: fetch the app artifact, unpack it into the app dir, start the runtime.
#
#   FERRY_ARTIFACT_URL   where to download artifact.tar.gz from (a presigned S3 URL on AWS), or
#   FERRY_ARTIFACT_PATH  a mounted archive (default /ferry/artifact.tar.gz; `ferry deploy --preview`), or
#   neither              the app is already in FERRY_APP_DIR (an image with the app baked in).
#   FERRY_APP_DIR        where the app lives (default /app); the runtime imports FERRY_MODULE from it.
#
# The rest of the environment (FERRY_MODE, FERRY_MODULE, FERRY_TARGET or FERRY_VARIABLE, the
# RUNPOD_WEBHOOK_* URLs, RUNPOD_AI_API_KEY) is set by the platform or the agent and read by
# `python -m ferry.worker`, which this script becomes (exec) so that it receives SIGTERM directly.
set -eu

say() { printf 'ferry-entrypoint: %s\n' "$*" >&2; }
die() { say "$1"; exit "${2:-1}"; }

app_dir="${FERRY_APP_DIR:-/app}"
artifact_path="${FERRY_ARTIFACT_PATH:-/ferry/artifact.tar.gz}"
python="${FERRY_PYTHON:-python}"
here="$(cd "$(dirname "$0")" && pwd)"

mkdir -p "$app_dir" || die "cannot create FERRY_APP_DIR $app_dir" 2
download=""
cleanup() { if [ -n "$download" ]; then rm -f "$download"; fi; }
trap cleanup EXIT

if [ -n "${FERRY_ARTIFACT_URL:-}" ]; then
  download="$(mktemp "${TMPDIR:-/tmp}/ferry-artifact.XXXXXX")"
  # Never print the URL: a presigned URL is a credential until it expires.
  say "downloading the artifact"
  curl --fail --silent --show-error --location --retry 5 --retry-connrefused --retry-delay 2 \
    --connect-timeout 10 --max-time "${FERRY_ARTIFACT_TIMEOUT_SEC:-900}" \
    --output "$download" "$FERRY_ARTIFACT_URL" || die "artifact download failed (FERRY_ARTIFACT_URL)"
  archive="$download"
elif [ -f "$artifact_path" ]; then
  archive="$artifact_path"
elif [ -n "$(ls -A "$app_dir" 2>/dev/null)" ]; then
  archive=""
  say "no artifact given; running the app already in $app_dir"
else
  die "no artifact: set FERRY_ARTIFACT_URL or mount one at $artifact_path" 2
fi

if [ -n "$archive" ]; then
  # Python's tarfile 'data' filter refuses absolute paths, '..', links that leave the folder and device
  # files: an archive cannot write outside the app dir.
  "$python" "$here/unpack_artifact.py" "$archive" "$app_dir" || die "cannot unpack the artifact"
fi
cleanup
download=""

cd "$app_dir"
export FERRY_APP_DIR="$app_dir"
exec "$python" -m ferry.worker "$@"
