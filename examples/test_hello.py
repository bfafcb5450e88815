"""Tests for examples/hello: the functions behind both endpoints."""

import unittest

from _support import load_handler


class HelloTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.hello = load_handler("hello", "hello.py")

    def test_greet(self):
        self.assertEqual(self.hello.greet.local(name="Ada"), {"greeting": "Hello, Ada!"})
        self.assertEqual(self.hello.greet.local(), {"greeting": "Hello, world!"})

    def test_echo_and_health(self):
        self.assertEqual(self.hello.echo.local(text="hi", n=3), {"echo": {"text": "hi", "n": 3}})
        self.assertEqual(self.hello.health.local(), {"status": "ok"})


if __name__ == "__main__":
    unittest.main()
