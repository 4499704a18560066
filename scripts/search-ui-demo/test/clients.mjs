// Exercise an Elasticsearch-compatible endpoint with the official Node client, 9.x
// (`@elastic/elasticsearch`) or 8.x (the `es8` npm alias), and print what came back.
//
//   node test/clients.mjs --url U [--key K] --index I --query TEXT [--facet FIELD]
//       [--version 8|9] [--fields title,content] [--dump-requests] [--skip info,...]
//
// Prints one JSON object; exits 1 when any step fails (the intentional bad request must
// fail, and its status/body are reported under "bad_request").
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { args, done, fail, parseBody, redactHeaders } from './lib.mjs';

const USAGE =
  'node test/clients.mjs --url U [--key K] --index I --query TEXT [--facet FIELD] [--version 8|9] ' +
  '[--fields title,content] [--dump-requests] [--skip info,...]';
const a = args(
  {
    version: { type: 'string', default: '9' },
    facet: { type: 'string', default: 'mime_type' },
    fields: { type: 'string', default: 'title,content' },
    'dump-requests': { type: 'boolean', default: false },
    skip: { type: 'string', default: '' },
  },
  USAGE,
);
if (!['8', '9'].includes(a.version)) fail(`--version must be 8 or 9, not ${a.version}`, {}, 2);

// Both majors side by side: "es8" is an npm alias of @elastic/elasticsearch@8.
const pkg = a.version === '8' ? 'es8' : '@elastic/elasticsearch';
const { Client } = await import(pkg);
const here = dirname(fileURLToPath(import.meta.url));
const clientVersion = JSON.parse(readFileSync(join(here, '..', 'node_modules', pkg, 'package.json'), 'utf8')).version;

const client = new Client({
  node: a.url,
  ...(a.key ? { auth: { apiKey: a.key } } : {}), // -> Authorization: ApiKey <key>
  maxRetries: 0, // report the first failure as is
  requestTimeout: 30000,
});

// Record what the client serializes (method, path, query string, headers, body).
// Connection-level headers (Authorization) are added later and are not in these params.
const requests = [];
if (a['dump-requests']) {
  client.diagnostic.on('request', (err, result) => {
    const p = result?.meta?.request?.params;
    if (!p) return;
    requests.push({
      method: p.method,
      path: p.path,
      querystring: p.querystring || '',
      headers: redactHeaders(p.headers),
      body: parseBody(p.body),
    });
  });
}

const out = {
  client: { package: pkg === 'es8' ? '@elastic/elasticsearch (es8 alias)' : pkg, version: clientVersion },
  url: a.url,
  index: a.index,
  query: a.query,
};
const failures = [];
const skip = new Set(a.skip.split(',').filter(Boolean));

function errorInfo(err) {
  return {
    name: err?.name,
    message: err?.message,
    statusCode: err?.meta?.statusCode ?? null,
    body: err?.meta?.body ?? null,
  };
}

async function step(name, fn) {
  if (skip.has(name)) return (out[name] = { skipped: true });
  try {
    out[name] = await fn();
  } catch (err) {
    out[name] = { error: errorInfo(err) };
    failures.push(`${name}: ${err?.name}: ${err?.message}`);
  }
}

const fields = a.fields.split(',').filter(Boolean);
const textQuery = a.query ? { multi_match: { query: a.query, fields } } : { match_all: {} };
const ids = (res) => res.hits.hits.map((h) => h._id);

await step('info', async () => {
  const r = await client.info();
  return { name: r.name, cluster_name: r.cluster_name, version: r.version?.number, build_flavor: r.version?.build_flavor, tagline: r.tagline };
});

await step('search', async () => {
  const r = await client.search({
    index: a.index,
    size: 3,
    query: textQuery,
    aggs: { facet: { terms: { field: a.facet, size: 10 } } },
  });
  return {
    hit_ids: ids(r),
    hits: r.hits.hits.map((h) => ({ _id: h._id, _index: h._index, _score: h._score, title: h._source?.title, title_path: h._source?.title_path })),
    indices: [...new Set(r.hits.hits.map((h) => h._index))],
    total: r.hits.total,
    buckets: r.aggregations?.facet?.buckets?.map(({ key, doc_count }) => ({ key, doc_count })) ?? null,
  };
});

await step('msearch', async () => {
  const r = await client.msearch({
    index: a.index, // default for headers that name no index
    searches: [
      {}, // index from the path
      { query: textQuery, size: 2 },
      { index: a.index }, // index in the header
      { query: { match_all: {} }, size: 1, track_total_hits: true },
    ],
  });
  return {
    responses: r.responses.map((x) =>
      x.error ? { status: x.status, error: x.error } : { status: x.status, hit_ids: ids(x), total: x.hits.total },
    ),
  };
});

await step('count', async () => {
  const all = await client.count({ index: a.index });
  const matching = await client.count({ index: a.index, query: textQuery });
  return { all: all.count, query: matching.count };
});

await step('mapping', async () => {
  const r = await client.indices.getMapping({ index: a.index });
  const fieldNames = (props, prefix = '') =>
    Object.entries(props || {}).flatMap(([name, def]) => [
      prefix + name,
      ...fieldNames(def.properties, `${prefix}${name}.`),
      ...Object.keys(def.fields || {}).map((sub) => `${prefix}${name}.${sub}`),
    ]);
  return {
    keys: Object.keys(r), // concrete index names (an alias resolves to its indices)
    fields: Object.fromEntries(Object.entries(r).map(([idx, m]) => [idx, fieldNames(m.mappings?.properties).sort()])),
    types: Object.fromEntries(
      Object.entries(r).map(([idx, m]) => [idx, Object.fromEntries(Object.entries(m.mappings?.properties || {}).map(([k, v]) => [k, v.type ?? 'object']))]),
    ),
  };
});

await step('field_caps', async () => {
  const r = await client.fieldCaps({ index: a.index, fields: '*' });
  return {
    indices: r.indices,
    fields: Object.keys(r.fields).sort(),
    types: Object.fromEntries(Object.entries(r.fields).sort(([x], [y]) => (x < y ? -1 : 1)).map(([k, v]) => [k, Object.keys(v).join('|')])),
  };
});

// One intentionally bad request: a missing index must come back as an error.
try {
  const r = await client.search({ index: 'not-there', query: { match_all: {} } });
  out.bad_request = { unexpected_success: true, hit_ids: ids(r) };
  failures.push('bad_request: search on index "not-there" succeeded');
} catch (err) {
  const e = errorInfo(err);
  out.bad_request = { statusCode: e.statusCode, type: e.body?.error?.type ?? null, name: e.name, body: e.body };
  if (e.statusCode == null) failures.push(`bad_request: no HTTP status (${e.name}: ${e.message})`);
}

if (a['dump-requests']) out.requests = requests;
await client.close();
if (failures.length) fail(failures.join('; '), out);
done(out);
