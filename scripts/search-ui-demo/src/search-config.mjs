// Search UI configuration shared by the demo page (src/main.jsx) and the headless check
// (test/driver.mjs): the request bodies the driver records as fixtures are exactly the ones
// the page sends, because both build the connector and the query config here.
//
// Nothing in this file is baked per deployment: the page fetches config.json at run time,
// the driver builds the same object from its command line.

export const DEFAULTS = Object.freeze({
  url: 'http://127.0.0.1:8080', // `es-rag serve` default port
  index: 'es-rag-quickstart', // the quickstart's alias
  apiKey: '', // empty: send no Authorization header
  facets: ['mime_type'], // keyword fields shown as value facets
  disjunctiveFacets: [], // facets whose counts ignore their own selection (OR facets)
  titleField: 'title',
  titlePathField: 'title_path',
  contentField: 'content',
  urlField: 'source_uri',
  resultsPerPage: 10,
});

const asList = (v) =>
  v == null ? [] : (Array.isArray(v) ? v : String(v).split(',')).map((s) => String(s).trim()).filter(Boolean);

// Fill defaults and coerce types (config.json, URL parameters and CLI flags are all loose).
export function normalizeConfig(raw = {}) {
  const cfg = { ...DEFAULTS };
  for (const [k, v] of Object.entries(raw)) if (v !== undefined && v !== null && k in DEFAULTS) cfg[k] = v;
  cfg.facets = asList(cfg.facets);
  cfg.disjunctiveFacets = asList(cfg.disjunctiveFacets);
  cfg.resultsPerPage = Number(cfg.resultsPerPage) || DEFAULTS.resultsPerPage;
  cfg.apiKey = String(cfg.apiKey || '');
  if (!cfg.url || !cfg.index) throw new Error('config needs url and index');
  return cfg;
}

// Options for `new ElasticsearchAPIConnector(...)`. The connector POSTs to
// new URL(`${index}/_search`, host), so a host with a path must end in "/".
export function connectorOptions(cfg) {
  return {
    host: cfg.url,
    index: cfg.index,
    ...(cfg.apiKey ? { apiKey: cfg.apiKey } : {}), // sent as `Authorization: ApiKey <key>`
  };
}

// Search UI `searchQuery`: what is searched, returned, highlighted and aggregated.
export function searchQuery(cfg) {
  return {
    search_fields: {
      [cfg.titleField]: { weight: 3 },
      [cfg.titlePathField]: { weight: 2 },
      [cfg.contentField]: {},
    },
    // Keys become `_source.includes`; `snippet` adds a `highlight` on that field.
    result_fields: {
      [cfg.titleField]: { raw: {} },
      [cfg.titlePathField]: { raw: {} },
      [cfg.contentField]: { snippet: { size: 200, fallback: true } },
      [cfg.urlField]: { raw: {} },
    },
    facets: Object.fromEntries(cfg.facets.map((f) => [f, { type: 'value', size: 10 }])),
    disjunctiveFacets: cfg.disjunctiveFacets,
  };
}

// The whole SearchProvider / SearchDriver config, given a constructed connector.
export function driverConfig(cfg, apiConnector, extra = {}) {
  return {
    apiConnector,
    searchQuery: searchQuery(cfg),
    alwaysSearchOnInitialLoad: true,
    initialState: { resultsPerPage: cfg.resultsPerPage },
    ...extra,
  };
}
