// What the worker and the reaper share: the contract's environment (docs/sut.md), the queue's
// keys, and the protocol's Lua scripts, loaded as they are from chaos/protocol/lua/.
'use strict';

const fs = require('fs');
const path = require('path');
const Redis = require('ioredis');

function env(name, fallback) {
  const value = process.env[name];
  if (value === undefined || value === '') {
    if (fallback !== undefined) return fallback;
    console.error(`node-echomq: ${name} is not set (see docs/sut.md)`);
    process.exit(2);
  }
  return value;
}

function intEnv(name, fallback) {
  const raw = env(name, fallback === undefined ? undefined : String(fallback));
  const value = Number.parseInt(raw, 10);
  if (!Number.isFinite(value) || value < 0) {
    console.error(`node-echomq: ${name} = ${JSON.stringify(raw)}: expected an integer >= 0`);
    process.exit(2);
  }
  return value;
}

function settings() {
  return {
    url: env('CHAOS_VALKEY_URL'),
    name: env('CHAOS_NAME'),
    queue: env('CHAOS_QUEUE', 'jobs'),
    prefix: env('CHAOS_PREFIX', 'emq:'),
    leaseMs: intEnv('CHAOS_LEASE_MS'),
    heartbeatMs: intEnv('CHAOS_HEARTBEAT_MS', 0),
    reapIntervalMs: intEnv('CHAOS_REAP_INTERVAL_MS', 1000),
    reapLimit: intEnv('CHAOS_REAP_LIMIT', 100),
    concurrency: Math.max(1, intEnv('CHAOS_CONCURRENCY', 1)),
    maxStalls: intEnv('CHAOS_MAX_STALLS', 0),
    pollMs: Math.max(1, intEnv('CHAOS_POLL_MS', 20)),
    completedRetentionMs: intEnv('CHAOS_COMPLETED_RETENTION_MS', 0),
    // Where the protocol's scripts are: the toolkit's own, or a directory written by
    // `echomq-chaos protocol export DIR`.
    luaDir: env('ECHOMQ_LUA_DIR', path.join(__dirname, '..', '..', 'chaos', 'protocol', 'lua')),
  };
}

function keys(config) {
  const base = `${config.prefix}{${config.queue}}:`;
  return {
    pending: `${base}pending`,
    active: `${base}active`,
    events: `${base}events`,
    dead: `${base}dead`,
    jobPrefix: `${base}job:`,
  };
}

// A connection with the URL's own credentials. Commands time out after a lease, so a call
// lost to a partition fails rather than hangs; reconnects are quick once the link heals.
function connect(config) {
  const client = new Redis(config.url, {
    commandTimeout: Math.max(config.leaseMs, 500),
    maxRetriesPerRequest: null,
    retryStrategy: (times) => Math.min(times * 20, 200),
  });
  client.on('error', (error) => console.error(`${config.name}: valkey: ${error.message}`));
  return client;
}

// Each script as a command of the client (EVALSHA, falling back to EVAL when the server does
// not know it yet), with how many of its arguments are keys.
function defineScripts(client, config, scripts) {
  for (const [command, file, numberOfKeys] of scripts) {
    const lua = fs.readFileSync(path.join(config.luaDir, file), 'utf8');
    client.defineCommand(command, { numberOfKeys, lua });
  }
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

module.exports = { settings, keys, connect, defineScripts, sleep };
