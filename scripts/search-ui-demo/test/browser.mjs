// Open the demo page in headless Chromium (system /usr/bin/chromium driven by
// playwright-core; no browser download), search, and print what was rendered.
//
//   node test/browser.mjs --url U [--key K] --index I --query TEXT --facet FIELD
//       [--facet F2] [--screenshot PATH] [--page-port P] [--click-facet VALUE]
//       [--timeout 20] [--rebuild]
//
// The page is built (if dist/ is missing or stale) and served by serve.mjs on 127.0.0.1
// (a free port unless --page-port), with a temporary config.json. Its origin differs from
// --url, so the service must allow it in CORS. Exits 1 if no results render in --timeout s.
// CHROMIUM_PATH overrides the browser binary.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { normalizeConfig } from '../src/search-config.mjs';
import { args, done, fail, parseBody, redactHeaders } from './lib.mjs';

const USAGE =
  'node test/browser.mjs --url U [--key K] --index I --query TEXT --facet FIELD [--facet F2] ' +
  '[--screenshot PATH] [--page-port P] [--click-facet VALUE] [--timeout SECONDS] [--rebuild]';
const a = args(
  {
    facet: { type: 'string', multiple: true, default: [] },
    screenshot: { type: 'string' },
    'page-port': { type: 'string', default: '0' },
    'click-facet': { type: 'string' },
    timeout: { type: 'string', default: '20' },
    rebuild: { type: 'boolean', default: false },
  },
  USAGE,
);
const here = dirname(fileURLToPath(import.meta.url));
const appDir = resolve(here, '..');
const timeoutMs = Number(a.timeout) * 1000;
const out = { url: a.url, index: a.index, query: a.query, facet_fields: a.facet };
const cleanups = [];
const finish = async (fn, ...rest) => {
  for (const c of cleanups.reverse()) await c().catch(() => {});
  fn(...rest);
};

// ---- build if dist/ is missing or older than the sources
const newest = (dir) =>
  readdirSync(dir, { withFileTypes: true }).reduce(
    (m, e) => Math.max(m, e.isDirectory() ? newest(join(dir, e.name)) : statSync(join(dir, e.name)).mtimeMs),
    0,
  );
const bundle = join(appDir, 'dist', 'main.js');
const stale = !existsSync(bundle) || statSync(bundle).mtimeMs < Math.max(newest(join(appDir, 'src')), statSync(join(appDir, 'build.mjs')).mtimeMs);
if (a.rebuild || stale) {
  const b = spawnSync(process.execPath, [join(appDir, 'build.mjs')], { encoding: 'utf8' });
  if (b.status !== 0) fail(`build failed: ${b.stderr || b.stdout}`, out);
}
out.built = a.rebuild || stale;

// ---- serve dist/ with a temporary config.json (it may hold the key: remove it afterwards)
let cfg;
try {
  cfg = normalizeConfig({ url: a.url, index: a.index, apiKey: a.key, facets: a.facet.length ? a.facet : undefined });
} catch (err) {
  fail(err.message, out, 2);
}
const tmp = mkdtempSync(join(tmpdir(), 'search-ui-demo-'));
cleanups.push(async () => rmSync(tmp, { recursive: true, force: true }));
writeFileSync(join(tmp, 'config.json'), JSON.stringify(cfg), { mode: 0o600 });
const server = spawn(process.execPath, [join(appDir, 'serve.mjs'), '--port', a['page-port'], '--config', join(tmp, 'config.json')], {
  stdio: ['ignore', 'pipe', 'pipe'],
});
cleanups.push(async () => server.kill('SIGTERM'));
const pageUrl = await new Promise((res) => {
  let buf = '';
  const t = setTimeout(() => res(null), 10000);
  server.stdout.on('data', (d) => {
    buf += d;
    const m = buf.match(/^(http\S+)\n/m);
    if (m) clearTimeout(t), res(m[1]);
  });
  server.stderr.on('data', (d) => (buf += d));
  server.on('exit', () => (clearTimeout(t), res(null)));
});
if (!pageUrl) await finish(fail, 'serve.mjs did not start (port taken?)', out);
out.page_url = pageUrl;

// ---- browser
const consoleErrors = [];
const failedRequests = [];
const serviceRequests = [];
let browser;
try {
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM_PATH || '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--headless=new', '--disable-gpu'],
  });
} catch (err) {
  await finish(fail, `cannot start Chromium: ${err.message.split('\n')[0]}`, out);
}
cleanups.push(async () => browser.close());
const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
const consoleWarnings = [];
page.on('console', (m) => {
  if (m.type() === 'error') consoleErrors.push(m.text());
  if (m.type() === 'warning') consoleWarnings.push(m.text());
});
page.on('pageerror', (e) => consoleErrors.push(`pageerror: ${e.message}`));
page.on('requestfailed', (r) => failedRequests.push({ url: r.url(), method: r.method(), failure: r.failure()?.errorText }));
page.on('response', (r) => {
  if (r.status() >= 400) failedRequests.push({ url: r.url(), method: r.method(), status: r.status() });
});
// Requests to the search service (the page's own files are not interesting).
page.on('request', (r) => {
  if (!r.url().startsWith(pageUrl)) {
    serviceRequests.push({ url: r.url(), method: r.method(), headers: redactHeaders(r.headers()), body: parseBody(r.postData()) });
  }
});

