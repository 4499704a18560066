// Bundle the demo page into dist/ with esbuild (no config baked in: the page fetches
// config.json at run time). Usage: node build.mjs [--dev]
import { build } from 'esbuild';
import { copyFile, mkdir, rm } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const out = join(here, 'dist');
const dev = process.argv.includes('--dev');

await rm(out, { recursive: true, force: true });
await mkdir(out, { recursive: true });
await build({
  entryPoints: { main: join(here, 'src/main.jsx') }, // -> dist/main.js + dist/main.css
  outdir: out,
  bundle: true,
  format: 'esm',
  platform: 'browser',
  target: 'es2020',
  jsx: 'automatic',
  minify: !dev,
  sourcemap: dev,
  define: { 'process.env.NODE_ENV': JSON.stringify(dev ? 'development' : 'production') },
  logLevel: 'warning',
});
await copyFile(join(here, 'src/index.html'), join(out, 'index.html'));
console.log(out);
