// An example system under test that speaks the real EchoMQ contract (echo_mq 2.6.5, an Elixir
// lease queue on Valkey), written from the facts of its keys, rows, scripts and login (see
// docs/sut.md), not from its code:
//
//   node sut.js worker   [--break unfenced-complete|resurrecting-extend]
//   node sut.js reaper   [--break lazy-reaper]
//   node sut.js producer (one payload a line on stdin; one line `<ms> enqueue id=<id>` each)
//
// Keys: emq:{<queue>}:pending (ZSET, every score 0), :active (ZSET, score = the lease's
// deadline on the server clock), :job:<id> (HASH state/attempts/payload), :metrics:completed
// (HASH, field count); the prefix is EchoMQ's own `emq` (CHAOS_PREFIX is not honoured, as in
// EchoMQ). Every connection logs in as `default` with the URL's password and is named
// CHAOS_NAME (connector.js). Each line this prints is `<unix ms> <event> key=value ...`.
'use strict';

const { Connection, ReplyError, Scripts, sleep } = require('./connector');
const { Minter } = require('./ids');

const BREAKS = {
  worker: ['unfenced-complete', 'resurrecting-extend'],
  reaper: ['lazy-reaper'],
  producer: [],
};

function log(event, fields = {}) {
  const pairs = Object.entries(fields).map(([key, value]) => ` ${key}=${value}`).join('');
  process.stdout.write(`${Date.now()} ${event}${pairs}\n`);
}

function fail(message) {
  process.stderr.write(`node-echomq-real: ${message}\n`);
  process.exit(2);
}

function env(name, fallback) {
  const value = process.env[name];
  if (value === undefined || value === '') {
    if (fallback === undefined) fail(`${name} is not set (see docs/sut.md)`);
    return fallback;
  }
  return value;
}

function intEnv(name, fallback) {
  const raw = env(name, fallback === undefined ? undefined : String(fallback));
  const value = Number(raw);
  if (!Number.isInteger(value) || value < 0) fail(`${name} = ${JSON.stringify(raw)}: expected an integer >= 0`);
  return value;
}

function parseArgs(argv) {
  const mode = argv[0];
  if (!(mode in BREAKS)) fail(`usage: node sut.js worker|reaper|producer [--break MODE]`);
  const at = argv.indexOf('--break');
  const broken = at >= 0 ? argv[at + 1] || '' : '';
  if (broken && !BREAKS[mode].includes(broken)) {
    fail(`--break ${JSON.stringify(broken)}: a ${mode} has ${JSON.stringify(BREAKS[mode])}`);
  }
  return { mode, broken };
}

function settings() {
  const prefix = env('CHAOS_PREFIX', 'emq:');
  if (prefix !== 'emq:' && prefix !== 'emq') {
    log('warning', { msg: `CHAOS_PREFIX ${prefix} ignored: EchoMQ's prefix is emq` });
  }
  const queue = env('CHAOS_QUEUE', 'jobs');
  const base = `emq:{${queue}}:`;
  return {
    url: env('CHAOS_VALKEY_URL'),
    name: env('CHAOS_NAME'),
    leaseMs: intEnv('CHAOS_LEASE_MS', 30000),
    heartbeatMs: intEnv('CHAOS_HEARTBEAT_MS', 0),
    reapIntervalMs: Math.max(1, intEnv('CHAOS_REAP_INTERVAL_MS', 1000)),
    concurrency: Math.max(1, intEnv('CHAOS_CONCURRENCY', 1)),
    pollMs: Math.max(1, intEnv('CHAOS_POLL_MS', 50)),
    node: intEnv('CHAOS_NODE_ID', process.pid % 1024),
    keys: {
      base,
      pending: `${base}pending`,
      active: `${base}active`,
      meta: `${base}meta`,
      jobPrefix: `${base}job:`,
    },
  };
}

async function connect(config) {
  const connection = new Connection(config.url, config.name, log);
  await connection.open();
  return connection;
}

// A fixed-rate loop: start + k x period (a round that overruns starts the next at once).
async function everyPeriod(periodMs, keepGoing, round) {
  const start = Date.now();
  let tick = 0;
  while (keepGoing()) {
    await round();
    tick = Math.max(tick + 1, Math.floor((Date.now() - start) / periodMs));
    await sleep(Math.max(0, start + tick * periodMs - Date.now()));
  }
}

function parsePayload(payload) {
  try {
    const job = JSON.parse(payload);
    return { handlerMs: Number(job.handler_ms) || 0, crash: job.crash === true };
  } catch {
    return { handlerMs: 0, crash: false };
  }
}

