// Shared bits of the test harness scripts: argument parsing with environment fallbacks,
// and the "one JSON object on stdout, non-zero exit with a clear message" contract.
import { parseArgs } from 'node:util';

// Common options. Environment fallbacks let a caller set the target once:
// ES_URL, ES_API_KEY, ES_INDEX.
export const COMMON_OPTIONS = {
  url: { type: 'string', default: process.env.ES_URL },
  key: { type: 'string', default: process.env.ES_API_KEY ?? '' },
  index: { type: 'string', default: process.env.ES_INDEX },
  query: { type: 'string', default: '' },
  help: { type: 'boolean', short: 'h' },
};

export function args(extra, usage) {
  let values;
  try {
    ({ values } = parseArgs({ options: { ...COMMON_OPTIONS, ...extra }, strict: true }));
  } catch (err) {
    fail(`${err.message}\nusage: ${usage}`, {}, 2);
  }
  if (values.help) {
    console.error(`usage: ${usage}`);
    process.exit(0);
  }
  for (const k of ['url', 'index']) if (!values[k]) fail(`--${k} is required (or ${k === 'url' ? 'ES_URL' : 'ES_INDEX'})\nusage: ${usage}`, {}, 2);
  return values;
}

// Print the result object and exit 0.
export function done(obj) {
  process.stdout.write(JSON.stringify({ ok: true, ...obj }, null, 2) + '\n');
  process.exit(0);
}

// Print {ok: false, error, ...partial} on stdout (so a caller still gets one JSON object),
// the message on stderr, and exit non-zero.
export function fail(message, partial = {}, code = 1) {
  process.stderr.write(`${process.argv[1]?.split('/').pop()}: ${message}\n`);
  process.stdout.write(JSON.stringify({ ok: false, error: message, ...partial }, null, 2) + '\n');
  process.exit(code);
}

// Parse a request body for display: JSON, NDJSON (msearch), or the raw string.
export function parseBody(body) {
  if (body == null || body === '') return null;
  if (typeof body !== 'string') body = Buffer.isBuffer(body) ? body.toString('utf8') : body;
  if (typeof body !== 'string') return body;
  try {
    return JSON.parse(body);
  } catch {
    try {
      return body.split('\n').filter(Boolean).map((l) => JSON.parse(l));
    } catch {
      return body;
    }
  }
}

// Copy headers without the credential's value.
export function redactHeaders(headers = {}) {
  const out = {};
  const entries = typeof headers.entries === 'function' ? [...headers.entries()] : Object.entries(headers);
  for (const [k, v] of entries) {
    out[k] = /^authorization$/i.test(k) ? String(v).replace(/^(\S+)\s.*$/, '$1 <redacted>') : v;
  }
  return out;
}
