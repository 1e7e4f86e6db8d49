// Adds BullMQ jobs through BullMQ's own Queue.add (its addStandardJob script), driven by a
// Python parent over pipes (chaos/load/bullmq.py; docs/bullmq.md says why not a Python port).
//
// Environment: CHAOS_VALKEY_URL, CHAOS_QUEUE, CHAOS_PREFIX, CHAOS_NAME (the connection's client
// name; default "producer"). Protocol, one JSON object per line:
//   stdin   {"id": "job-0000001", "data": {"handler_ms": 50, "crash": false, "pad": "..."},
//            "opts": {"attempts": 3}}     (opts: BullMQ's own job options, optional)
//   stdout  {"id": "job-0000001", "ok": true}        once the server acknowledged the add
//           {"id": "job-0000001", "ok": false, "error": "..."}
// Replies come in request order. The first line on stdout is {"ready": true}.
'use strict';

const readline = require('readline');
const { Queue } = require('bullmq');

function setting(name, fallback) {
  const raw = process.env[name];
  if (raw === undefined || raw === '') {
    if (fallback === undefined) {
      process.stderr.write(`bullmq producer: ${name} is not set\n`);
      process.exit(3);
    }
    return fallback;
  }
  return raw;
}

async function main() {
  const url = setting('CHAOS_VALKEY_URL');
  const queueName = setting('CHAOS_QUEUE');
  const prefix = setting('CHAOS_PREFIX', 'bull').replace(/:$/, '') || 'bull';
  const name = setting('CHAOS_NAME', 'producer');
  const queue = new Queue(queueName, {
    connection: { url, connectionName: name, maxRetriesPerRequest: 1 },
    prefix,
  });
  queue.on('error', error => process.stderr.write(`bullmq producer: ${error.message}\n`));
  await queue.waitUntilReady();
  const write = line => process.stdout.write(JSON.stringify(line) + '\n');
  write({ ready: true });

  // Replies in request order, however the adds interleave.
  let chain = Promise.resolve();
  const lines = readline.createInterface({ input: process.stdin });
  lines.on('line', line => {
    if (!line.trim()) return;
    let request;
    try {
      request = JSON.parse(line);
    } catch (error) {
      chain = chain.then(() => write({ id: null, ok: false, error: `bad request: ${line}` }));
      return;
    }
    const options = { ...(request.opts || {}), jobId: String(request.id) };
    const added = queue.add('job', request.data || {}, options).then(
      () => ({ id: request.id, ok: true }),
      error => ({ id: request.id, ok: false, error: error.message }));
    chain = chain.then(() => added.then(write));
  });
  lines.on('close', () => {
    chain.then(() => queue.close()).then(() => process.exit(0), () => process.exit(1));
  });
}

main().catch(error => {
  process.stderr.write(`bullmq producer: ${error.message}\n`);
  process.exit(3);
});
