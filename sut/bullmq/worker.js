// One real BullMQ Worker, run as a system under test by echomq-chaos (docs/bullmq.md).
//
// Everything comes from the environment (the shared SUT contract):
//   CHAOS_VALKEY_URL        redis:// URL, with this process's own ACL user when it has one
//   CHAOS_NAME              member name (worker-2): the connection's client name and the
//                           BullMQ worker name (written by moveToActive as the job's `pb`)
//   CHAOS_QUEUE             the BullMQ queue name
//   CHAOS_PREFIX            the BullMQ key prefix (a trailing ":" is dropped: BullMQ adds its own)
//   CHAOS_LEASE_MS          -> lockDuration
//   CHAOS_REAP_INTERVAL_MS  -> stalledInterval (BullMQ's workers run the stalled check themselves)
//   CHAOS_HEARTBEAT_MS      -> lockRenewTime (default: BullMQ's own, lockDuration / 2)
//   CHAOS_MAX_STALLS        -> maxStalledCount (0 = unlimited; BullMQ's 0 means "fail on the
//                              first stall", so unlimited is passed as a very large count)
//   CHAOS_CONCURRENCY       -> concurrency
//   CHAOS_BULLMQ_BREAK      (or the argument --break NAME) a broken variant, for proving the
//                           checker can fail (a script is patched in memory at start-up, never
//                           on disk):
//                             skip-stalled-check  every worker started with skipStalledCheck
//                             slow-stalled-check  stalledInterval is twice CHAOS_REAP_INTERVAL_MS:
//                                                 the stalled check runs at half the rate the
//                                                 run says
//                             unfenced-finish     moveToFinished's lock check skipped
//                             refused-renewal     extendLocks compares the lock with the job id
//                                                 instead of the token: every renewal refused
//                             shared-token        every worker hands out one lock token for
//                                                 every job it fetches
//                             unexpiring-renewal  extendLocks sets the lock without its PX
//                             half-rate-checks    every timer fires each stalledInterval, but the
//                                                 stalled-check key is set for twice that: the
//                                                 checks that run come at half the rate
//   CHAOS_BULLMQ_PHASE      (measurement, docs/bullmq.md) when the worker starts its timers:
//                           "in" at the next multiple of stalledInterval on the wall clock (every
//                           worker's timer in phase), "spread" at that plus a share of it set by
//                           the worker's number (out of phase); unset: as soon as it is up
//   --stalled-checks-only   a Worker that takes no job and only runs the stalled check every
//                           stalledInterval (BullMQ's own startStalledCheckTimer, the "manually
//                           fetching jobs" pattern): the process certify starts beside the
//                           workers where a scenario freezes every one of them ([sut]
//                           standalone_reaper, docs/certify.md); a broken variant applies to it too
// A job's data is {"handler_ms": <int>, "crash": <bool>, "pad": "..."}: the handler sleeps
// handler_ms, or SIGKILLs its own process when crash is true (a poison pill); with
// "fail_attempts": N it throws on the job's first N attempts (BullMQ retries it, given attempts).
'use strict';

const { Worker } = require('bullmq');
const bullmqScripts = require('bullmq/dist/cjs/scripts');

const BREAKS = ['', 'skip-stalled-check', 'slow-stalled-check', 'unfenced-finish',
  'refused-renewal', 'shared-token', 'unexpiring-renewal', 'half-rate-checks'];
const PHASES = ['', 'in', 'spread'];
const SHARED_TOKEN = '00000000-0000-4000-8000-000000000000:0';
const UNLIMITED_STALLS = 1e9;

function setting(name, fallback) {
  const raw = process.env[name];
  if (raw === undefined || raw === '') {
    if (fallback === undefined) fail(`${name} is not set`);
    return fallback;
  }
  return raw;
}

function integer(name, fallback, minimum) {
  const raw = setting(name, fallback === undefined ? undefined : String(fallback));
  const value = Number(raw);
  if (!Number.isInteger(value) || value < minimum) {
    fail(`${name}=${JSON.stringify(raw)}: expected an integer >= ${minimum}`);
  }
  return value;
}

function fail(message) {
  process.stderr.write(`bullmq worker: ${message}\n`);
  process.exit(3);
}

// The lock check moveToFinished runs (includes/removeLock, inlined into the script text).
const LOCK_CHECK = 'local errorCode = removeLock(jobIdKey, KEYS[5], token, ARGV[1])';
const NO_LOCK_CHECK = 'rcall("DEL", jobIdKey .. ":lock") local errorCode = 0';

// extendLocks' check and its renewal (the script text of bullmq 6.x).
const RENEWAL_CHECK = 'if currentToken == token then';
const RENEWAL = 'rcall("SET", lockKey, token, "PX", lockDuration)';

// Patch a script's text in memory, before the worker defines its commands.
function patch(name, broken, from, to) {
  const script = bullmqScripts[name];
  if (!script || !script.content.includes(from)) {
    fail(`${broken}: this bullmq's ${name} has no ${JSON.stringify(from)} to patch`);
  }
  script.content = script.content.replace(from, to);
}

