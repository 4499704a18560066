// Demo page: Elastic Search UI (React) talking to an Elasticsearch-compatible endpoint
// (`es-rag serve`, or a plain Elasticsearch) straight from the browser.
//
// The configuration is fetched at run time from ./config.json (written by run.sh), so one
// build serves any service URL / alias / key. URL parameters `url`, `index`, `facets`
// override it for quick experiments (the key is deliberately not taken from the URL).
import React from 'react';
import { createRoot } from 'react-dom/client';
import ElasticsearchAPIConnector from '@elastic/search-ui-elasticsearch-connector';
import {
  ErrorBoundary,
  Facet,
  Paging,
  PagingInfo,
  Results,
  SearchBox,
  SearchProvider,
  WithSearch,
} from '@elastic/react-search-ui';
import { Layout } from '@elastic/react-search-ui-views';
import '@elastic/react-search-ui-views/lib/styles/styles.css';
import './app.css';
import { connectorOptions, driverConfig, normalizeConfig } from './search-config.mjs';

async function loadConfig() {
  const res = await fetch('config.json', { cache: 'no-store' });
  if (!res.ok) throw new Error(`config.json: HTTP ${res.status}`);
  const raw = await res.json();
  const params = new URLSearchParams(window.location.search);
  for (const k of ['url', 'index', 'facets']) if (params.has(k)) raw[k] = params.get(k);
  return normalizeConfig(raw);
}

// Highlight fragments come back as raw text with <em> tags and are NOT HTML-escaped by
// Elasticsearch, so render them as text with only <em> turned into elements.
function Highlighted({ text }) {
  const parts = String(text).split(/(<em>.*?<\/em>)/g);
  return parts.map((p, i) =>
    p.startsWith('<em>') ? <em key={i}>{p.slice(4, -5)}</em> : <React.Fragment key={i}>{p}</React.Fragment>,
  );
}

const first = (v) => (Array.isArray(v) ? v[0] : v);

function makeResultView(cfg) {
  // Keeps Search UI's class names (.sui-result, .sui-result__title) and adds data-testid
  // hooks for test/browser.mjs.
  return function ResultView({ result }) {
    const title = first(result[cfg.titleField]?.raw) ?? result.id?.raw;
    // es-rag's title_path is the list of headings above the chunk: show it as a path.
    const path = [].concat(result[cfg.titlePathField]?.raw ?? []).join(' › ');
    const snippet = result[cfg.contentField]?.snippet;
    const content = first(result[cfg.contentField]?.raw) ?? '';
    const uri = first(result[cfg.urlField]?.raw);
    return (
      <li className="sui-result" data-testid="result" data-id={result.id?.raw}>
        <div className="sui-result__header">
          <span className="sui-result__title" data-testid="result-title">{title}</span>
        </div>
        <div className="sui-result__body result-body">
          <div className="result-path" data-testid="result-title-path">{path}</div>
          <p className="result-snippet" data-testid="result-snippet">
            {snippet ? <Highlighted text={first(snippet)} /> : content.slice(0, 200)}
          </p>
          {uri && <div className="result-uri" data-testid="result-uri">{uri}</div>}
        </div>
      </li>
    );
  };
}

// A machine-readable status line: tests wait on data-loading / data-search-term.
function Status({ cfg }) {
  return (
    <WithSearch mapContextToProps={({ isLoading, resultSearchTerm, totalResults, error, wasSearched }) => ({
      isLoading, resultSearchTerm, totalResults, error, wasSearched })}>
      {({ isLoading, resultSearchTerm, totalResults, error, wasSearched }) => (
        <div className="demo-status" data-testid="search-status" data-loading={String(!!isLoading)}
          data-searched={String(!!wasSearched)} data-search-term={resultSearchTerm || ''}
          data-total={totalResults ?? ''} data-error={error || ''}>
          {cfg.url} · index <b>{cfg.index}</b> · {cfg.apiKey ? 'API key set' : 'no API key'}
          {error ? (
            // Search UI leaves isLoading on after an error; say what happened instead.
            <div className="demo-error" data-testid="search-error">
              {error} — check that the service is up, allows this page's origin (CORS) and
              accepts the API key.
            </div>
          ) : isLoading ? ' · searching…' : ''}
        </div>
      )}
    </WithSearch>
  );
}

function App({ cfg }) {
  const connector = new ElasticsearchAPIConnector(connectorOptions(cfg));
  const config = driverConfig(cfg, connector, { trackUrlState: true });
  const ResultView = makeResultView(cfg);
  return (
    <SearchProvider config={config}>
      {/* Outside the ErrorBoundary, which replaces its children with the error message. */}
      <Status cfg={cfg} />
      <ErrorBoundary>
        <Layout
          header={<SearchBox searchAsYouType={false} />}
          sideContent={cfg.facets.map((f) => <Facet key={f} field={f} label={f} />)}
          bodyHeader={<PagingInfo />}
          bodyContent={<Results resultView={ResultView} />}
          bodyFooter={<Paging />}
        />
      </ErrorBoundary>
    </SearchProvider>
  );
}

const root = createRoot(document.getElementById('root'));
loadConfig()
  .then((cfg) => root.render(<App cfg={cfg} />))
  .catch((err) => {
    console.error(err);
    root.render(<pre className="sui-search-error" data-testid="config-error">{String(err)}</pre>);
  });