// Wait until the page's status line reports a finished search for `term` (or an error).
const settled = (term, minRequests = 0) =>
  page.waitForFunction(
    ([t, n]) => {
      const s = document.querySelector('[data-testid=search-status]');
      if (document.querySelector('[data-testid=config-error]')) return 'config-error';
      if (document.querySelector('.sui-search-error') || s?.dataset.error) return 'error';
      if (!s) return false;
      return s.dataset.searched === 'true' && s.dataset.loading === 'false' && s.dataset.searchTerm === t && window.__searchRequests >= n;
    },
    [term, minRequests],
    { timeout: timeoutMs },
  );

// Count the page's search requests (for waiting after a facet click).
await page.addInitScript(() => {
  window.__searchRequests = 0;
  const f = window.fetch;
  window.fetch = (...x) => {
    if (String(x[0]).includes('/_search')) window.__searchRequests++;
    return f(...x);
  };
});

const scrape = () =>
  page.evaluate(() => {
    const txt = (el, sel) => el.querySelector(sel)?.textContent.trim() ?? null;
    const status = document.querySelector('[data-testid=search-status]');
    return {
      status: status ? { ...status.dataset } : null,
      results: [...document.querySelectorAll('.sui-result')].map((r) => ({
        id: r.dataset.id ?? null,
        title: txt(r, '[data-testid=result-title]') ?? txt(r, '.sui-result__title'),
        title_path: txt(r, '[data-testid=result-title-path]'),
        snippet: txt(r, '[data-testid=result-snippet]'),
      })),
      facets: [...document.querySelectorAll('.sui-facet')].map((f) => ({
        field: txt(f, '.sui-facet__title'),
        values: [...f.querySelectorAll('.sui-multi-checkbox-facet__option-label')].map((o) => ({
          value: txt(o, '.sui-multi-checkbox-facet__input-text'),
          count: Number(txt(o, '.sui-multi-checkbox-facet__option-count')),
          checked: !!o.querySelector('input')?.checked,
        })),
      })),
      paging_info: document.querySelector('.sui-paging-info')?.textContent.replace(/\s+/g, ' ').trim() ?? null,
      error: document.querySelector('.sui-search-error, [data-testid=config-error]')?.textContent.trim() ?? null,
      location: location.href,
    };
  });

const report = (extra = {}) => ({
  ...out,
  ...extra,
  console_errors: consoleErrors,
  console_warnings: consoleWarnings,
  failed_requests: failedRequests,
  service_requests: serviceRequests,
});

try {
  await page.goto(pageUrl, { waitUntil: 'domcontentloaded', timeout: timeoutMs });
  // The initial match-all search (alwaysSearchOnInitialLoad); stop early on an error
  // (Search UI's ErrorBoundary then replaces the layout, search box included).
  const first = await (await settled('')).jsonValue();
  if (first !== true) throw new Error(`page reports ${first} on the initial search`);
  if (a.query) {
    const box = await page.waitForSelector('.sui-search-box__text-input', { timeout: timeoutMs });
    await box.fill(a.query);
    await box.press('Enter');
  }
  const how = await (await settled(a.query)).jsonValue();
  if (how !== true) throw new Error(`page reports ${how}`);
  await page.waitForSelector('.sui-result', { timeout: 2000 });
} catch (err) {
  const rendered = await scrape().catch(() => ({}));
  if (a.screenshot) await page.screenshot({ path: a.screenshot, fullPage: true }).catch(() => {});
  const why = rendered.error || rendered.status?.error || err.message.split('\n')[0];
  const hint = consoleErrors.find((e) => /CORS|Access-Control/i.test(e)) ? ' (CORS: is the page origin allowed?)' : '';
  await finish(fail, `no results rendered (timeout ${a.timeout} s): ${why}${hint}`, report(rendered));
}
const rendered = await scrape();

let afterClick;
if (a['click-facet']) {
  // Tick one facet value and wait for the filtered search (post_filter) to render.
  const before = await page.evaluate(() => window.__searchRequests);
  const option = page.locator('.sui-multi-checkbox-facet__option-label', {
    has: page.locator('.sui-multi-checkbox-facet__input-text', { hasText: a['click-facet'] }),
  });
  try {
    await option.first().click({ timeout: 5000 });
    await settled(a.query, before + 1);
    afterClick = await scrape();
  } catch (err) {
    await finish(fail, `clicking facet value ${JSON.stringify(a['click-facet'])} failed: ${err.message.split('\n')[0]}`, report(rendered));
  }
}
if (a.screenshot) await page.screenshot({ path: a.screenshot, fullPage: true });
const result = report({ ...rendered, ...(afterClick ? { after_click_facet: afterClick } : {}), screenshot: a.screenshot ?? null });
await finish(done, result);
