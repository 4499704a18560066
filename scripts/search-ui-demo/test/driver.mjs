// Run Elastic Search UI headless in Node: the framework-agnostic SearchDriver from
// @elastic/search-ui with the Elasticsearch connector, configured exactly like the demo page
// (src/search-config.mjs). Prints results, facet values and the exact requests the
// connector sent (to store as golden fixtures).
//
//   node test/driver.mjs --url U [--key K] --index I --query TEXT --facet FIELD
//       [--facet FIELD2 ...] [--filter FIELD=VALUE ...] [--disjunctive] [--timeout 20]
//
// A --filter on a facet field becomes a post_filter (+ facet aggregation filter); on any
// other field it becomes a bool.filter in the query. Node 20 has a global fetch, and the
// driver falls back to an in-memory history when there is no `window`, so nothing else
// needs polyfilling.
import { SearchDriver } from '@elastic/search-ui';
import ElasticsearchAPIConnector from '@elastic/search-ui-elasticsearch-connector';
import { connectorOptions, driverConfig, normalizeConfig } from '../src/search-config.mjs';
import { args, done, fail, parseBody, redactHeaders } from './lib.mjs';

const USAGE =
  'node test/driver.mjs --url U [--key K] --index I --query TEXT --facet FIELD [--facet F2] ' +
  '[--filter FIELD=VALUE ...] [--disjunctive] [--results-per-page N] [--timeout SECONDS]';
const a = args(
  {
    facet: { type: 'string', multiple: true, default: [] },
    filter: { type: 'string', multiple: true, default: [] },
    disjunctive: { type: 'boolean', default: false },
    'results-per-page': { type: 'string', default: '10' },
    timeout: { type: 'string', default: '20' },
  },
  USAGE,
);

// Record every request the connector makes (it calls the global fetch at request time).
const requests = [];
const realFetch = globalThis.fetch;
globalThis.fetch = async (input, init = {}) => {
  const rec = {
    url: typeof input === 'string' ? input : input.url ?? String(input),
    method: init.method || 'GET',
    headers: redactHeaders(init.headers || {}), // Authorization value replaced by <redacted>
    body: parseBody(init.body),
  };
  requests.push(rec);
  const res = await realFetch(input, init);
  rec.status = res.status;
  return res;
};

// FIELD=VALUE pairs -> Search UI filters (same field repeated -> one filter, several values).
const filters = [];
for (const f of a.filter) {
  const i = f.indexOf('=');
  if (i <= 0) fail(`--filter must be FIELD=VALUE, not ${JSON.stringify(f)}`, {}, 2);
  const [field, value] = [f.slice(0, i), f.slice(i + 1)];
  const existing = filters.find((x) => x.field === field);
  if (existing) existing.values.push(value);
  else filters.push({ field, values: [value], type: 'all' });
}

let cfg;
try {
  cfg = normalizeConfig({
    url: a.url,
    index: a.index,
    apiKey: a.key,
    facets: a.facet,
    disjunctiveFacets: a.disjunctive ? a.facet : [],
    resultsPerPage: a['results-per-page'],
  });
} catch (err) {
  fail(err.message, {}, 2);
}

const connector = new ElasticsearchAPIConnector(connectorOptions(cfg));
const driver = new SearchDriver(
  driverConfig(cfg, connector, {
    trackUrlState: false, // no browser history in Node
    initialState: { searchTerm: a.query, filters, resultsPerPage: cfg.resultsPerPage },
  }),
);

// Settled = a search completed (wasSearched, not loading), or the driver recorded an error
// (on errors Search UI sets `error` and leaves isLoading true).
const state = await new Promise((resolve) => {
  const check = (s) => {
    if (s.error || (s.wasSearched && !s.isLoading)) {
      driver.unsubscribeToStateChanges(check);
      clearTimeout(timer);
      resolve(s);
    }
  };
  const timer = setTimeout(() => resolve({ ...driver.getState(), error: `timed out after ${a.timeout} s` }), Number(a.timeout) * 1000);
  driver.subscribeToStateChanges(check);
  check(driver.getState());
});
driver.tearDown?.();

const first = (v) => (Array.isArray(v) ? v[0] : v);
const out = {
  url: a.url,
  index: a.index,
  query: a.query,
  facet_fields: cfg.facets,
  filters,
  resultSearchTerm: state.resultSearchTerm,
  totalResults: state.totalResults,
  totalPages: state.totalPages,
  pagingStart: state.pagingStart,
  pagingEnd: state.pagingEnd,
  results: (state.results || []).map((r) => ({
    id: r.id?.raw,
    title: first(r[cfg.titleField]?.raw) ?? null,
    title_path: [].concat(r[cfg.titlePathField]?.raw ?? []).join(' › ') || null,
    snippet: first(r[cfg.contentField]?.snippet) ?? null,
    source_uri: first(r[cfg.urlField]?.raw) ?? null,
  })),
  facets: Object.fromEntries(
    Object.entries(state.facets || {}).map(([field, [facet]]) => [field, (facet?.data || []).map(({ value, count }) => ({ value, count }))]),
  ),
  requests,
};

// The connector does not check HTTP status codes (an error body then fails as "Cannot read
// properties of undefined"), so report the statuses next to Search UI's error.
const bad = requests.filter((r) => !(r.status >= 200 && r.status < 300));
const badText = bad.map((r) => `${r.method} ${r.url} -> HTTP ${r.status ?? 'no response'}`).join(', ');
if (state.error) fail(`search failed: ${state.error}${bad.length ? ` (${badText})` : ''}`, out);
if (bad.length) fail(`request(s) failed: ${badText}`, out);
done(out);