// CHAOS_CONCURRENCY claim loops, each on its own connection, and a renewal loop on one more
// (EchoMQ.Locks's beat): every CHAOS_HEARTBEAT_MS one extend_locks call renews every held lease.
async function worker(config, broken) {
  const k = config.keys;
  const scripts = new Scripts(['claim', 'complete', 'complete_unfenced', 'extend_locks',
    'extend_locks_unfenced']);
  const completeScript = broken === 'unfenced-complete' ? 'complete_unfenced' : 'complete';
  const extendScript = broken === 'resurrecting-extend' ? 'extend_locks_unfenced' : 'extend_locks';
  const slots = [];
  for (let i = 0; i < config.concurrency; i += 1) slots.push(await connect(config));
  const locks = await connect(config);
  await scripts.load(locks);
  const held = new Map(); // id -> { token, markLost }
  let stopping = false;

  async function claim(connection) {
    // EchoMQ's host reads the queue's pause flag first, in a round trip of its own.
    if (await connection.call('HGET', k.meta, 'paused') !== null) return null;
    const reply = await scripts.run(connection, 'claim', [k.pending, k.active],
      [k.jobPrefix, String(config.leaseMs)]);
    if (!Array.isArray(reply) || reply.length === 0) return null;
    const [id, payload, attempts] = reply;
    return { id, payload: payload || '', token: String(attempts) };
  }

  async function work(connection, job) {
    const { handlerMs, crash } = parsePayload(job.payload);
    log('claim', { id: job.id, token: job.token, handler_ms: handlerMs });
    if (crash) {
      log('crash', { id: job.id });
      process.kill(process.pid, 'SIGKILL');
    }
    let markLost;
    const lost = new Promise((resolve) => { markLost = resolve; });
    held.set(job.id, { token: job.token, markLost });
    const outcome = await Promise.race([sleep(handlerMs).then(() => 'done'), lost]);
    if (outcome === 'lost') log('lease_lost', { id: job.id, token: job.token });
    if (held.get(job.id)?.token === job.token) held.delete(job.id);
    try {
      // EchoMQ's host looks for a flow parent first, in a round trip of its own.
      await connection.call('HMGET', k.jobPrefix + job.id, 'parent', 'parent_queue');
      const reply = await scripts.run(connection, completeScript, [k.active, k.jobPrefix + job.id],
        [job.id, job.token, k.base]);
      log('complete', { id: job.id, token: job.token, result: Number(reply) === 1 ? 'ok' : 'gone' });
    } catch (error) {
      const result = error instanceof ReplyError ? error.message.split(' ')[0] : 'error';
      log('complete', { id: job.id, token: job.token, result, error: JSON.stringify(error.message) });
    }
  }

  async function claimLoop(connection) {
    while (!stopping) {
      let job = null;
      try {
        job = await claim(connection);
      } catch (error) {
        log('claim_failed', { error: JSON.stringify(error.message) });
      }
      if (job === null) await sleep(config.pollMs);
      else await work(connection, job);
    }
  }

  async function renew() {
    const pairs = [...held.entries()];
    if (pairs.length === 0) return;
    let failed;
    try {
      failed = await scripts.run(locks, extendScript, [k.active],
        [k.base, String(config.leaseMs), ...pairs.flatMap(([id, lease]) => [id, lease.token])]);
    } catch (error) {
      log('extend_failed', { error: JSON.stringify(error.message) });
      return;
    }
    log('extend', { n: pairs.length - failed.length });
    for (const id of failed) {
      const lease = held.get(id);
      const sent = pairs.find(([sentId]) => sentId === id);
      if (lease && sent && lease.token === sent[1].token) {
        held.delete(id);
        lease.markLost('lost'); // the lease is gone: stop the handler; its complete is refused
      }
    }
  }

  process.on('SIGTERM', () => {
    log('sigterm', { msg: 'finishing held jobs, claiming no more' });
    stopping = true;
  });
  log('worker_ready', { name: config.name, concurrency: config.concurrency,
    lease_ms: config.leaseMs, heartbeat_ms: config.heartbeatMs, break: broken || 'none' });
  const beating = config.heartbeatMs > 0
    ? everyPeriod(config.heartbeatMs, () => !stopping || held.size > 0, renew) : null;
  await Promise.all(slots.map(claimLoop));
  if (beating) await beating;
  for (const connection of [...slots, locks]) connection.close();
  log('stopped');
}

// @reap every CHAOS_REAP_INTERVAL_MS on a fixed-rate grid; a full batch (100) sweeps again.
async function reaper(config, broken) {
  const k = config.keys;
  const script = broken === 'lazy-reaper' ? 'reap_lazy' : 'reap';
  const scripts = new Scripts([script]);
  const connection = await connect(config);
  await scripts.load(connection);
  let stopping = false;
  process.on('SIGTERM', () => { stopping = true; });
  log('reaper_ready', { name: config.name, interval_ms: config.reapIntervalMs,
    break: broken || 'none' });
  await everyPeriod(config.reapIntervalMs, () => !stopping, async () => {
    try {
      for (;;) {
        const argv = broken === 'lazy-reaper' ? [k.base, String(config.leaseMs)] : [k.base];
        const moved = Number(await scripts.run(connection, script, [k.active, k.pending], argv));
        if (moved > 0) log('reaped', { n: moved });
        if (moved < 100) return;
      }
    } catch (error) {
      log('reap_failed', { error: JSON.stringify(error.message) });
    }
  });
  connection.close();
}

// One payload a line on stdin: mint an id (this process's node bits), @enqueue it.
async function producer(config) {
  const k = config.keys;
  const scripts = new Scripts(['enqueue']);
  const connection = await connect(config);
  await scripts.load(connection);
  const minter = new Minter(config.node);
  log('producer_ready', { name: config.name, node: config.node });
  let buffered = '';
  async function enqueue(payload) {
    const id = minter.mint('JOB');
    const added = await scripts.run(connection, 'enqueue', [k.jobPrefix + id, k.pending],
      [id, payload]);
    log(Number(added) === 1 ? 'enqueue' : 'duplicate', { id });
  }
  for await (const chunk of process.stdin) {
    buffered += chunk;
    const lines = buffered.split('\n');
    buffered = lines.pop();
    for (const payload of lines) await enqueue(payload);
  }
  if (buffered !== '') await enqueue(buffered);
  connection.close();
}

async function main() {
  const { mode, broken } = parseArgs(process.argv.slice(2));
  const config = settings();
  if (mode === 'worker') await worker(config, broken);
  else if (mode === 'reaper') await reaper(config, broken);
  else await producer(config);
}

main().catch((error) => {
  process.stderr.write(`node-echomq-real: ${error.stack || error}\n`);
  process.exit(1);
});
