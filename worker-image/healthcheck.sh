#!/bin/sh
# Container health for Docker (the images' HEALTHCHECK): a load-balanced worker answers GET /ping on
# FERRY_PORT; a queue worker has no port (it pulls work), so for it "the process is running" is the
# whole check and the platform's leases do the rest. ECS does not run it: the ECS agent monitors only
# a healthCheck in the task definition, and Ferry's define none
# (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/healthcheck.html). On AWS the load
# balancer's health check (the agent's /ping, docs/aws.md) and the leases judge the worker.
if [ "${FERRY_MODE:-queue}" = "lb" ]; then
  exec curl --fail --silent --max-time 4 --output /dev/null "http://127.0.0.1:${FERRY_PORT:-8080}/ping"
fi
exit 0
