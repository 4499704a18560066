// Tiny static server for the demo page: dist/ plus a config.json, on loopback.
// Plain Node, no dependencies. The page's origin (http://127.0.0.1:PORT) differs from the
// search service's, so the browser's CORS checks are exercised for real.
//
//   node serve.mjs [--port 8081] [--host 127.0.0.1] [--dir dist] [--config config.json]
//
// --port 0 picks a free port. The URL is printed as the only line on stdout.
import { createServer } from 'node:http';
import { readFile } from 'node:fs/promises';
import { dirname, extname, join, normalize, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const here = dirname(fileURLToPath(import.meta.url));
const { values: opt } = parseArgs({
  options: {
    port: { type: 'string', default: process.env.PORT || '8081' },
    host: { type: 'string', default: '127.0.0.1' },
    dir: { type: 'string', default: join(here, 'dist') },
    config: { type: 'string', default: join(here, 'config.json') },
  },
});
const root = resolve(opt.dir);
const configPath = resolve(opt.config);
const TYPES = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.json': 'application/json',
  '.map': 'application/json',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
};

const server = createServer(async (req, res) => {
  let path;
  try {
    path = decodeURIComponent(new URL(req.url, 'http://x').pathname);
  } catch {
    return send(res, 400, 'bad request');
  }
  // config.json comes from --config (it may hold an API key: never cache it).
  const file = path === '/config.json' ? configPath : normalize(join(root, path === '/' ? 'index.html' : path));
  if (file !== configPath && !file.startsWith(root + sep)) return send(res, 403, 'forbidden');
  if (req.method !== 'GET' && req.method !== 'HEAD') return send(res, 405, 'method not allowed');
  try {
    const body = await readFile(file);
    res.writeHead(200, {
      'Content-Type': TYPES[extname(file)] || 'application/octet-stream',
      'Cache-Control': 'no-store',
    });
    res.end(req.method === 'HEAD' ? undefined : body);
  } catch {
    send(res, 404, 'not found');
  }
});

function send(res, status, text) {
  res.writeHead(status, { 'Content-Type': 'text/plain' });
  res.end(text + '\n');
}

server.listen(Number(opt.port), opt.host, () => {
  const { address, port } = server.address();
  console.log(`http://${address}:${port}/`);
});
// Exit at once: open keep-alive connections from a browser would hold server.close() up.
for (const sig of ['SIGINT', 'SIGTERM']) process.on(sig, () => process.exit(0));
