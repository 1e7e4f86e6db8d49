// An example system under test that speaks the real EchoMQ contract (echo_mq 2.6.5, an Elixir
// lease queue on Valkey), written from the facts of its keys, rows, scripts and login (see
// docs/sut.md), not from its code:
//
//   node sut.js worker   [--break unfenced-complete|resurrecting-extend|unfenced-retry|
//                                 unlimited-lanes|paused-claims|drop-paused|eager-parent]
//                        [--fail-attempts N [--fail-one-in K] [--retry-delay-ms D]
//                         [--max-attempts M] [--fail-children 1]] [--lanes 1|2|3] [--locks 1]
//   node sut.js reaper   [--break lazy-reaper|sparse-reaper]
//   node sut.js producer [--groups N [--limit M] [--weight W] [--pause K --pause-at-ms T
//                        [--resume-at-ms U]]] [--flows K [--children C] [--child-policies 1]]
//                        [--remove N --remove-at-ms T] [--reprocess-at-ms T]
//                        (one payload a line on stdin; one line `<ms> enqueue id=<id>` each,
//                        with `group=<group>` when grouped, `flow=<child>,...` for a flow)
//
// Keys: emq:{<queue>}:pending (ZSET, every score 0), :active (ZSET, score = the lease's
// deadline on the server clock), :schedule (ZSET, score = when a job is due again), :dead
// (ZSET), :job:<id> (HASH state/attempts/payload/last_error/stalled), :metrics:completed and
// :metrics:failed (HASH, field count); the prefix is EchoMQ's own `emq` (CHAOS_PREFIX is not
// honoured, as in EchoMQ). Every connection logs in as `default` with the URL's password and
// is named CHAOS_NAME (connector.js). Each line this prints is `<unix ms> <event> key=value ...`.
//
// A worker started with --fail-attempts N fails the first N attempts of a job (of one job in
// K, by its id, with --fail-one-in K): its handler runs, then the job is handed back with
// @retry, due again D x 2^(attempt - 1) ms later (EchoMQ's exponential backoff), or
// dead-lettered at its M-th attempt (default 3). The reaper promotes due jobs after each sweep,
// as EchoMQ's consumer loop does.
//
// Group lanes (EchoMQ.Lanes, from its described effects): a producer with --groups N admits
// each job into a group's lane (emq:{q}:g:<group>:pending; the payload's JSON `group` field, or
// g1..gN in turn), putting the group on the ring (emq:{q}:ring) while it may be served; a
// worker with --lanes 1 claims by turning the ring (lua/gclaim.lua), counting its live leases
// per group in emq:{q}:gactive against emq:{q}:glimit (set by the producer's --limit M for
// each group, lua/glimit.lua, before its first job); --lanes 2 claims with the weighted turn
// (lua/gwclaim.lua: up to the group's weight of its lane's heads at once, set by the
// producer's --weight W, lua/gweight.lua) and --lanes 3 with the grouped batch claim
// (lua/gbclaim.lua: as many as the group's limit leaves room for). A claim slot works every
// job of one claim at once, each renewed and settled on its own. Complete and reap settle a
// grouped job through its lane, whichever consumer claimed it. A producer with --pause K
// pauses group gK T ms after it is ready (lua/gpause.lua: the lane keeps its jobs, off the ring) and, with
// --resume-at-ms U, resumes it U ms after it is ready (lua/gresume.lua), as an operator calling
// EchoMQ.Lanes' pause and resume would; each logs `paused group=gK` / `resumed group=gK`.
//
// Flows (EchoMQ.Flows, from its described effects): a producer with --flows K makes every K-th
// payload a flow (lua/enqueue_flow.lua): C children (--children, default 2) claimable at once
// and a parent held until the last of them completes (complete.lua's fan-in puts it into
// pending); its line names the parent (`id=`) and the children (`flow=`). A flow's children
// fail on purpose (--fail-attempts) only with the worker's --fail-children 1; one that dies
// passes its death to its parent as EchoMQ's @retry does, by the child's parent_policy, which
// a producer with --child-policies 1 writes alternately `fail` and `ignore` (lua/retry.lua; the
// line then names it, `policy=`). A user's own calls, at set times after the producer is ready:
// --remove N --remove-at-ms T removes up to N jobs failed for good (in dead; the newest left
// there when a reprocess comes later) and N of the producer's own flat jobs, newest first
// (lua/remove_job.lua: refused, EMQLOCK, while a worker's lock marker is on it), logging
// `removed id=...` or `remove_refused id=... reason=...`; --reprocess-at-ms T puts every job
// in dead back to pending (lua/reprocess.lua), logging `reprocessed id=...` (none there yet:
// it looks again every 100 ms, 3 s at most). A worker with
// --locks 1 keeps EchoMQ.Locks' presence marker on each job it holds: `SET <row>:lock <token>
// PX 2 x lease` and the row's `lock` field at the claim, refreshed with each renewal, deleted
// once the job is settled.
'use strict';

