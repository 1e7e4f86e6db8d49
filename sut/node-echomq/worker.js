// An EchoMQ worker in Node.js, a system under test of the contract in docs/sut.md.
//
// CHAOS_CONCURRENCY slots each claim a job (claim.lua: the lease and its fencing token, the
// attempt), run its handler (the payload's handler_ms; "crash": true kills this process, a
// poison pill) and complete it with its attempt (complete.lua: accepted only from the live
// lease). A heartbeat renews every held lease each CHAOS_HEARTBEAT_MS (extend.lua); a rejected
// renewal means the lease is gone, so the handler stops and its complete, still sent once, is
// rejected by the server. The scripts are called with their "no event" flag: this worker writes
// no events stream, the run's history comes from the MONITOR recorder. ECHOMQ_NODE_RECORD=1
// calls them recording instead, for [history] source = "scripts" or "both".
//
// ECHOMQ_NODE_BREAK=unfenced-complete (or --break unfenced-complete) breaks it on purpose: the
// complete ignores the attempt and whether the lease is still live (complete_unfenced.lua), so
// a worker that wakes up after its jobs were re-run elsewhere completes them a second time.
// --break misnamed: every call names the worker "impostor" instead of CHAOS_NAME (the holder
// a script records is then not the process that holds the lease).
'use strict';

const { settings, keys, connect, defineScripts, sleep } = require('./echomq');

const BREAKS = ['unfenced-complete', 'misnamed'];
// '0': the scripts append no event (the history is the recorder's); '1': they record it.
const RECORD_FLAG = process.env.ECHOMQ_NODE_RECORD === '1' ? '1' : '0';

function breakSwitch(argv) {
  const at = argv.indexOf('--break');
  const chosen = at >= 0 ? argv[at + 1] : process.env.ECHOMQ_NODE_BREAK || '';
  if (chosen && !BREAKS.includes(chosen)) {
    console.error(`node-echomq: break ${JSON.stringify(chosen)}: expected one of ${BREAKS}`);
    process.exit(2);
  }
  return chosen;
}

const config = settings();
const k = keys(config);
const broken = breakSwitch(process.argv.slice(2));
const completeScript = broken === 'unfenced-complete' ? 'complete_unfenced.lua' : 'complete.lua';
const callerName = broken === 'misnamed' ? 'impostor' : config.name; // the worker the calls name
const SCRIPTS = [
  ['claimJob', 'claim.lua', 3],
  ['extendLease', 'extend.lua', 2],
  ['completeJob', completeScript, 2],
];

const client = connect(config);
const heartbeatClient = connect(config); // renewals never queue behind a slot's call
defineScripts(client, config, SCRIPTS);
defineScripts(heartbeatClient, config, SCRIPTS);

const held = new Map(); // job id -> { attempt, lost: Promise resolved when the lease is lost }
let stopping = false;

function log(message) {
  console.log(`${new Date().toISOString()} ${config.name} ${message}`);
}

async function claim() {
  const reply = await client.claimJob(k.pending, k.active, k.events, k.jobPrefix,
    String(config.leaseMs), callerName, RECORD_FLAG);
  if (!reply) return null;
  const [id, payload, attempt] = reply;
  return { id, payload: payload || '', attempt: Number(attempt) };
}

function parsePayload(payload) {
  try {
    const job = JSON.parse(payload);
    return { handlerMs: Number(job.handler_ms) || 0, crash: job.crash === true };
  } catch {
    return { handlerMs: 0, crash: payload.startsWith('poison') };
  }
}

async function work(job) {
  let markLost;
  const lost = new Promise((resolve) => { markLost = resolve; });
  held.set(job.id, { attempt: job.attempt, markLost });
  const { handlerMs, crash } = parsePayload(job.payload);
  if (crash) {
    log(`poison job ${job.id} attempt ${job.attempt}: crashing`);
    process.kill(process.pid, 'SIGKILL');
  }
  const outcome = await Promise.race([sleep(handlerMs).then(() => 'done'), lost]);
  if (outcome === 'lost') log(`lease on ${job.id} attempt ${job.attempt} lost: handler stopped`);
  held.delete(job.id);
  try {
    // Fenced by the attempt: the server, not this worker, decides whether it counts.
    const accepted = await client.completeJob(k.active, k.events, k.jobPrefix, job.id,
      String(job.attempt), callerName, RECORD_FLAG, String(config.completedRetentionMs));
    if (Number(accepted) !== 1) log(`complete of ${job.id} attempt ${job.attempt} rejected`);
  } catch (error) {
    log(`complete of ${job.id} failed: ${error.message}`);
  }
}

async function slot() {
  while (!stopping) {
    let job = null;
    try {
      job = await claim();
    } catch (error) {
      log(`claim failed: ${error.message}`);
    }
    if (job === null) {
      await sleep(config.pollMs);
      continue;
    }
    await work(job);
  }
}

async function renew() {
  for (const [id, lease] of [...held.entries()]) {
    let deadline;
    try {
      deadline = await heartbeatClient.extendLease(k.active, k.events, k.jobPrefix, id,
        String(lease.attempt), String(config.leaseMs), callerName, '', RECORD_FLAG);
    } catch (error) {
      log(`extend of ${id} failed: ${error.message}`);
      continue;
    }
    const current = held.get(id);
    if (deadline === null && current && current.attempt === lease.attempt) {
      held.delete(id);
      current.markLost('lost');
    }
  }
}

// A fixed-rate heartbeat: a beat that overruns its period starts the next one at once, not
// a period after it ends.
async function heartbeat() {
  let next = Date.now();
  while (!stopping || held.size > 0) {
    next += config.heartbeatMs;
    await sleep(Math.max(0, next - Date.now()));
    next = Math.max(next, Date.now() - config.heartbeatMs);
    await renew();
  }
}

async function main() {
  await client.ping();
  await heartbeatClient.ping();
  log(`ready: ${config.concurrency} slots, lease ${config.leaseMs} ms, heartbeat ` +
      `${config.heartbeatMs} ms${broken ? `, BROKEN: ${broken}` : ''}`);
  const beating = config.heartbeatMs > 0 ? heartbeat() : Promise.resolve();
  const slots = Array.from({ length: config.concurrency }, () => slot());
  await Promise.all(slots);
  await beating;
  client.disconnect();
  heartbeatClient.disconnect();
  log('stopped');
}

process.on('SIGTERM', () => {
  log('SIGTERM: finishing held jobs, claiming no more');
  stopping = true;
});

main().catch((error) => {
  console.error(`${config.name}: ${error.stack || error}`);
  process.exit(1);
});