// moveStalledJobsToWait's stalled-check key, which lets one check through per stalledInterval.
const CHECK_KEY = 'rcall("SET", stalledCheckKey, timestamp, "PX", maxCheckTime)';
const HALF_RATE_KEY = 'rcall("SET", stalledCheckKey, timestamp, "PX", 2 * tonumber(maxCheckTime))';

function breakScripts(broken) {
  if (broken === 'half-rate-checks') {
    patch('moveStalledJobsToWait', broken, CHECK_KEY, HALF_RATE_KEY);
  }
  if (broken === 'unfenced-finish') patch('moveToFinished', broken, LOCK_CHECK, NO_LOCK_CHECK);
  if (broken === 'refused-renewal') {
    patch('extendLocks', broken, RENEWAL_CHECK, 'if currentToken == jobId then');
  }
  if (broken === 'unexpiring-renewal') {
    patch('extendLocks', broken, RENEWAL, 'rcall("SET", lockKey, token)');
  }
}

// How long to wait before starting the timers, for CHAOS_BULLMQ_PHASE (0: start now).
function phaseDelay(phase, name, interval) {
  if (!phase) return 0;
  const number = Number((name.match(/(\d+)$/) || [0, 1])[1]);
  // spread: worker k starts a golden-ratio share of the interval after worker k - 1, so any
  // number of workers is spread out over the interval
  const offset = phase === 'spread' ? Math.floor(((number - 1) * 0.618034 % 1) * interval) : 0;
  return (offset - (Date.now() % interval) + 2 * interval) % interval;
}

function sleep(ms) {
  return new Promise(resolve => setTimeout(resolve, ms));
}

async function handle(job) {
  const data = job.data || {};
  if (data.crash) {
    process.kill(process.pid, 'SIGKILL');
    await sleep(60_000); // SIGKILL is not delivered synchronously on every platform
  }
  await sleep(Number(data.handler_ms) || 0);
  if (job.attemptsMade < (Number(data.fail_attempts) || 0)) {
    throw new Error(`planned failure of attempt ${job.attemptsMade + 1}`); // BullMQ retries it
  }
  return 'done';
}

function main() {
  const url = setting('CHAOS_VALKEY_URL');
  const name = setting('CHAOS_NAME');
  const queue = setting('CHAOS_QUEUE');
  const prefix = setting('CHAOS_PREFIX', 'bull').replace(/:$/, '') || 'bull';
  const lockDuration = integer('CHAOS_LEASE_MS', undefined, 1);
  const stalledInterval = integer('CHAOS_REAP_INTERVAL_MS', undefined, 1);
  const heartbeat = integer('CHAOS_HEARTBEAT_MS', 0, 0);
  const maxStalls = integer('CHAOS_MAX_STALLS', 0, 0);
  const concurrency = integer('CHAOS_CONCURRENCY', 1, 1);
  const flag = process.argv.indexOf('--break');
  const broken = flag >= 0 ? process.argv[flag + 1] || '' : setting('CHAOS_BULLMQ_BREAK', '');
  if (!BREAKS.includes(broken)) {
    fail(`CHAOS_BULLMQ_BREAK=${JSON.stringify(broken)}: expected one of ${BREAKS.join(', ')}`);
  }
  breakScripts(broken);
  const checksOnly = process.argv.includes('--stalled-checks-only');
  const phase = setting('CHAOS_BULLMQ_PHASE', '');
  if (!PHASES.includes(phase)) {
    fail(`CHAOS_BULLMQ_PHASE=${JSON.stringify(phase)}: expected one of "in", "spread" or unset`);
  }

  // No processor: the worker never fetches a job, and runs only what is started below.
  const worker = new Worker(queue, checksOnly ? null : handle, {
    // connectionName: CLIENT SETNAME, so the recorder can attribute calls by name as well as
    // by the URL's ACL user. maxRetriesPerRequest null: BullMQ's requirement for a Worker.
    connection: { url, connectionName: name, maxRetriesPerRequest: null },
    prefix,
    name,
    concurrency,
    lockDuration,
    stalledInterval: broken === 'slow-stalled-check' ? 2 * stalledInterval : stalledInterval,
    lockRenewTime: heartbeat || undefined,
    maxStalledCount: maxStalls === 0 ? UNLIMITED_STALLS : maxStalls,
    skipStalledCheck: broken === 'skip-stalled-check',
    autorun: false, // run() below, once a broken variant has had its say
  });
  worker.on('error', error => process.stderr.write(`bullmq worker ${name}: ${error.message}\n`));
  worker.on('ready', () => process.stdout.write(`bullmq worker ${name} ready\n`));
  if (broken === 'shared-token') {
    // The main loop makes a token per fetch (<worker id>:<n>); the job keeps the one it was
    // fetched with for its lock, its renewals and its finish: fetch every job with one token.
    const fetch = worker._getNextJob.bind(worker);
    worker._getNextJob = (token, options) => fetch(SHARED_TOKEN, options);
  }
  const start = () => {
    if (checksOnly) {
      worker.startStalledCheckTimer().catch(error => worker.emit('error', error));
    } else {
      worker.run().catch(error => worker.emit('error', error)); // as BullMQ's own autorun does
    }
  };
  setTimeout(start, phaseDelay(phase, name, stalledInterval));
  const stop = () => worker.close().then(() => process.exit(0), () => process.exit(1));
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

main();
