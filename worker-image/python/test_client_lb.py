"""Load-balanced routes called from Python (ferry.client.EndpointClient.request): on AWS the name
route's answer carries the endpoint's own HTTPS URL, recorded by `ferry deploy`; the call goes
there with the same key. Locally there is no URL and the call goes to the platform's /lb/<id>.
Two real HTTP servers on 127.0.0.1 stand in for the platform API and the endpoint's front."""

import json
import os
import threading
import unittest
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from unittest import mock

from ferry import Endpoint
from ferry.client import EndpointClient, Platform


class Recorder:
    """A JSON server that records (method, path, query, auth, body) and answers `reply(path)`."""

    def __init__(self, reply):
        self.calls = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def _any(self):
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                parsed = urllib.parse.urlsplit(self.path)
                recorder.calls.append(
                    (self.command, parsed.path, parsed.query, self.headers.get("authorization"), body)
                )
                status, answer = reply(parsed.path)
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = _any

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class LoadBalancedRoutesTest(unittest.TestCase):
    def setUp(self):
        self.front = Recorder(lambda path: (200, {"served": path}))
        # As the API answers the lookup (by name or by id) of an endpoint the AWS provider recorded,
        # and of a local one (test/api/by-name.test.ts).
        cloud = {"id": "cloudapi1", "kind": "lb", "app": "cloud", "env": "production", "name": "api",
                 "url": self.front.url + "/"}
        shop = {"id": "shopapi1", "kind": "lb", "app": "shop", "env": "production", "name": "api"}
        records = {
            "/v2/by-name/cloud/production/api": cloud,
            "/v2/cloudapi1": cloud,
            "/v2/by-name/shop/production/api": shop,
            "/v2/shopapi1": shop,
        }
        self.api = Recorder(
            lambda path: (200, records[path]) if path in records else (200, {"served-by-platform": path})
        )

    def tearDown(self):
        self.front.close()
        self.api.close()

    def test_an_aws_endpoint_is_called_on_its_recorded_url_with_the_same_key(self):
        client = EndpointClient(Platform(self.api.url, "fy_call", "cloud", "production"), name="api")
        self.assertEqual(client.request("POST", "/process", {"x": 1}), {"served": "/process"})
        self.assertEqual(client.request("GET", "/items/7", {"q": "a b"}), {"served": "/items/7"})
        self.assertEqual(
            self.front.calls,
            [
                ("POST", "/process", "", "Bearer fy_call", {"x": 1}),
                ("GET", "/items/7", "q=a+b", "Bearer fy_call", None),
            ],
        )
        # One resolution, then straight to the endpoint's front.
        self.assertEqual([c[1] for c in self.api.calls], ["/v2/by-name/cloud/production/api"])

    def test_a_local_endpoint_is_called_through_the_platforms_lb_route(self):
        client = EndpointClient(Platform(self.api.url, "fy_key", "shop", "production"), name="api")
        self.assertEqual(client.request("POST", "/process", {"x": 2}), {"served-by-platform": "/lb/shopapi1/process"})
        self.assertEqual(self.front.calls, [])

    def test_an_endpoint_given_by_id_is_looked_up_by_id_and_called_where_it_is(self):
        on_aws = EndpointClient(Platform(self.api.url, "fy_key", "cloud", "production"), id="cloudapi1")
        self.assertEqual(on_aws.request("POST", "/process", {"x": 4}), {"served": "/process"})
        self.assertEqual(self.front.calls, [("POST", "/process", "", "Bearer fy_key", {"x": 4})])
        local = EndpointClient(Platform(self.api.url, "fy_key", "shop", "production"), id="shopapi1")
        self.assertEqual(local.request("POST", "/process", {"x": 5}), {"served-by-platform": "/lb/shopapi1/process"})
        self.assertEqual(
            [c[1] for c in self.api.calls], ["/v2/cloudapi1", "/v2/shopapi1", "/lb/shopapi1/process"]
        )

    def test_endpoint_post_from_a_script_resolves_the_same_way(self):
        environ = {"FERRY_API_URL": self.api.url, "FERRY_API_KEY": "fy_user", "FERRY_APP": "cloud", "FERRY_ENV": "production"}
        with mock.patch.dict(os.environ, environ, clear=False):
            os.environ.pop("FERRY_CALL_TOKEN", None)
            answer = Endpoint(name="api").post("/process", {"x": 3})
        self.assertEqual(answer, {"served": "/process"})
        self.assertEqual(self.front.calls[-1], ("POST", "/process", "", "Bearer fy_user", {"x": 3}))


if __name__ == "__main__":
    unittest.main()