const { Connection, ReplyError, Scripts, sleep } = require('./connector');
const { Minter } = require('./ids');

const BREAKS = {
  worker: ['unfenced-complete', 'resurrecting-extend', 'unfenced-retry', 'unlimited-lanes',
    'paused-claims', 'drop-paused', 'eager-parent'],
  reaper: ['lazy-reaper', 'sparse-reaper'],
  producer: [],
};
// A worker's options (each takes an integer >= 0) and their defaults.
const WORKER_OPTIONS = { '--fail-attempts': 0, '--fail-one-in': 1, '--retry-delay-ms': 200,
  '--fail-children': 0,
  '--max-attempts': 3, '--lanes': 0, '--locks': 0 };
const PRODUCER_OPTIONS = { '--groups': 0, '--limit': 0, '--weight': 0, '--pause': 0, '--pause-at-ms': 0,
  '--resume-at-ms': 0, '--flows': 0, '--children': 2, '--child-policies': 0, '--remove': 0,
  '--remove-at-ms': 0,
  '--reprocess-at-ms': 0 };

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
  let broken = '';
  const known = mode === 'worker' ? WORKER_OPTIONS : mode === 'producer' ? PRODUCER_OPTIONS : {};
  const options = { ...known };
  for (let i = 1; i < argv.length; i += 2) {
    const [name, value] = [argv[i], argv[i + 1]];
    if (value === undefined) fail(`${name}: needs a value`);
    if (name === '--break') {
      if (!BREAKS[mode].includes(value)) {
        fail(`--break ${JSON.stringify(value)}: a ${mode} has ${JSON.stringify(BREAKS[mode])}`);
      }
      broken = value;
    } else if (name in known) {
      const number = Number(value);
      if (!Number.isInteger(number) || number < 0) {
        fail(`${name} ${JSON.stringify(value)}: expected an integer >= 0`);
      }
      options[name] = number;
    } else {
      fail(`${name}: not an option of a ${mode}`);
    }
  }
  return { mode, broken, options };
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
    // The contract's stall limit and reap batch: with either set, the reaper recovers as
    // EchoMQ.Stalled does (max_stalled = CHAOS_MAX_STALLS + 1, limit = CHAOS_REAP_LIMIT),
    // else with @reap (no count, 100 a call), as docs/echomq.md maps them.
    maxStalls: intEnv('CHAOS_MAX_STALLS', 0),
    reapLimit: Math.max(1, intEnv('CHAOS_REAP_LIMIT', 100)),
    keys: {
      base,
      pending: `${base}pending`,
      ring: `${base}ring`,
      paused: `${base}paused`,
      glimit: `${base}glimit`,
      gactive: `${base}gactive`,
      wake: `${base}wake`,
      active: `${base}active`,
      schedule: `${base}schedule`,
      dead: `${base}dead`,
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
// Does the handler fail this attempt of the job? Its first N attempts, for one job in K (by
// the id's last character, so every worker fails the same jobs).
function failsAttempt(options, id, token) {
  const oneIn = Math.max(1, options['--fail-one-in']);
  return Number(token) <= options['--fail-attempts']
    && id.charCodeAt(id.length - 1) % oneIn === 0;
}

async function worker(config, broken, options) {
  const k = config.keys;
  const scripts = new Scripts(['claim', 'gclaim', 'gclaim_unlimited', 'gclaim_paused', 'gshed',
    'gwclaim', 'gbclaim',
    'complete', 'complete_unfenced', 'extend_locks', 'extend_locks_unfenced', 'retry',
    'retry_unfenced']);
  if (options['--lanes'] > 3) {
    fail(`--lanes ${options['--lanes']}: 1 (gclaim), 2 (gwclaim) or 3 (gbclaim)`);
  }
  const gclaimScript = { 'unlimited-lanes': 'gclaim_unlimited', 'paused-claims': 'gclaim_paused' }[
    broken] || [null, 'gclaim', 'gwclaim', 'gbclaim'][options['--lanes']];
  const batched = gclaimScript === 'gwclaim' || gclaimScript === 'gbclaim'; // a list of jobs
  const completeScript = broken === 'unfenced-complete' ? 'complete_unfenced' : 'complete';
  const extendScript = broken === 'resurrecting-extend' ? 'extend_locks_unfenced' : 'extend_locks';
  const retryScript = broken === 'unfenced-retry' ? 'retry_unfenced' : 'retry';
  const slots = [];
  for (let i = 0; i < config.concurrency; i += 1) slots.push(await connect(config));
  const locks = await connect(config);
  await scripts.load(locks);
  const held = new Map(); // id -> { token, markLost }
  let stopping = false;
  const markerMs = String(2 * config.leaseMs); // EchoMQ.Locks' marker TTL: twice the lease

  // EchoMQ.Locks' presence marker (track_job / untrack_job), plain commands as it sends them
  async function mark(job) {
    const row = k.jobPrefix + job.id;
    await locks.call('SET', `${row}:lock`, job.token, 'PX', markerMs);
    await locks.call('HSET', row, 'lock', job.token);
    await locks.call('HPEXPIRE', row, markerMs, 'FIELDS', '1', 'lock');
  }
  async function unmark(job) {
    const row = k.jobPrefix + job.id;
    await locks.call('DEL', `${row}:lock`);
    await locks.call('HDEL', row, 'lock');
  }

  async function claim(connection) {
    // EchoMQ's host reads the queue's pause flag first, in a round trip of its own.
    if (await connection.call('HGET', k.meta, 'paused') !== null) return null;
    const reply = options['--lanes']
      ? await scripts.run(connection, gclaimScript,
        gclaimScript === 'gclaim_paused' ? [k.ring, k.active, k.paused] : [k.ring, k.active],
        [k.base, String(config.leaseMs)])
      : await scripts.run(connection, 'claim', [k.pending, k.active],
        [k.jobPrefix, String(config.leaseMs)]);
    if (!Array.isArray(reply) || reply.length === 0) {
      if (broken === 'drop-paused') { // idle: shed a paused group's head (broken on purpose)
        const dropped = await scripts.run(connection, 'gshed', [k.paused], [k.base]);
        if (dropped) log('shed', { id: dropped });
      }
      return null;
    }
    const asJob = ([id, payload, attempts, group]) => (
      { id, payload: payload || '', token: String(attempts), group });
    return options['--lanes'] && batched ? reply.map(asJob) : [asJob(reply)];
  }

  async function work(connection, job) {
    const { handlerMs, crash } = parsePayload(job.payload);
    log('claim', { id: job.id, token: job.token, handler_ms: handlerMs,
      ...(job.group ? { group: job.group } : {}) });
    if (crash) {
      log('crash', { id: job.id });
      process.kill(process.pid, 'SIGKILL');
    }
    let markLost;
    const lost = new Promise((resolve) => { markLost = resolve; });
    if (options['--locks']) await mark(job);
    held.set(job.id, { token: job.token, markLost });
    const outcome = await Promise.race([sleep(handlerMs).then(() => 'done'), lost]);
    if (outcome === 'lost') log('lease_lost', { id: job.id, token: job.token });
    if (held.get(job.id)?.token === job.token) held.delete(job.id);
    await settle(connection, job);
    if (options['--locks']) await unmark(job);
  }

  async function settle(connection, job) {
    // EchoMQ's host looks for a flow parent first, in a round trip of its own.
    const [parent] = await connection.call('HMGET', k.jobPrefix + job.id, 'parent',
      'parent_queue');
    // (a flow's children fail only with --fail-children 1; its parent never does)
    if ((!parent || options['--fail-children']) && failsAttempt(options, job.id, job.token)) {
      await retry(connection, job, parent);
      return;
    }
    const keys = [k.active, k.jobPrefix + job.id];
    const argv = [job.id, job.token, k.base];
    if (parent) { // a flow's child: its parent's keys for the fan-in
      const parentRow = k.jobPrefix + parent;
      keys.push(`${parentRow}:dependencies`, `${parentRow}:processed`, parentRow);
      argv.push(parent, job.id, broken === 'eager-parent' ? 'eager' : '');
    }
    try {
      const reply = await scripts.run(connection, completeScript, keys, argv);
      log('complete', { id: job.id, token: job.token, result: Number(reply) === 1 ? 'ok' : 'gone',
        ...(parent ? { parent } : {}) });
    } catch (error) {
      const result = error instanceof ReplyError ? error.message.split(' ')[0] : 'error';
      log('complete', { id: job.id, token: job.token, result, error: JSON.stringify(error.message) });
    }
  }

  // The handler failed this attempt: hand the job back, due again after an exponential
  // backoff, or dead-lettered at its last attempt (the script decides, by the row's attempts).
  async function retry(connection, job, parent) {
    const delayMs = options['--retry-delay-ms'] * 2 ** (Number(job.token) - 1);
    const keys = [k.active, k.schedule, k.dead, k.jobPrefix + job.id];
    const argv = [job.id, job.token, String(delayMs), String(options['--max-attempts']),
      'chaos-fail', k.base];
    if (parent) { // a flow's child: its parent's keys, should it die now
      const parentRow = k.jobPrefix + parent;
      keys.push(parentRow, `${parentRow}:dependencies`, `${parentRow}:failed`,
        `${parentRow}:unsuccessful`);
      argv.push(parent);
    }
    try {
      const reply = await scripts.run(connection, retryScript, keys, argv);
      log('retry', { id: job.id, token: job.token, delay_ms: delayMs, result: reply,
        ...(parent ? { parent } : {}) });
    } catch (error) {
      const result = error instanceof ReplyError ? error.message.split(' ')[0] : 'error';
      log('retry', { id: job.id, token: job.token, result, error: JSON.stringify(error.message) });
    }
  }

  async function claimLoop(connection) {
    while (!stopping) {
      let jobs = null;
      try {
        jobs = await claim(connection);
      } catch (error) {
        log('claim_failed', { error: JSON.stringify(error.message) });
      }
      if (jobs === null) await sleep(config.pollMs);
      else await Promise.all(jobs.map((job) => work(connection, job))); // each held at once
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
    if (options['--locks']) { // the markers of the leases still held, refreshed with them
      for (const [id] of pairs.filter(([sentId]) => !failed.includes(sentId))) {
        await locks.call('PEXPIRE', `${k.jobPrefix + id}:lock`, markerMs);
        await locks.call('HPEXPIRE', k.jobPrefix + id, markerMs, 'FIELDS', '1', 'lock');
      }
    }
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
    lease_ms: config.leaseMs, heartbeat_ms: config.heartbeatMs, break: broken || 'none',
    fail_attempts: options['--fail-attempts'], fail_one_in: options['--fail-one-in'] });
  const beating = config.heartbeatMs > 0
    ? everyPeriod(config.heartbeatMs, () => !stopping || held.size > 0, renew) : null;
  await Promise.all(slots.map(claimLoop));
  if (beating) await beating;
  for (const connection of [...slots, locks]) connection.close();
  log('stopped');
}

// A max_stalled no job reaches: EchoMQ.Stalled counting stalls with no limit on them.
const NO_STALL_LIMIT = 2 ** 31 - 1;

// Every CHAOS_REAP_INTERVAL_MS on a fixed-rate grid: recover lapsed leases (a full batch sweeps
// again), then promote the scheduled jobs that are due, as EchoMQ's consumer loop does. With
// CHAOS_MAX_STALLS or CHAOS_REAP_LIMIT set, the sweep is EchoMQ.Stalled's (it counts stalls and
// dead-letters at max_stalled = CHAOS_MAX_STALLS + 1); else @reap (no count, 100 a call).
async function reaper(config, broken) {
  const k = config.keys;
  const stalled = config.maxStalls > 0 || config.reapLimit !== 100;
  const script = broken === 'lazy-reaper' ? 'reap_lazy' : stalled ? 'sweep_stalled' : 'reap';
  const scripts = new Scripts([script, 'promote']);
  const connection = await connect(config);
  await scripts.load(connection);
  let stopping = false;
  process.on('SIGTERM', () => { stopping = true; });
  log('reaper_ready', { name: config.name, interval_ms: config.reapIntervalMs,
    sweep: script, break: broken || 'none' });
  async function sweep() {
    if (script === 'sweep_stalled') {
      const maxStalled = config.maxStalls > 0 ? config.maxStalls + 1 : NO_STALL_LIMIT;
      const [recovered, dead] = await scripts.run(connection, script,
        [k.active, k.pending, k.dead], [k.base, String(maxStalled), String(config.reapLimit)]);
      if (recovered.length + dead.length > 0) {
        log('reaped', { n: recovered.length, dead: dead.length });
      }
      return recovered.length + dead.length;
    }
    const argv = broken === 'lazy-reaper' ? [k.base, String(config.leaseMs)] : [k.base];
    const moved = Number(await scripts.run(connection, script, [k.active, k.pending], argv));
    if (moved > 0) log('reaped', { n: moved });
    return moved;
  }
  const batch = script === 'sweep_stalled' ? config.reapLimit : 100;
  let tick = 0;
  await everyPeriod(config.reapIntervalMs, () => !stopping, async () => {
    // sparse-reaper (broken): keeps the grid, sweeps on every third tick only
    if (broken === 'sparse-reaper' && tick++ % 3 !== 0) return;
    try {
      while (await sweep() >= batch) { /* a full batch: sweep again */ }
      const promoted = Number(await scripts.run(connection, 'promote', [k.schedule, k.pending],
        [k.base, '100']));
      if (promoted > 0) log('promoted', { n: promoted });
    } catch (error) {
      log('reap_failed', { error: JSON.stringify(error.message) });
    }
  });
  connection.close();
}

// One payload a line on stdin: mint an id (this process's node bits), @enqueue it.
// The job's group under --groups N: the payload's own `group` field, or g1..gN in turn.
function groupOf(payload, groups, count) {
  try {
    const job = JSON.parse(payload);
    if (job && typeof job.group === 'string' && job.group !== '') return job.group;
  } catch {
    // not JSON: grouped in turn
  }
  return `g${(count % groups) + 1}`;
}

async function producer(config, options) {
  const k = config.keys;
  const groups = options['--groups'];
  if (options['--limit'] && !groups) fail('--limit: a limit per group needs --groups N');
  const pausing = options['--pause'];
  if (pausing && pausing > groups) fail(`--pause ${pausing}: there are ${groups} groups (--groups)`);
  if (!pausing && (options['--pause-at-ms'] || options['--resume-at-ms'])) {
    fail('--pause-at-ms, --resume-at-ms: need --pause K (the group to pause)');
  }
  if (options['--resume-at-ms'] && options['--resume-at-ms'] <= options['--pause-at-ms']) {
    fail(`--resume-at-ms ${options['--resume-at-ms']}: must come after --pause-at-ms`);
  }
  if (options['--weight'] && !groups) fail('--weight: a weight per group needs --groups N');
  if (options['--flows'] && groups) fail('--flows: a flow is flat (EchoMQ.Flows), not with --groups');
  if (options['--flows'] && options['--children'] < 1) fail('--children: a flow has at least one');
  if (Boolean(options['--remove']) !== Boolean(options['--remove-at-ms'])) {
    fail('--remove N and --remove-at-ms T go together');
  }
  const scripts = new Scripts(['enqueue', 'genqueue', 'glimit', 'gweight', 'gpause', 'gresume',
    'enqueue_flow', 'remove_job', 'reprocess']);
  const connection = await connect(config);
  await scripts.load(connection);
  for (let index = 1; options['--limit'] && index <= groups; index += 1) {
    await scripts.run(connection, 'glimit', [k.glimit, k.gactive, k.ring, k.paused, k.wake],
      [k.base, `g${index}`, String(options['--limit'])]);
  }
  for (let index = 1; options['--weight'] && index <= groups; index += 1) {
    await scripts.run(connection, 'gweight', [`${k.base}gweight`],
      [`g${index}`, String(options['--weight'])]);
  }
  const minter = new Minter(config.node);
  log('producer_ready', { name: config.name, node: config.node, groups });
  const timers = [];
  if (pausing) { // an operator's pause (and resume) of one group, at set times
    const group = `g${pausing}`;
    timers.push(setTimeout(() => {
      scripts.run(connection, 'gpause', [k.paused, k.ring], [group])
        .then(() => log('paused', { group }), (error) => log('pause_failed', {
          group, error: JSON.stringify(error.message) }));
    }, options['--pause-at-ms']));
    if (options['--resume-at-ms']) {
      timers.push(setTimeout(() => {
        scripts.run(connection, 'gresume', [k.paused, k.ring, k.glimit, k.gactive, k.wake],
          [k.base, group])
          .then(() => log('resumed', { group }), (error) => log('resume_failed', {
            group, error: JSON.stringify(error.message) }));
      }, options['--resume-at-ms']));
    }
  }
  const flat = []; // the producer's own flat jobs (no flow's), the removable ones
  if (options['--remove']) { // a user removing some of the jobs they enqueued, newest first
    timers.push(setTimeout(() => removeSome(options['--remove']).catch((error) => log(
      'remove_failed', { error: JSON.stringify(error.message) })), options['--remove-at-ms']));
  }
  // A reprocess still to come keeps the newest job in dead (ids sort by when they were minted):
  // the removal takes up to N of the others, never all of them, so the reprocess has a job
  // failed for good to put back whenever one was dead at the removal, however few, and not
  // only if another dies in the moment between the two.
  const keepOneDead = options['--reprocess-at-ms'] > options['--remove-at-ms'];
  async function removeSome(n) { // up to N failed for good (in dead), and the N newest flat
    const dead = await connection.call('ZRANGE', k.dead, '0', '-1');
    const taken = (keepOneDead ? dead.slice(0, -1) : dead).slice(0, n);
    for (const id of [...taken, ...flat.slice(-n).reverse().filter((job) => !dead.includes(job))]) {
      try {
        const reply = await scripts.run(connection, 'remove_job', [k.jobPrefix + id, k.pending,
          k.active, k.schedule, k.dead], [id]);
        if (Number(reply) === 1) log('removed', { id });
        else log('remove_refused', { id, reason: 'gone' });
      } catch (error) {
        log('remove_refused', { id, reason: error.message.split(' ')[0] });
      }
    }
  }
  if (options['--reprocess-at-ms']) { // a user putting every dead job back to wait
    timers.push(setTimeout(() => reprocessDead().catch((error) => log('reprocess_failed', {
      error: JSON.stringify(error.message) })), options['--reprocess-at-ms']));
  }
  // Every job in dead, once there is one: on a loaded machine the first job failed for good
  // may come after T (or the removal just before may have taken them all), so it looks again
  // every 100 ms, up to 30 times, rather than reprocess nothing.
  async function reprocessDead(triesLeft = 30) {
    let reprocessed = 0;
    for (const id of await connection.call('ZRANGE', k.dead, '0', '-1')) {
      const reply = await scripts.run(connection, 'reprocess', [k.jobPrefix + id, k.dead,
        k.pending], [id]);
      if (Number(reply) === 1) { log('reprocessed', { id }); reprocessed += 1; }
    }
    if (!reprocessed && triesLeft > 1) {
      timers.push(setTimeout(() => reprocessDead(triesLeft - 1).catch((error) => log(
        'reprocess_failed', { error: JSON.stringify(error.message) })), 100));
    }
  }
  let flows = 0;
  async function enqueueFlow(payload) {
    const parent = minter.mint('JOB');
    const children = Array.from({ length: options['--children'] }, () => minter.mint('JOB'));
    // --child-policies 1: the flows' children alternately fail their parent and are ignored,
    // should one die (EchoMQ.Flows' ignore_dependency_on_failure)
    flows += 1;
    const policy = options['--child-policies'] ? (flows % 2 ? 'fail' : 'ignore') : '';
    await scripts.run(connection, 'enqueue_flow', [k.jobPrefix + parent,
      `${k.jobPrefix + parent}:dependencies`, k.pending, ...children.map((id) => k.jobPrefix + id)],
    [parent, payload, String(children.length), ...children.flatMap((id) => [id, payload]),
      policy]);
    log('enqueue', { id: parent, flow: children.join(','), ...(policy ? { policy } : {}) });
  }
  let buffered = '';
  let count = 0;
  async function enqueue(payload) {
    if (options['--flows'] && count % options['--flows'] === options['--flows'] - 1) {
      count += 1;
      await enqueueFlow(payload);
      return;
    }
    const id = minter.mint('JOB');
    let added;
    let fields = { id };
    if (groups > 0) {
      const group = groupOf(payload, groups, count);
      added = await scripts.run(connection, 'genqueue', [k.jobPrefix + id,
        `${k.base}g:${group}:pending`, k.ring, k.paused, k.glimit, k.gactive, k.wake],
      [id, payload, group]);
      fields = { id, group };
    } else {
      added = await scripts.run(connection, 'enqueue', [k.jobPrefix + id, k.pending],
        [id, payload]);
      flat.push(id);
    }
    count += 1;
    log(Number(added) === 1 ? 'enqueue' : 'duplicate', fields);
  }
  for await (const chunk of process.stdin) {
    buffered += chunk;
    const lines = buffered.split('\n');
    buffered = lines.pop();
    for (const payload of lines) await enqueue(payload);
  }
  if (buffered !== '') await enqueue(buffered);
  timers.forEach(clearTimeout); // stdin closed: the run is over, a pause still due is moot
  connection.close();
}

async function main() {
  const { mode, broken, options } = parseArgs(process.argv.slice(2));
  const config = settings();
  if (mode === 'worker') await worker(config, broken, options);
  else if (mode === 'reaper') await reaper(config, broken);
  else await producer(config, options);
}

main().catch((error) => {
  process.stderr.write(`node-echomq-real: ${error.stack || error}\n`);
  process.exit(1);
});
