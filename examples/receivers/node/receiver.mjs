// A receiver of the fulfillment service's outbox webhooks, Node.js standard
// library only.
//
// Every delivery is a POST of a JSON body signed as Standard Webhooks define:
// the headers webhook-id, webhook-timestamp and webhook-signature, the last
// one holding space-separated "v1,<base64 HMAC-SHA256>" entries computed over
// "<webhook-id>.<webhook-timestamp>.<raw body>" with the destination's secret.
//
// Environment:
//   WEBHOOK_SECRET  the destination's secret, "whsec_<base64>" (required)
//   BIND_ADDRESS    address to listen on (default 127.0.0.1)
//   PORT            port to listen on (default 8000; 0 picks a free one)
//
// It prints "listening on http://<address>:<port>" once it serves, then one
// line per message: "handled <webhook-id> <type>" once a message is handled,
// and "duplicate <webhook-id>" when a message handled before arrives again.
// Refused requests are reported on stderr with their status and reason.
// Neither the body nor the secret is ever printed.

import { createHmac, timingSafeEqual } from 'node:crypto';
import { createServer } from 'node:http';

const TOLERANCE_SECONDS = 5 * 60; // how far webhook-timestamp may be from our clock, either way
const MAX_BODY_BYTES = 1 << 20;
const MAX_ID_BYTES = 256;
const SECRET_PREFIX = 'whsec_';
const BASE64_SHA256 = /^[A-Za-z0-9+/]{43}=$/; // 32 bytes, padded

class Refused extends Error {
  constructor(status, reason) {
    super(reason);
    this.status = status;
  }
}

function loadKey(text) {
  if (!text.startsWith(SECRET_PREFIX)) {
    throw new Error(`WEBHOOK_SECRET must start with ${SECRET_PREFIX}`);
  }
  const encoded = text.slice(SECRET_PREFIX.length);
  // Buffer.from skips what is not base64: insist on the canonical form.
  const key = Buffer.from(encoded, 'base64');
  if (encoded === '' || key.toString('base64') !== encoded) {
    throw new Error('the part of WEBHOOK_SECRET after whsec_ is not base64');
  }
  return key;
}

function oneHeader(headers, name) {
  // Node joins repeated headers with ", ": such a value fails the checks below.
  const value = headers[name];
  if (typeof value !== 'string' || value === '') {
    throw new Refused(400, `exactly one non-empty ${name} header is required`);
  }
  return value;
}

// verify checks the signature and the timestamp; it returns the webhook-id.
function verify(key, headers, body, nowSeconds) {
  const id = oneHeader(headers, 'webhook-id');
  const timestamp = oneHeader(headers, 'webhook-timestamp');
  const signatures = oneHeader(headers, 'webhook-signature');
  if (id.length > MAX_ID_BYTES || !/^[!-~]+$/.test(id)) {
    throw new Refused(400, 'webhook-id must be printable ASCII without spaces');
  }
  if (!/^[0-9]{1,18}$/.test(timestamp)) {
    throw new Refused(400, 'webhook-timestamp must be unix seconds');
  }
  if (Math.abs(nowSeconds - Number(timestamp)) > TOLERANCE_SECONDS) {
    throw new Refused(401, 'webhook-timestamp is outside the tolerance');
  }

  const expected = createHmac('sha256', key)
    .update(`${id}.${timestamp}.`)
    .update(body) // the raw bytes, exactly as sent: they are what was signed
    .digest();
  let matched = false;
  // Several signatures when the sender signs with more than one secret
  // (during a rotation): one that matches is enough.
  for (const entry of signatures.split(/\s+/)) {
    const comma = entry.indexOf(',');
    if (comma < 0 || entry.slice(0, comma) !== 'v1') continue;
    const encoded = entry.slice(comma + 1);
    if (!BASE64_SHA256.test(encoded)) continue;
    if (timingSafeEqual(expected, Buffer.from(encoded, 'base64'))) matched = true;
  }
  if (!matched) throw new Refused(401, 'no signature matches');
  return id;
}

// handle is the business action: here, nothing but the line that says it was
// done. A real receiver applies the message here (ships the line, grants the
// access) and records its webhook-id in the same database transaction.
function handle(message) {
  void message; // the payload is yours to act on; never log it whole
}

// webhook-ids handled so far. In memory for the example: forgotten on restart,
// so a redelivery after a restart is handled again. A real receiver keeps them
// in its database, with a unique constraint.
const handled = new Set();

// receive runs to the end without awaiting, so two copies of a message
// cannot both be handled: Node runs one of them at a time.
function receive(key, headers, body) {
  const id = verify(key, headers, body, Date.now() / 1000);
  let message;
  try {
    message = JSON.parse(body.toString('utf8'));
  } catch {
    throw new Refused(400, 'the body is not JSON');
  }
  if (message === null || typeof message !== 'object' || typeof message.type !== 'string') {
    throw new Refused(400, 'the body has no type');
  }
  if (handled.has(id)) {
    console.log(`duplicate ${id}`);
    return;
  }
  handle(message); // an exception here is a 500: the sender retries
  handled.add(id);
  console.log(`handled ${id} ${message.type}`);
}

function refuse(res, status, reason, close) {
  console.error(`refused ${status} ${reason}`);
  const headers = { 'Content-Type': 'text/plain; charset=utf-8' };
  if (close) headers.Connection = 'close';
  res.writeHead(status, headers);
  res.end(`${reason}\n`);
}

function serve(key) {
  return createServer((req, res) => {
    if (req.method !== 'POST') {
      res.writeHead(405, { Allow: 'POST', 'Content-Length': '0' });
      res.end();
      req.resume();
      return;
    }
    if (Number(req.headers['content-length'] ?? 0) > MAX_BODY_BYTES) {
      refuse(res, 413, `the body is larger than ${MAX_BODY_BYTES} bytes`, true);
      req.resume();
      return;
    }
    const chunks = [];
    let size = 0;
    let tooLarge = false;
    req.on('data', (chunk) => {
      size += chunk.length;
      if (size > MAX_BODY_BYTES) {
        tooLarge = true;
        return; // drop the rest; refused once it ends
      }
      chunks.push(chunk);
    });
    req.on('end', () => {
      if (tooLarge) {
        refuse(res, 413, `the body is larger than ${MAX_BODY_BYTES} bytes`, true);
        return;
      }
      try {
        receive(key, req.headers, Buffer.concat(chunks));
      } catch (e) {
        if (e instanceof Refused) refuse(res, e.status, e.message, false);
        else refuse(res, 500, 'the message could not be handled', false);
        return;
      }
      res.writeHead(204);
      res.end();
    });
  });
}

function main() {
  let key;
  try {
    key = loadKey(process.env.WEBHOOK_SECRET ?? '');
  } catch (e) {
    console.error(`receiver: ${e.message}`);
    process.exit(2);
  }
  const host = process.env.BIND_ADDRESS || '127.0.0.1';
  const port = Number(process.env.PORT ?? 8000);
  const server = serve(key);
  server.listen(port, host, () => {
    const addr = server.address();
    console.log(`listening on http://${addr.address}:${addr.port}`);
  });
}

main();
