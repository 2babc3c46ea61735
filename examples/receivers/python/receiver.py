#!/usr/bin/env python3
"""A receiver of the fulfillment service's outbox webhooks, standard library only.

Every delivery is a POST of a JSON body signed as Standard Webhooks define:
the headers webhook-id, webhook-timestamp and webhook-signature, the last one
holding space-separated "v1,<base64 HMAC-SHA256>" entries computed over
"<webhook-id>.<webhook-timestamp>.<raw body>" with the destination's secret.

Environment:
  WEBHOOK_SECRET  the destination's secret, "whsec_<base64>" (required)
  BIND_ADDRESS    address to listen on (default 127.0.0.1)
  PORT            port to listen on (default 8000; 0 picks a free one)

It prints "listening on http://<address>:<port>" once it serves, then one line per
message: "handled <webhook-id> <type>" once a message is handled, and
"duplicate <webhook-id>" when a message handled before arrives again. Refused
requests are reported on stderr with their status and reason. Neither the
body nor the secret is ever printed.
"""

import base64
import binascii
import hashlib
import hmac
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOLERANCE_SECONDS = 5 * 60  # how far webhook-timestamp may be from our clock, either way
MAX_BODY_BYTES = 1 << 20
MAX_ID_BYTES = 256
SECRET_PREFIX = "whsec_"


def load_key(text):
    """Returns the key bytes of a "whsec_<base64>" secret."""
    if not text.startswith(SECRET_PREFIX):
        raise ValueError("WEBHOOK_SECRET must start with " + SECRET_PREFIX)
    try:
        return base64.b64decode(text[len(SECRET_PREFIX):], validate=True)
    except binascii.Error:
        raise ValueError("the part of WEBHOOK_SECRET after whsec_ is not base64") from None


class Refused(Exception):
    """A request that is answered with an error status."""

    def __init__(self, status, reason):
        super().__init__(reason)
        self.status = status
        self.reason = reason


def one_header(headers, name):
    values = headers.get_all(name) or []
    if len(values) != 1 or values[0] == "":
        raise Refused(400, "exactly one non-empty %s header is required" % name)
    return values[0]


def verify(key, headers, body, now):
    """Checks the signature and the timestamp; returns the webhook-id."""
    msg_id = one_header(headers, "webhook-id")
    timestamp = one_header(headers, "webhook-timestamp")
    signatures = one_header(headers, "webhook-signature")
    if len(msg_id) > MAX_ID_BYTES or not all("!" <= c <= "~" for c in msg_id):
        raise Refused(400, "webhook-id must be printable ASCII without spaces")
    if len(timestamp) > 18 or not timestamp.isascii() or not timestamp.isdigit():
        raise Refused(400, "webhook-timestamp must be unix seconds")
    if abs(now - int(timestamp)) > TOLERANCE_SECONDS:
        raise Refused(401, "webhook-timestamp is outside the tolerance")

    signed = msg_id.encode() + b"." + timestamp.encode() + b"." + body
    expected = hmac.new(key, signed, hashlib.sha256).digest()
    matched = False
    # Several signatures when the sender signs with more than one secret
    # (during a rotation): one that matches is enough.
    for entry in signatures.split():
        version, _, encoded = entry.partition(",")
        if version != "v1":
            continue
        try:
            candidate = base64.b64decode(encoded, validate=True)
        except binascii.Error:
            continue
        if hmac.compare_digest(expected, candidate):
            matched = True
    if not matched:
        raise Refused(401, "no signature matches")
    return msg_id


def handle(message):
    """The business action: here, nothing but the line that says it was done.

    A real receiver applies the message here (ships the line, grants the
    access) and records its webhook-id in the same database transaction.
    """
    del message  # the payload is yours to act on; never log it whole


class Receiver:
    def __init__(self, key):
        self.key = key
        # webhook-ids handled so far. In memory for the example: forgotten on
        # restart, so a redelivery after a restart is handled again. A real
        # receiver keeps them in its database, with a unique constraint.
        self.handled = set()
        self.lock = threading.Lock()

    def receive(self, headers, body):
        msg_id = verify(self.key, headers, body, time.time())
        try:
            message = json.loads(body)
        except ValueError:
            raise Refused(400, "the body is not JSON") from None
        if not isinstance(message, dict) or not isinstance(message.get("type"), str):
            raise Refused(400, "the body has no type")
        # One message at a time, so that two copies arriving together are
        # not both handled.
        with self.lock:
            if msg_id in self.handled:
                print("duplicate", msg_id, flush=True)
                return
            handle(message)  # an exception here is a 500: the sender retries
            self.handled.add(msg_id)
            print("handled", msg_id, message["type"], flush=True)


def make_handler(receiver):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: every answer states its length

        def do_POST(self):
            try:
                body = self.read_body()
                receiver.receive(self.headers, body)
            except Refused as e:
                self.refuse(e.status, e.reason)
                return
            except Exception:  # pylint: disable=broad-except
                self.refuse(500, "the message could not be handled")
                return
            self.send_response(204)
            self.end_headers()

        def read_body(self):
            length = self.headers.get("Content-Length")
            if length is None or not length.isdigit():
                self.close_connection = True
                raise Refused(411, "a Content-Length is required")
            if int(length) > MAX_BODY_BYTES:
                self.close_connection = True
                raise Refused(413, "the body is larger than %d bytes" % MAX_BODY_BYTES)
            # The raw bytes, exactly as sent: they are what was signed.
            return self.rfile.read(int(length))

        def refuse(self, status, reason):
            print("refused", status, reason, file=sys.stderr, flush=True)
            text = (reason + "\n").encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(text)))
            self.end_headers()
            self.wfile.write(text)

        def not_post(self):
            self.close_connection = True
            self.send_response(405)
            self.send_header("Allow", "POST")
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_PUT = do_PATCH = do_DELETE = do_HEAD = not_post

        def log_message(self, format, *args):  # pylint: disable=redefined-builtin
            pass  # the default logs every request line; this receiver says only what it did

    return Handler


def main():
    try:
        key = load_key(os.environ.get("WEBHOOK_SECRET", ""))
    except ValueError as e:
        print("receiver:", e, file=sys.stderr)
        return 2
    host = os.environ.get("BIND_ADDRESS", "127.0.0.1")
    port = int(os.environ.get("PORT", "8000"))
    server = ThreadingHTTPServer((host, port), make_handler(Receiver(key)))
    print("listening on http://%s:%d" % server.server_address[:2], flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
