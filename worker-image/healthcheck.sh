#!/bin/sh
# Container health: a load-balanced worker answers GET /ping on FERRY_PORT; a queue worker has no port
# (it pulls work), so for it "the process is running" is the whole check and the platform's leases do
# the rest. ECS uses the task definition's healthCheck, which runs this same script.
if [ "${FERRY_MODE:-queue}" = "lb" ]; then
  exec curl --fail --silent --max-time 4 --output /dev/null "http://127.0.0.1:${FERRY_PORT:-8080}/ping"
fi
exit 0
