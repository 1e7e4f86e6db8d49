// An EchoMQ reaper in Node.js (docs/sut.md): every CHAOS_REAP_INTERVAL_MS, on a fixed-rate
// grid (start + k x interval, not a sleep after each sweep), reap.lua returns every lapsed
// lease to pending (or dead-letters it past CHAOS_MAX_STALLS); a full batch sweeps again at
// once, so a mass failure is cleared within one tick. Every call records its sweep (named
// CHAOS_NAME), moving anything or not.
'use strict';

const { settings, keys, connect, defineScripts, sleep } = require('./echomq');

const config = settings();
const k = keys(config);
const client = connect(config);
defineScripts(client, config, [['reapLeases', 'reap.lua', 4]]);
let stopping = false;

function log(message) {
  console.log(`${new Date().toISOString()} ${config.name} ${message}`);
}

async function sweep() {
  for (;;) {
    // its name last: the sweep event every call records names this reaper
    const moved = Number(await client.reapLeases(k.active, k.pending, k.events, k.dead,
      k.jobPrefix, String(config.reapLimit), String(config.maxStalls), config.name));
    if (moved > 0) log(`reaped ${moved}`);
    if (moved < config.reapLimit) return;
  }
}

async function main() {
  await client.ping();
  log(`ready: every ${config.reapIntervalMs} ms, batch ${config.reapLimit}`);
  const start = Date.now();
  let tick = 0;
  while (!stopping) {
    try {
      await sweep();
    } catch (error) {
      log(`sweep failed: ${error.message}`);
    }
    tick = Math.max(tick + 1, Math.floor((Date.now() - start) / config.reapIntervalMs));
    await sleep(Math.max(0, start + tick * config.reapIntervalMs - Date.now()));
  }
  client.disconnect();
}

process.on('SIGTERM', () => { stopping = true; });

main().catch((error) => {
  console.error(`${config.name}: ${error.stack || error}`);
  process.exit(1);
});
