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
//                           checker can fail:
//                             skip-stalled-check  every worker started with skipStalledCheck
//                             unfenced-finish     moveToFinished's lock check skipped (the script
//                                                 is patched in memory at start-up, never on disk)
// A job's data is {"handler_ms": <int>, "crash": <bool>, "pad": "..."}: the handler sleeps
// handler_ms, or SIGKILLs its own process when crash is true (a poison pill); with
// "fail_attempts": N it throws on the job's first N attempts (BullMQ retries it, given attempts).
'use strict';

const { Worker } = require('bullmq');
const bullmqScripts = require('bullmq/dist/cjs/scripts');

const BREAKS = ['', 'skip-stalled-check', 'unfenced-finish'];
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

function unfenceFinish() {
  const script = bullmqScripts.moveToFinished;
  if (!script || !script.content.includes(LOCK_CHECK)) {
    fail("unfenced-finish: this bullmq's moveToFinished has no lock check to skip");
  }
  script.content = script.content.replace(LOCK_CHECK, NO_LOCK_CHECK);
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
  if (broken === 'unfenced-finish') unfenceFinish();

  const worker = new Worker(queue, handle, {
    // connectionName: CLIENT SETNAME, so the recorder can attribute calls by name as well as
    // by the URL's ACL user. maxRetriesPerRequest null: BullMQ's requirement for a Worker.
    connection: { url, connectionName: name, maxRetriesPerRequest: null },
    prefix,
    name,
    concurrency,
    lockDuration,
    stalledInterval,
    lockRenewTime: heartbeat || undefined,
    maxStalledCount: maxStalls === 0 ? UNLIMITED_STALLS : maxStalls,
    skipStalledCheck: broken === 'skip-stalled-check',
  });
  worker.on('error', error => process.stderr.write(`bullmq worker ${name}: ${error.message}\n`));
  worker.on('ready', () => process.stdout.write(`bullmq worker ${name} ready\n`));
  const stop = () => worker.close().then(() => process.exit(0), () => process.exit(1));
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

main();
