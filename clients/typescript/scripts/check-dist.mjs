// `npm run check`: type-checks src/, fails when the committed dist/ is not exactly what tsc
// builds from it (dist/ is committed so that installing from a checkout or a git URL needs no
// build step; fix with `npm run build` and commit dist/), then compiles a strict consumer
// (tests/types) against the published entry points.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const out = fs.mkdtempSync(path.join(os.tmpdir(), 'mcp-connect-client-dist-'));
try {
  const tsc = path.join(root, 'node_modules', 'typescript', 'bin', 'tsc');
  const r = spawnSync(process.execPath, [tsc, '-p', 'tsconfig.json', '--outDir', out], { cwd: root, stdio: 'inherit' });
  if (r.status !== 0) process.exit(r.status ?? 1);
  const list = (dir) => (fs.existsSync(dir) ? fs.readdirSync(dir, { recursive: true }).filter((f) => fs.statSync(path.join(dir, f)).isFile()).sort() : []);
  const built = list(out);
  const committed = list(path.join(root, 'dist'));
  const drift = [
    ...built.filter((f) => !committed.includes(f)).map((f) => `missing from dist/: ${f}`),
    ...committed.filter((f) => !built.includes(f)).map((f) => `not built from src/: dist/${f}`),
    ...built.filter((f) => committed.includes(f) && !fs.readFileSync(path.join(out, f)).equals(fs.readFileSync(path.join(root, 'dist', f)))).map((f) => `differs from src/: dist/${f}`),
  ];
  if (drift.length) {
    process.stderr.write(`clients/typescript: dist/ drifted from src/ (run \`npm run build\` and commit dist/):\n  ${drift.join('\n  ')}\n`);
    process.exit(1);
  }
  const consumer = spawnSync(process.execPath, [tsc, '-p', 'tests/types/tsconfig.json'], { cwd: root, stdio: 'inherit' });
  if (consumer.status !== 0) process.exit(consumer.status ?? 1);
  process.stdout.write(`clients/typescript: dist/ matches src/ (${built.length} files); the typed entry points compile for a consumer\n`);
} finally {
  fs.rmSync(out, { recursive: true, force: true });
}
